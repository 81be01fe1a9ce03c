// How a job's live events look on a terminal, and as JSON lines for scripts.
import { toJson } from "@bufbuild/protobuf";
import { timestampDate, ValueSchema, type Timestamp, type Value } from "@bufbuild/protobuf/wkt";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import {
  Decider,
  JobEventSchema,
  JobState,
  type AgentVersion,
  type GetJobUsageResponse,
  type Job,
  type JobEvent,
} from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { TextSink } from "./live-terminal.js";
import { fieldText, jsonLine, shellWord, short, terminalLine, terminalText } from "./terminal-text.js";
import { budgetText, costText, durationText, NOMINAL_NOTE, tokensText } from "./usage-format.js";

export function stateName(state: JobState): string {
  return (JobState[state] ?? "UNSPECIFIED").toLowerCase();
}

export function stopReasonName(reason: StopReason): string {
  return (StopReason[reason] ?? "UNSPECIFIED").toLowerCase();
}

/** A tool's output, shortened for a terminal: short outputs whole, long ones by their head and tail. */
export function toolOutput(value: Value | undefined, mark: string): string {
  const json = value ? toJson(ValueSchema, value) : "";
  const text = typeof json === "string" ? json : JSON.stringify(json);
  const lines = text
    .split("\n")
    .map((l) => l.trimEnd())
    .filter((l) => l.trim() !== "");
  const shown =
    lines.length <= 10 ? lines : [...lines.slice(0, 2), `… (${lines.length - 10} more lines)`, ...lines.slice(-8)];
  return (
    shown
      // Each line is a line: a carriage return in it would write over it (terminalText keeps only a CRLF's).
      .map((l, i) => `  ${i === 0 ? mark : " "} ${terminalText(l.length > 200 ? `${l.slice(0, 199)}…` : l)}`)
      .join("\n") || `  ${mark}`
  );
}

/** Bold on, and back to normal intensity (SGR 1 and 22). */
const BOLD = "\x1b[1m";
const NOT_BOLD = "\x1b[22m";

export class EventPrinter {
  readonly #out: TextSink;
  readonly #json: boolean;
  readonly #style: boolean;
  readonly #answerable: boolean;
  #midLine = false;

  /**
   * `out`: a stream, or a LiveTerminal (which keeps a status line below what is printed). `style`: the output
   * is a terminal that shows style (LiveTerminal.live), where the marks of oz0's own lines are bold.
   * `answerable`: whether another command can answer a waiting call (default true); an embedded stack, which
   * stops with this command, is found by no other, so a waiting call's line offers no `oz0 approve` there.
   */
  constructor(options: { out?: TextSink; json: boolean; style?: boolean; answerable?: boolean }) {
    this.#out = options.out ?? process.stdout;
    this.#json = options.json;
    this.#style = options.style === true;
    this.#answerable = options.answerable !== false;
  }

  /**
   * The mark that begins one of oz0's own lines (a call, its result, an approval, the result, the job's end):
   * bold on a terminal that shows style. Nothing a harness or a model writes can be: its escape sequences are
   * printed inert, so a line of the model's text that reads like oz0's (`? Bash waits for approval …`) does
   * not look like one.
   */
  #mark(symbol: string): string {
    return this.#style ? `${BOLD}${symbol}${NOT_BOLD}` : symbol;
  }

  /**
   * Writes a line. What it prints comes from the job's events, so each caller makes it inert: a body (the
   * model's text, a tool's output) with terminalText, a field meant for one line (a tool name, an id, a
   * reason) with terminalLine, so that a line feed in it cannot forge a line of its own.
   */
  #line(text: string): void {
    if (this.#midLine) this.#out.write("\n");
    this.#midLine = false;
    this.#out.write(`${text}\n`);
  }

  print(event: JobEvent): void {
    if (this.#json) {
      this.#out.write(`${jsonLine(toJson(JobEventSchema, event))}\n`);
      return;
    }
    const e = event.event;
    switch (e.case) {
      case "text":
        if (e.value.role === "thinking") return;
        if (e.value.delta) {
          this.#out.write(terminalText(e.value.text));
          this.#midLine = !e.value.text.endsWith("\n");
        } else {
          // A whole text that ends its own line (a graph run's step lines) gets no blank line after it.
          this.#line(terminalText(e.value.text.replace(/\n$/, "")));
        }
        return;
      case "toolCall": {
        // The input always: a title is the harness's own words for the call, and could say anything.
        const title = e.value.title ? `${short(e.value.title, 120)}  ` : "";
        this.#line(`${this.#mark("▸")} ${terminalLine(`${e.value.tool}: ${title}${short(e.value.input ?? {}, 120)}`)}`);
        return;
      }
      case "toolResult":
        this.#line(toolOutput(e.value.output, this.#mark(e.value.isError ? "✗" : "✓")));
        return;
      case "servedToolCall":
        // A tool the orchestrator answered itself, such as a graph manager's decision.
        this.#line(
          `${this.#mark("◆")} ${terminalLine(`${e.value.tool}: ${short(e.value.input ?? {}, 120)}${e.value.error ? ` ✗ ${e.value.error}` : " ✓"}`)}`,
        );
        return;
      case "permissionDecision": {
        const d = e.value;
        if (d.pending)
          this.#line(
            `${this.#mark("?")} ${terminalLine(
              // The id is the harness's: quoted as a shell word in the commands a person copies.
              this.#answerable
                ? `${fieldText(d.tool)} waits for approval (call ${d.id}): oz0 approve ${event.jobId} ${shellWord(d.id)}   or   oz0 deny ${event.jobId} ${shellWord(d.id)} --reason TEXT`
                : `${fieldText(d.tool)} waits for approval (call ${d.id})`,
            )}`,
          );
        else if (!d.allow)
          this.#line(
            `  ${this.#mark("✗")} ${terminalLine(
              `${d.tool} denied${d.decider === Decider.PERSON && d.answeredBy ? ` by ${d.answeredBy}` : ""}: ${d.reason}`,
            )}`,
          );
        else if (d.decider === Decider.PERSON)
          this.#line(
            `  ${this.#mark("✓")} ${terminalLine(`${d.tool} approved${d.answeredBy ? ` by ${d.answeredBy}` : ""}`)}`,
          );
        return;
      }
      case "result":
        this.#line(
          `\n${this.#mark("── result")} (${stopReasonName(e.value.stopReason)}, ${e.value.turns} turn${e.value.turns === 1 ? "" : "s"})`,
        );
        if (e.value.text) this.#line(terminalText(e.value.text));
        if (e.value.error) this.#line(terminalLine(`error: ${e.value.error}`));
        return;
      case "artifacts":
        for (const a of e.value.artifacts)
          this.#line(`${this.#mark("artifact:")} ${terminalLine(`${a.path} (${a.sizeBytes} bytes)`)}`);
        if (e.value.error) this.#line(`${this.#mark("artifacts:")} ${terminalLine(e.value.error)}`);
        return;
      case "stateChanged": {
        const s = e.value.state;
        if (s === JobState.SUCCEEDED || s === JobState.FAILED || s === JobState.CANCELLED) {
          this.#line(
            `${this.#mark("job")} ${terminalLine(`${event.jobId} ${stateName(s)}${e.value.reason ? `: ${e.value.reason}` : ""}`)}`,
          );
        }
        // A pending job with a reason waits for something (room on a node).
        else if (s === JobState.PENDING && e.value.reason)
          this.#line(`${this.#mark("…")} ${terminalLine(e.value.reason)}`);
        return;
      }
      default:
        return;
    }
  }

  /** Finish a line left open by text deltas. */
  end(): void {
    if (this.#midLine && !this.#json) this.#out.write("\n");
    this.#midLine = false;
  }
}

const TERMINAL_STATES = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]);

/**
 * `oz0 jobs show`: state and what it does now, its times to the
 * millisecond and its duration, what it cost, its trace and pinned version.
 * `usage` is the metering (GetJobUsage), or why it is unknown; `agent` the pinned version, for its budget.
 */
export function describeJob(
  job: Job,
  options: { usage?: GetJobUsageResponse | string; agent?: AgentVersion; now?: Date } = {},
): string {
  const at = (t: Timestamp | undefined): string => (t ? timestampDate(t).toISOString() : "");
  const ended = TERMINAL_STATES.has(job.state);
  const lines = [
    `job ${job.id}`,
    // A job runs the version it started on, whatever was published since.
    `  agent     ${job.agent?.name} v${job.agent?.version} (pinned)`,
    `  state     ${stateName(job.state)}`,
  ];
  if (!ended && job.activity) {
    const since = job.activity.since
      ? ` (for ${durationText((options.now ?? new Date()).getTime() - timestampDate(job.activity.since).getTime())})`
      : "";
    lines.push(`  now       ${job.activity.summary}${since}`);
  }
  lines.push(`  input     ${short(job.input, 200)}`, `  created   ${at(job.createdAt)}`);
  if (job.startedAt) lines.push(`  started   ${at(job.startedAt)}`);
  if (job.finishedAt) lines.push(`  finished  ${at(job.finishedAt)}`);
  const from = job.startedAt ?? job.createdAt;
  if (from) {
    const to = job.finishedAt ? timestampDate(job.finishedAt) : (options.now ?? new Date());
    lines.push(
      `  duration  ${durationText(to.getTime() - timestampDate(from).getTime())}${job.finishedAt ? "" : " so far"}${job.startedAt ? "" : " (since created; not started)"}`,
    );
  }
  const usage = options.usage;
  if (typeof usage === "string") lines.push(`  cost      unknown: ${usage}`);
  else if (usage?.usage?.total) {
    const total = usage.usage.total;
    const steps =
      usage.steps.length > 0 ? ` over ${usage.steps.length} step job${usage.steps.length === 1 ? "" : "s"}` : "";
    lines.push(
      `  cost      ${costText(total)}: ${total.calls} model call${total.calls === 1n ? "" : "s"}${steps}, ${tokensText({ input: total.inputTokens, output: total.outputTokens })}`,
    );
    if (total.nominal) lines.push(`            (${NOMINAL_NOTE})`);
  }
  const budget = options.agent ? budgetText(options.agent, "long") : "";
  if (budget) lines.push(`  budget    ${budget}`);
  lines.push(
    `  trace     ${job.traceId || "none: the orchestrator exported no trace for it (set OTEL_EXPORTER_OTLP_ENDPOINT to export traces)"}`,
  );
  if (job.sessionId) lines.push(`  session   ${job.sessionId}`);
  if (job.stopReason) lines.push(`  stop      ${stopReasonName(job.stopReason)}`);
  if (job.error) lines.push(`  error     ${job.error}`);
  if (job.resultText) lines.push(`  result    ${short(job.resultText, 400)}`);
  // The input, the activity, the error and the result are a person's, a harness's or a model's text: each line
  // one line, inert.
  return lines.map(terminalLine).join("\n");
}
