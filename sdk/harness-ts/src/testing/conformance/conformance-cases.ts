// The conformance cases: each runs one scenario and checks one rule of the
// protocol, failing with a message that says what the harness did wrong.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { isDeepStrictEqual } from "node:util";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { Capabilities, SessionEvent } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { check, PLANTED_PROVIDER_KEYS, requestText, runScenario } from "./conformance-scenario.js";
import type { ScenarioRun, ScenarioSettings } from "./conformance-scenario.js";

/** A capability a case needs the harness to declare in `started`. */
export type CapabilityName = keyof Omit<Capabilities, "$typeName" | "$unknown">;

/** One conformance case. */
export interface ConformanceCase {
  /** Stable id, used in expected-failure lists. */
  id: string;
  /** What the case checks, for people. */
  title: string;
  /** Skipped ("not declared") unless the harness declares this capability. */
  requires?: CapabilityName;
  /** Throws {@link ConformanceFailure} when the harness breaks the rule. */
  run(settings: ScenarioSettings): Promise<void>;
}

function stopReasonName(reason: StopReason | undefined): string {
  return reason === undefined ? "no result" : `STOP_REASON_${StopReason[reason]}`;
}

/** The checks every scenario shares: no protocol error, no leftover process, the expected status. */
function checkSession(run: ScenarioRun, status: "completed" | "cancelled" = "completed"): void {
  const [violation] = run.violations;
  check(violation === undefined, violation ?? "");
  const { outcome } = run;
  check(outcome.error === undefined, `the session failed (${outcome.error?.code}): ${outcome.error?.message}${stderrHint(run)}`);
  check(!outcome.leftoverProcesses, "processes of the harness were still running in its process group after it exited");
  check(outcome.status === status, `the session ended ${outcome.status}, expected ${status}`);
  if (status === "completed") {
    check(outcome.result !== undefined, "the harness wrote no result");
  }
}

function stderrHint(run: ScenarioRun): string {
  const tail = run.outcome.stderrTail.trim().split("\n").slice(-3).join(" | ");
  return tail === "" ? "" : ` (stderr: ${tail.length > 300 ? `…${tail.slice(-300)}` : tail})`;
}

function checkCompletedNormally(run: ScenarioRun): void {
  checkSession(run);
  const reason = run.outcome.result?.stopReason;
  check(
    reason === StopReason.COMPLETED,
    `the result's stop reason is ${stopReasonName(reason)}, expected STOP_REASON_COMPLETED${run.outcome.result?.error ? ` (error: ${run.outcome.result.error})` : ""}`,
  );
}

function allText(events: SessionEvent[]): string {
  return events.flatMap((e) => (e.event.case === "text" ? [e.event.value.text] : [])).join("");
}

function fileContent(file: string): string | undefined {
  return existsSync(file) ? readFileSync(file, "utf8") : undefined;
}

const RUNTIME_TOOL = "oz0_conformance_lookup";
const OUTSIDE_SECRET = "oz0-conformance-outside-secret-5d1c";

/** Every case, in the order they run. */
export const CONFORMANCE_CASES: readonly ConformanceCase[] = [
  {
    id: "handshake",
    title: "started first with protocol version 1, exactly one result, then exit",
    async run(settings) {
      await runScenario(settings, { id: "handshake", input: "Say hello.", turn: () => ({ text: "Hello from the scripted model." }) }, (run) => {
        checkCompletedNormally(run);
        check(run.outcome.started !== undefined, "the harness never wrote a started event");
        check(run.outcome.exitCode === 0, `the harness exited with ${run.outcome.signal ?? `code ${run.outcome.exitCode}`} after a completed result`);
      });
    },
  },
  {
    id: "text",
    title: "the model's text reaches the runtime as text events and the result",
    async run(settings) {
      const answer = "The answer is 42, said the scripted model.";
      await runScenario(settings, { id: "text", input: "What is the answer?", turn: () => ({ text: answer }) }, (run) => {
        checkCompletedNormally(run);
        check(allText(run.events).includes(answer), `no text event carried the model's text ${JSON.stringify(answer)}`);
        check(run.outcome.result?.text.includes(answer), `the result's text ${JSON.stringify(run.outcome.result?.text)} is not the model's final text`);
      });
    },
  },
  {
    id: "model-headers",
    title: "every model call carries Oz0-Job, Oz0-Agent and the session token, never a provider key",
    async run(settings) {
      await runScenario(settings, {
        id: "model-headers",
        input: "Read notes.txt, then answer.",
        turn: (request, { profile, workDir, call }) => {
          if (call === 1) {
            writeFileSync(path.join(workDir, "notes.txt"), "some notes");
            return { toolCalls: [{ name: profile.readFile.tool, input: profile.readFile.input(workDir, "notes.txt") }] };
          }
          return { text: "Done reading." };
        },
      }, (run) => {
        checkSession(run);
        check(run.allRequests.length > 0, "the harness made no model call");
        const forbidden = [...Object.values(PLANTED_PROVIDER_KEYS), process.env.ANTHROPIC_API_KEY, process.env.OPENAI_API_KEY].filter(
          (key): key is string => typeof key === "string" && key.length >= 8,
        );
        for (const [index, request] of run.allRequests.entries()) {
          const where = `model call ${index + 1} (${request.method} ${request.path})`;
          const h = request.headers;
          check(h["oz0-job"] === run.jobId, `${where} has Oz0-Job ${JSON.stringify(h["oz0-job"] ?? null)}, expected ${JSON.stringify(run.jobId)}`);
          check(h["oz0-agent"] === run.agentHeader, `${where} has Oz0-Agent ${JSON.stringify(h["oz0-agent"] ?? null)}, expected ${JSON.stringify(run.agentHeader)}`);
          const sent = JSON.stringify(h) + requestText(request);
          check(!forbidden.some((key) => sent.includes(key)), `${where} sent a provider key from the environment; harnesses use only the session token`);
          check(h["x-api-key"] === run.token || h.authorization === `Bearer ${run.token}`, `${where} does not carry the session token as x-api-key or Authorization: Bearer`);
        }
      });
    },
  },
  {
    id: "permission-allow",
    title: "asks before a tool call and runs it when allowed",
    requires: "permissions",
    async run(settings) {
      let askedBeforeRun = true;
      await runScenario(settings, {
        id: "permission-allow",
        input: "Write allowed.txt.",
        permissions: true,
        turn: (_request, { profile, workDir, call }) =>
          call === 1 ? { toolCalls: [{ name: profile.writeFile.tool, input: profile.writeFile.input(workDir, "allowed.txt", "allowed content") }] } : { text: "Wrote it." },
        onEvent: (event, r) => {
          if (event.event.case === "permissionRequest" && existsSync(path.join(r.workDir, "allowed.txt"))) askedBeforeRun = false;
        },
      }, (run) => {
        checkCompletedNormally(run);
        const asks = run.events.filter((e) => e.event.case === "permissionRequest");
        check(asks.length > 0, "the harness ran a tool call without writing a permission_request first");
        check(askedBeforeRun, "the harness wrote allowed.txt before the permission was answered");
        check(fileContent(path.join(run.workDir, "allowed.txt")) === "allowed content", "the allowed tool call did not run (allowed.txt was not written)");
      });
    },
  },
  {
    id: "permission-deny",
    title: "a denied tool call does not run and the model sees the reason",
    requires: "permissions",
    async run(settings) {
      const reason = "Conformance policy forbids writing denied.txt";
      await runScenario(settings, {
        id: "permission-deny",
        input: "Write denied.txt.",
        permissions: true,
        turn: (_request, { profile, workDir, call }) =>
          call === 1 ? { toolCalls: [{ name: profile.writeFile.tool, input: profile.writeFile.input(workDir, "denied.txt", "must not exist") }] } : { text: "Understood, I did not write it." },
        answerPermission: () => ({ allow: false, reason }),
      }, (run) => {
        checkCompletedNormally(run);
        check(run.events.some((e) => e.event.case === "permissionRequest"), "the harness never asked permission for the tool call");
        check(!existsSync(path.join(run.workDir, "denied.txt")), "the tool ran although permission was denied (denied.txt exists)");
        check(run.modelRequests.length >= 2, "the harness did not go back to the model after the denial");
        check(requestText(run.modelRequests[1]).includes(reason), "the model's next request does not contain the denial reason");
      });
    },
  },
  {
    id: "permission-modified-input",
    title: "an allowed call runs with the answer's replacement input",
    requires: "permissions",
    async run(settings) {
      await runScenario(settings, {
        id: "permission-modified-input",
        input: "Write original.txt.",
        permissions: true,
        turn: (_request, { profile, workDir, call }) =>
          call === 1 ? { toolCalls: [{ name: profile.writeFile.tool, input: profile.writeFile.input(workDir, "original.txt", "original content") }] } : { text: "Done." },
        answerPermission: (_request, r) => ({
          allow: true,
          input: (r.profile ?? fallbackProfile()).writeFile.input(r.workDir, "modified.txt", "modified content") as never,
        }),
      }, (run) => {
        checkCompletedNormally(run);
        check(!existsSync(path.join(run.workDir, "original.txt")), "the harness ran the call with the requested input, not the answer's replacement (original.txt exists)");
        check(fileContent(path.join(run.workDir, "modified.txt")) === "modified content", "the call did not run with the answer's replacement input (modified.txt missing or wrong)");
      });
    },
  },
  {
    id: "cancellation",
    title: "SIGTERM ends the session with a cancelled result (or a clean exit) within the grace, nothing left running",
    async run(settings) {
      let release: () => void = () => {};
      const hang = new Promise<void>((resolve) => (release = resolve));
      try {
        await runScenario(settings, {
          id: "cancellation",
          input: "Think for a long time.",
          turn: async (_request, { session }) => {
            // The harness is now waiting on its model: cancel it there.
            session.cancel("conformance: cancellation case");
            await hang;
            return { text: "too late" };
          },
        }, (run) => {
          checkSession(run, "cancelled");
          const { result, exitCode, signal } = run.outcome;
          if (result !== undefined) {
            check(result.stopReason === StopReason.CANCELLED, `after SIGTERM the result's stop reason is ${stopReasonName(result.stopReason)}, expected STOP_REASON_CANCELLED`);
          } else {
            check(exitCode === 0 || signal === "SIGTERM", `the harness wrote no cancelled result and exited with ${signal ?? `code ${exitCode}`}`);
          }
        });
      } finally {
        release();
      }
    },
  },
  {
    id: "max-turns",
    title: "stops at limits.max_turns with STOP_REASON_MAX_TURNS",
    async run(settings) {
      await runScenario(settings, {
        id: "max-turns",
        input: "Keep reading notes.txt.",
        maxTurns: 2,
        turn: (_request, { profile, workDir }) => {
          writeFileSync(path.join(workDir, "notes.txt"), "read me again");
          return { toolCalls: [{ name: profile.readFile.tool, input: profile.readFile.input(workDir, "notes.txt") }] };
        },
      }, (run) => {
        checkSession(run);
        check(run.modelRequests.length <= 2, `the harness made ${run.modelRequests.length} model calls with max_turns 2`);
        const reason = run.outcome.result?.stopReason;
        check(reason === StopReason.MAX_TURNS, `the result's stop reason is ${stopReasonName(reason)}, expected STOP_REASON_MAX_TURNS`);
      });
    },
  },
  {
    id: "unknown-fields",
    title: "unknown fields in the request and in answers are ignored",
    async run(settings) {
      await runScenario(settings, {
        id: "unknown-fields",
        input: "Read notes.txt.",
        permissions: true,
        injectUnknownFields: true,
        turn: (_request, { profile, workDir, call }) => {
          if (call > 1) return { text: "Unknown fields were ignored." };
          writeFileSync(path.join(workDir, "notes.txt"), "notes");
          return { toolCalls: [{ name: profile.readFile.tool, input: profile.readFile.input(workDir, "notes.txt") }] };
        },
      }, (run) => {
        checkCompletedNormally(run);
        check(run.outcome.result?.text.includes("Unknown fields were ignored."), "the harness did not finish normally when the request and answers carried unknown fields");
      });
    },
  },
  {
    id: "working-dir",
    title: "file tools stay inside the working directory (writes and reads)",
    async run(settings) {
      await runScenario(settings, {
        id: "working-dir",
        input: "Write files outside the working directory.",
        turn: (_request, { profile, workDir, caseDir, call }) => {
          if (call === 1) return { toolCalls: [{ name: profile.writeFile.tool, input: profile.writeFile.input(workDir, "../escaped-relative.txt", "escaped") }] };
          if (call === 2) return { toolCalls: [{ name: profile.writeFile.tool, input: profile.writeFile.input(workDir, path.join(caseDir, "escaped-absolute.txt"), "escaped") }] };
          if (call === 3) {
            writeFileSync(path.join(caseDir, "outside-secret.txt"), OUTSIDE_SECRET);
            return { toolCalls: [{ name: profile.readFile.tool, input: profile.readFile.input(workDir, "../outside-secret.txt") }] };
          }
          return { text: "Done trying." };
        },
      }, (run) => {
        checkSession(run);
        check(!existsSync(path.join(run.caseDir, "escaped-relative.txt")), "the harness wrote ../escaped-relative.txt outside the working directory");
        check(!existsSync(path.join(run.caseDir, "escaped-absolute.txt")), "the harness wrote an absolute path outside the working directory");
        check(!run.modelRequests.some((r) => requestText(r).includes(OUTSIDE_SECRET)), "the harness read ../outside-secret.txt outside the working directory and sent it to the model");
      });
    },
  },
  {
    id: "runtime-tools",
    title: "offers the runtime's tools to the model and relays calls as runtime_tool_call",
    requires: "runtimeTools",
    async run(settings) {
      const secret = "ALPHA-7731";
      await runScenario(settings, {
        id: "runtime-tools",
        input: "Look up alpha.",
        runtimeTools: [
          {
            name: RUNTIME_TOOL,
            description: "Looks a key up in the conformance table.",
            inputSchema: { type: "object", properties: { key: { type: "string" } }, required: ["key"] },
          },
        ],
        turn: (_request, { call }) => (call === 1 ? { toolCalls: [{ name: RUNTIME_TOOL, input: { key: "alpha" } }] } : { text: `The value is ${secret}.` }),
        answerRuntimeTool: (call) => (call.name === RUNTIME_TOOL && call.input?.key === "alpha" ? { output: { value: secret } } : { isError: true, error: `unexpected call ${call.name}` }),
      }, (run) => {
        checkCompletedNormally(run);
        const first = run.modelRequests[0];
        check(requestText(first).includes(RUNTIME_TOOL), `the first model request does not offer the runtime tool ${RUNTIME_TOOL}`);
        const calls = run.events.flatMap((e) => (e.event.case === "runtimeToolCall" ? [e.event.value] : []));
        check(calls.length > 0, "the model called the runtime tool but the harness wrote no runtime_tool_call");
        check(calls[0]?.name === RUNTIME_TOOL && calls[0].input?.key === "alpha", `the runtime_tool_call has name ${calls[0]?.name} and input ${JSON.stringify(calls[0]?.input)}, not the model's call`);
        check(requestText(run.modelRequests[1]).includes(secret), "the runtime tool's result never reached the model");
      });
    },
  },
  {
    id: "structured-output",
    title: "with an output schema, the result carries the structured output",
    requires: "structuredOutput",
    async run(settings) {
      const expected = { answer: 42, unit: "widgets" };
      await runScenario(settings, {
        id: "structured-output",
        input: "How many widgets?",
        outputSchema: {
          type: "object",
          properties: { answer: { type: "number" }, unit: { type: "string" } },
          required: ["answer", "unit"],
        },
        turn: () => ({ text: JSON.stringify(expected) }),
      }, (run) => {
        checkCompletedNormally(run);
        check(
          isDeepStrictEqual(run.outcome.result?.structuredOutput, expected),
          `the result's structured_output is ${JSON.stringify(run.outcome.result?.structuredOutput ?? null)}, expected ${JSON.stringify(expected)}`,
        );
      });
    },
  },
];

function fallbackProfile(): never {
  throw new Error("no tool profile: the harness offered no known tools");
}
