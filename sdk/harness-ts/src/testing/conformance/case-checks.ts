// What every conformance case shares: the case type and the checks most
// scenarios end with.
import { existsSync, readFileSync } from "node:fs";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { Capabilities, SessionEvent } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { check } from "./conformance-failure.js";
import type { ScenarioRun, ScenarioSettings } from "./conformance-scenario.js";

/** A capability a case needs the harness to declare in `started`. */
export type CapabilityName = keyof Omit<Capabilities, "$typeName" | "$unknown">;

/** `required`: a failure fails the run. `recommended`: a failure is a warning; the run still passes. */
export type CaseLevel = "required" | "recommended";

/** One conformance case. */
export interface ConformanceCase {
  /** Stable id, used in expected-failure lists and `--only`. */
  id: string;
  /** What the case checks, for people. */
  title: string;
  /** The rule it checks, as harness.proto and the SDK README name it (`rule 5`, `ToolCall / ToolResult`, …). */
  rule: string;
  level: CaseLevel;
  /** Not applicable unless the harness declares every one of these capabilities in `started`. */
  requires?: readonly CapabilityName[];
  /** Not applicable unless the harness offers file tools the kit can drive (see the tool profiles). */
  needsTools?: boolean;
  /** What it checks does not depend on the model's route (no model answer is used): it runs on the first route only. */
  anyRoute?: boolean;
  /** Throws {@link ConformanceFailure} when the harness breaks the rule. */
  run(settings: ScenarioSettings): Promise<void>;
}

export function stopReasonName(reason: StopReason | undefined): string {
  return reason === undefined ? "no result" : `STOP_REASON_${StopReason[reason]}`;
}

/** No protocol error, the expected host status, and a result when it completed. */
export function checkSession(run: ScenarioRun, status: "completed" | "cancelled" = "completed"): void {
  const [violation] = run.violations;
  check(violation === undefined, violation ?? "");
  const { outcome } = run;
  check(
    outcome.error === undefined,
    `the session failed (${outcome.error?.code}): ${outcome.error?.message}${deadlineHint(run)}${stderrHint(run)}`,
  );
  check(outcome.status === status, `the session ended ${outcome.status} ${endedWith(outcome)}, expected ${status}`);
  if (status === "completed") {
    check(outcome.result !== undefined, "the harness wrote no result");
  }
  // Cases that drive tools would otherwise blame tools the model never had a chance to call.
  check(
    !run.needsTools || madeModelCall(run),
    `the harness made no model call (it ended ${stopReasonName(outcome.result?.stopReason)}), so the kit's model could not call its tools; this case needs a harness that calls the model, offering it its file tools`,
  );
}

/** Whether the harness called the model at all, on any route or path. */
export function madeModelCall(run: ScenarioRun): boolean {
  return [...run.allRequests, ...run.refusedRequests].some((call) => call.method === "POST");
}

/** How a session ended, for messages: `with a STOP_REASON_ERROR result (error: …)` or `without a result`. */
export function endedWith(outcome: ScenarioRun["outcome"]): string {
  const { result } = outcome;
  if (result === undefined) return "without a result";
  return `with a ${stopReasonName(result.stopReason)} result${result.error ? ` (error: ${result.error})` : ""}`;
}

/**
 * A harness whose lines sit in a block-buffered stdout (Python's print on a
 * pipe) delivers nothing until it exits: the session waits for a permission
 * request that never comes and only its deadline ends it.
 */
function deadlineHint(run: ScenarioRun): string {
  if (run.outcome.error?.code !== "deadline_exceeded" || run.wroteBeforeDeadline) return "";
  return "; the harness wrote no line to stdout before the deadline: if it wrote events, they are still in its stdout buffer; flush stdout after each line (Python: print(line, flush=True); Go: Flush() a bufio.Writer, or write to os.Stdout directly)";
}

/** How much of a harness's stderr a failing case shows: a Go panic or a Python traceback fits. */
export const STDERR_SHOWN_BYTES = 4096;

/**
 * The end of the harness's stderr as lines to append to a message, each on
 * a line of its own below it (an empty string when it wrote none): at most {@link STDERR_SHOWN_BYTES}, from a
 * whole line where the cut falls inside one, saying how much was left out.
 */
export function stderrHint(run: ScenarioRun): string {
  let tail = Buffer.from(run.outcome.stderrTail, "utf8");
  if (tail.length > STDERR_SHOWN_BYTES) tail = tail.subarray(tail.length - STDERR_SHOWN_BYTES);
  const cut = run.stderrBytes > tail.length;
  // The cut may fall inside a line (or a character): start at the next whole line, if there is one.
  const newline = tail.indexOf(0x0a);
  if (cut && newline !== -1 && newline < tail.length - 1) tail = tail.subarray(newline + 1);
  const text = tail.toString("utf8").trimEnd();
  if (text.trim() === "") return "";
  const lines = text.split("\n").map((line) => `    ${line}`.trimEnd());
  const bytes = (n: number): string => n.toLocaleString("en-US");
  const heading = cut
    ? `its stderr ended with (the last ${bytes(Buffer.byteLength(text))} of ${bytes(run.stderrBytes)} bytes; the lines before are not shown)`
    : "its stderr";
  return `\n  ${heading}:\n${lines.join("\n")}`;
}

/**
 * Rule 3, which every scenario ends with, whatever its case checks: exactly
 * one result, nothing after it, and exit code 0 after a completed one. The
 * stack fails a session that breaks it whatever else it did right; a
 * completed result followed by a non-zero exit or a signal is the sandbox's
 * `nonzero_exit_after_result`: the process contradicts its result.
 */
export function checkResultAndExit(run: ScenarioRun): void {
  const { status, result, exitCode, signal, error } = run.outcome;
  check(
    error?.code !== "duplicate_result" && error?.code !== "event_after_result",
    `the session failed (${error?.code}): ${error?.message}${stderrHint(run)}`,
  );
  if (status !== "completed" || result?.stopReason !== StopReason.COMPLETED) return;
  const how = signal !== null ? `was ended by ${signal}` : `exited with code ${exitCode ?? "unknown"}`;
  check(
    signal === null && exitCode === 0,
    `nonzero_exit_after_result: the harness ${how} after writing a completed result; a harness exits with code 0 once its result is out (the stack fails such a session, whatever its result)${stderrHint(run)}`,
  );
}

export function checkCompletedNormally(run: ScenarioRun): void {
  checkSession(run);
  const reason = run.outcome.result?.stopReason;
  check(
    reason === StopReason.COMPLETED,
    `the result's stop reason is ${stopReasonName(reason)}, expected STOP_REASON_COMPLETED${run.outcome.result?.error ? ` (error: ${run.outcome.result.error})` : ""}`,
  );
}

export function allText(events: SessionEvent[]): string {
  return events.flatMap((e) => (e.event.case === "text" ? [e.event.value.text] : [])).join("");
}

export function fileContent(file: string): string | undefined {
  return existsSync(file) ? readFileSync(file, "utf8") : undefined;
}

type EventKind = NonNullable<SessionEvent["event"]["case"]>;
type EventValue<K extends EventKind> = Extract<SessionEvent["event"], { case: K }>["value"];

/** The events of one kind, with their position among all events. */
export function eventsOf<K extends EventKind>(
  events: SessionEvent[],
  kind: K,
): Array<{ index: number; value: EventValue<K> }> {
  const out: Array<{ index: number; value: EventValue<K> }> = [];
  events.forEach((e, index) => {
    if (e.event.case === kind) out.push({ index, value: e.event.value as EventValue<K> });
  });
  return out;
}
