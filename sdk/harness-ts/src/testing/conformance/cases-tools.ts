// Cases about tools: the events every tool call produces, the working
// directory, the runtime's tools (offered, relayed, asked about) and
// structured output.
import { existsSync, symlinkSync, writeFileSync } from "node:fs";
import path from "node:path";
import { isDeepStrictEqual } from "node:util";
import { checkCompletedNormally, checkSession, eventsOf } from "./case-checks.js";
import type { ConformanceCase } from "./case-checks.js";
import { check, requestText, runScenario } from "./conformance-scenario.js";
import type { ScenarioRun } from "./conformance-scenario.js";

const RUNTIME_TOOL = "oz0_conformance_lookup";
const RUNTIME_TOOL_SPEC = {
  name: RUNTIME_TOOL,
  description: "Looks a key up in the conformance table.",
  inputSchema: { type: "object", properties: { key: { type: "string" } }, required: ["key"] },
};
const OUTSIDE_SECRET = "oz0-conformance-outside-secret-5d1c";
/** The working-dir case's symlink in the working directory to the folder above it. */
const OUTSIDE_LINK = "up-link";

export const TOOL_CASES: readonly ConformanceCase[] = [
  {
    id: "tool-events",
    title: "every tool call is announced with tool_call and ends with tool_result, tied to its permission request",
    rule: "ToolCall, ToolResult",
    level: "required",
    needsTools: true,
    async run(settings) {
      const permissions = settings.capabilities?.permissions === true;
      const reason = "Conformance policy forbids writing denied.txt";
      await runScenario(
        settings,
        {
          id: "tool-events",
          input: "Read notes.txt, then write denied.txt.",
          permissions,
          needsTools: true,
          turn: (_request, { profile, workDir, call }) => {
            if (call === 1) {
              writeFileSync(path.join(workDir, "notes.txt"), "some notes");
              return {
                toolCalls: [{ name: profile.readFile.tool, input: profile.readFile.input(workDir, "notes.txt") }],
              };
            }
            if (call === 2)
              return {
                toolCalls: [
                  {
                    name: profile.writeFile.tool,
                    input: profile.writeFile.input(workDir, "denied.txt", "must not exist"),
                  },
                ],
              };
            return { text: "Read one file; the write was refused." };
          },
          answerPermission: (request, r) =>
            request.tool === r.profile?.writeFile.tool ? { allow: false, reason } : { allow: true },
        },
        (run) => {
          checkCompletedNormally(run);
          const profile = run.profile;
          const expected = [profile?.readFile.tool, profile?.writeFile.tool];
          const calls = eventsOf(run.events, "toolCall");
          const results = eventsOf(run.events, "toolResult");
          check(
            calls.length > 0,
            `the model called ${expected.join(" and ")} but the harness wrote no tool_call event; every tool call the model makes is announced with a tool_call and ends with a tool_result (the orchestrator audits tool results against permissions)`,
          );
          for (const tool of expected) {
            check(
              calls.some((c) => c.value.tool === tool),
              `the model called ${tool} but no tool_call event names it (tool_calls: ${calls.map((c) => c.value.tool).join(", ")})`,
            );
          }
          const ids = new Set<string>();
          for (const call of calls) {
            const { callId, tool } = call.value;
            check(callId !== "", `the tool_call for ${tool} has no call_id`);
            check(!ids.has(callId), `two tool_call events share the call_id ${JSON.stringify(callId)}`);
            ids.add(callId);
            const result = results.find((r) => r.value.callId === callId);
            check(
              result !== undefined,
              `the ${tool} call ${JSON.stringify(callId)} has a tool_call but no tool_result with its call_id`,
            );
            check(result.index > call.index, `the tool_result of ${JSON.stringify(callId)} came before its tool_call`);
          }
          for (const result of results) {
            check(
              ids.has(result.value.callId),
              `a tool_result has the call_id ${JSON.stringify(result.value.callId)} of no tool_call`,
            );
          }
          if (!permissions) return;
          const asks = eventsOf(run.events, "permissionRequest");
          for (const call of calls) {
            const ask = asks.find((a) => a.value.callId === call.value.callId);
            check(
              ask !== undefined,
              `no permission_request carries the call_id ${JSON.stringify(call.value.callId)} of the ${call.value.tool} tool_call; set PermissionRequest.call_id to the ToolCall it is for (the orchestrator ties results to permissions by it)`,
            );
            check(
              ask.index > call.index,
              `the permission_request for ${JSON.stringify(call.value.callId)} came before its tool_call; the tool_call is sent first`,
            );
          }
          const denied = calls.find((c) => c.value.tool === profile?.writeFile.tool);
          const deniedResult = results.find((r) => r.value.callId === denied?.value.callId);
          check(
            deniedResult?.value.isError === true,
            `the tool_result of the denied ${denied?.value.tool} call is not an error (is_error false); a refused call reports the refusal as an error, or the orchestrator takes it for a call that ran`,
          );
        },
      );
    },
  },
  {
    id: "working-dir",
    title: "file tools stay inside the working directory (writes and reads)",
    rule: "SessionRequest.working_dir",
    level: "required",
    needsTools: true,
    async run(settings) {
      // With permissions on (when declared): the runtime allows every call, so the harness alone keeps them in.
      const permissions = settings.capabilities?.permissions === true;
      await runScenario(
        settings,
        {
          id: "working-dir",
          input: "Write files outside the working directory.",
          permissions,
          needsTools: true,
          turn: (_request, { profile, workDir, caseDir, call }) => {
            if (call === 1)
              return {
                toolCalls: [
                  {
                    name: profile.writeFile.tool,
                    input: profile.writeFile.input(workDir, "../escaped-relative.txt", "escaped"),
                  },
                ],
              };
            if (call === 2)
              return {
                toolCalls: [
                  {
                    name: profile.writeFile.tool,
                    input: profile.writeFile.input(workDir, path.join(caseDir, "escaped-absolute.txt"), "escaped"),
                  },
                ],
              };
            if (call === 3) {
              writeFileSync(path.join(caseDir, "outside-secret.txt"), OUTSIDE_SECRET);
              return {
                toolCalls: [
                  { name: profile.readFile.tool, input: profile.readFile.input(workDir, "../outside-secret.txt") },
                ],
              };
            }
            // A link inside the working directory to the folder above it (a repository can hold one):
            // a path through it is outside, though it reads as inside.
            if (call === 4) {
              symlinkSync(caseDir, path.join(workDir, OUTSIDE_LINK));
              return {
                toolCalls: [
                  {
                    name: profile.writeFile.tool,
                    input: profile.writeFile.input(workDir, `${OUTSIDE_LINK}/escaped-through-link.txt`, "escaped"),
                  },
                ],
              };
            }
            if (call === 5)
              return {
                toolCalls: [
                  {
                    name: profile.readFile.tool,
                    input: profile.readFile.input(workDir, `${OUTSIDE_LINK}/outside-secret.txt`),
                  },
                ],
              };
            return { text: "Done trying." };
          },
        },
        (run) => {
          checkSession(run);
          check(
            !existsSync(path.join(run.caseDir, "escaped-relative.txt")),
            "the harness wrote ../escaped-relative.txt outside the working directory",
          );
          check(
            !existsSync(path.join(run.caseDir, "escaped-absolute.txt")),
            "the harness wrote an absolute path outside the working directory",
          );
          check(
            !existsSync(path.join(run.caseDir, "escaped-through-link.txt")),
            `the harness wrote ${OUTSIDE_LINK}/escaped-through-link.txt, where ${OUTSIDE_LINK} is a symlink in the working directory to the folder above it; compare real paths (realTarget in @oz0/harness), not the path as written`,
          );
          // The model's request after call N carries call N's result (and the history before it).
          const leakedAfterCall = run.modelRequests.findIndex((r) => requestText(r).includes(OUTSIDE_SECRET));
          check(
            leakedAfterCall !== 3,
            "the harness read ../outside-secret.txt outside the working directory and sent it to the model",
          );
          check(
            leakedAfterCall === -1,
            `the harness read ${OUTSIDE_LINK}/outside-secret.txt through a symlink in the working directory to the folder above it, and sent it to the model; compare real paths (realTarget in @oz0/harness), not the path as written`,
          );
          if (permissions) checkResultsAsked(run);
        },
      );
    },
  },
  {
    id: "runtime-tools",
    title: "offers the runtime's tools to the model and relays calls as runtime_tool_call",
    rule: "SessionRequest.runtime_tools",
    level: "required",
    requires: ["runtimeTools"],
    async run(settings) {
      const secret = "ALPHA-7731";
      await runScenario(
        settings,
        {
          id: "runtime-tools",
          input: "Look up alpha.",
          runtimeTools: [RUNTIME_TOOL_SPEC],
          turn: (_request, { call }) =>
            call === 1
              ? { toolCalls: [{ name: RUNTIME_TOOL, input: { key: "alpha" } }] }
              : { text: `The value is ${secret}.` },
          answerRuntimeTool: (call) =>
            call.name === RUNTIME_TOOL && call.input?.key === "alpha"
              ? { output: { value: secret } }
              : { isError: true, error: `unexpected call ${call.name}` },
        },
        (run) => {
          checkCompletedNormally(run);
          const first = run.modelRequests[0];
          check(
            requestText(first).includes(RUNTIME_TOOL),
            `the first model request does not offer the runtime tool ${RUNTIME_TOOL}`,
          );
          const calls = eventsOf(run.events, "runtimeToolCall").map((c) => c.value);
          check(calls.length > 0, "the model called the runtime tool but the harness wrote no runtime_tool_call");
          check(
            calls[0]?.name === RUNTIME_TOOL && calls[0].input?.key === "alpha",
            `the runtime_tool_call has name ${calls[0]?.name} and input ${JSON.stringify(calls[0]?.input)}, not the model's call`,
          );
          check(
            requestText(run.modelRequests[1]).includes(secret),
            "the runtime tool's result never reached the model",
          );
        },
      );
    },
  },
  {
    id: "runtime-tool-permission",
    title: "with permissions on, a runtime tool call is asked about first, and a denied one is never relayed",
    rule: "rule 6",
    level: "required",
    requires: ["permissions", "runtimeTools"],
    async run(settings) {
      const reason = "Conformance policy forbids looking up beta";
      await runScenario(
        settings,
        {
          id: "runtime-tool-permission",
          input: "Look up alpha, then beta.",
          permissions: true,
          runtimeTools: [RUNTIME_TOOL_SPEC],
          turn: (_request, { call }) => {
            if (call === 1) return { toolCalls: [{ name: RUNTIME_TOOL, input: { key: "alpha" } }] };
            if (call === 2) return { toolCalls: [{ name: RUNTIME_TOOL, input: { key: "beta" } }] };
            return { text: "Looked up alpha only." };
          },
          answerPermission: (request) =>
            request.tool === RUNTIME_TOOL && request.input?.key === "beta" ? { allow: false, reason } : { allow: true },
          answerRuntimeTool: (call) => ({ output: { value: `${String(call.input?.key)}-value` } }),
        },
        (run) => {
          checkCompletedNormally(run);
          const asks = eventsOf(run.events, "permissionRequest").filter((a) => a.value.tool === RUNTIME_TOOL);
          const calls = eventsOf(run.events, "runtimeToolCall");
          const alpha = calls.find((c) => c.value.input?.key === "alpha");
          check(
            alpha !== undefined,
            "the model called the runtime tool with key alpha (allowed) but the harness wrote no runtime_tool_call for it",
          );
          check(
            asks.some((a) => a.index < alpha.index),
            `the harness relayed the runtime tool call without a permission_request first; with permissions on, a call of a runtime tool is a tool call like any other: ask first, relay it only when allowed`,
          );
          check(
            !calls.some((c) => c.value.input?.key === "beta"),
            "the harness relayed the runtime tool call with key beta although its permission was denied",
          );
          check(
            run.modelRequests.length >= 3 && requestText(run.modelRequests[2]).includes(reason),
            "the model's request after the denied runtime tool call does not contain the denial reason",
          );
        },
      );
    },
  },
  {
    id: "structured-output",
    title: "with an output schema, the result carries the structured output",
    rule: "SessionRequest.output_schema",
    level: "required",
    requires: ["structuredOutput"],
    async run(settings) {
      const expected = { answer: 42, unit: "widgets" };
      await runScenario(
        settings,
        {
          id: "structured-output",
          input: "How many widgets?",
          outputSchema: {
            type: "object",
            properties: { answer: { type: "number" }, unit: { type: "string" } },
            required: ["answer", "unit"],
          },
          // The model hands structured output in as its final text: exactly the JSON object.
          turn: () => ({ text: JSON.stringify(expected) }),
        },
        (run) => {
          checkCompletedNormally(run);
          check(
            isDeepStrictEqual(run.outcome.result?.structuredOutput, expected),
            `the result's structured_output is ${JSON.stringify(run.outcome.result?.structuredOutput ?? null)}, expected ${JSON.stringify(expected)}`,
          );
        },
      );
    },
  },
];

/**
 * Every tool result is of a call the runtime was asked about, a call the
 * harness refuses itself included: the orchestrator stops a job at a result
 * no permission request covers, whether or not it is an error, because it
 * cannot tell a refusal from a call that ran and failed.
 */
function checkResultsAsked(run: ScenarioRun): void {
  const asked = new Set(eventsOf(run.events, "permissionRequest").flatMap((a) => [a.value.callId, a.value.id]));
  for (const { value: result } of eventsOf(run.events, "toolResult")) {
    check(
      asked.has(result.callId),
      `the harness reported a result for tool call ${JSON.stringify(result.callId)} without a permission_request for it (it refused the call itself?); the orchestrator stops the job at such a result as a policy bypass, an error result included: ask first even about a call you will refuse, then report the refusal as an error result`,
    );
  }
}
