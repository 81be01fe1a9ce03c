// Cases about permissions (rules 6 and 7): ask before every tool call, run it
// only when the answer allows it with OUTCOME_ANSWERED, with the answer's input;
// and ask once per call, each request under ids of its own.
import { existsSync, writeFileSync } from "node:fs";
import path from "node:path";
import { isDeepStrictEqual } from "node:util";
import type { JsonObject } from "@bufbuild/protobuf";
import { PermissionAnswer_Outcome } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { PermissionRequest } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { checkCompletedNormally, checkSession, eventsOf, fileContent } from "./case-checks.js";
import type { ConformanceCase } from "./case-checks.js";
import { check, requestText, runScenario } from "./conformance-scenario.js";
import type { ScenarioRun } from "./conformance-scenario.js";

export const PERMISSION_CASES: readonly ConformanceCase[] = [
  {
    id: "permission-allow",
    title: "asks before a tool call and runs it when allowed",
    rule: "rule 6",
    level: "required",
    requires: ["permissions"],
    needsTools: true,
    async run(settings) {
      let askedBeforeRun = true;
      await runScenario(
        settings,
        {
          id: "permission-allow",
          input: "Write allowed.txt.",
          permissions: true,
          needsTools: true,
          turn: (_request, { profile, workDir, call }) =>
            call === 1
              ? {
                  toolCalls: [
                    {
                      name: profile.writeFile.tool,
                      input: profile.writeFile.input(workDir, "allowed.txt", "allowed content"),
                    },
                  ],
                }
              : { text: "Wrote it." },
          onEvent: (event, r) => {
            if (event.event.case === "permissionRequest" && existsSync(path.join(r.workDir, "allowed.txt")))
              askedBeforeRun = false;
          },
        },
        (run) => {
          checkCompletedNormally(run);
          const asks = eventsOf(run.events, "permissionRequest");
          check(asks.length > 0, "the harness ran a tool call without writing a permission_request first");
          check(askedBeforeRun, "the harness wrote allowed.txt before the permission was answered");
          checkAskedAsCalled(run, asks, "allowed.txt", "allowed content");
          check(
            fileContent(path.join(run.workDir, "allowed.txt")) === "allowed content",
            "the allowed tool call did not run (allowed.txt was not written)",
          );
        },
      );
    },
  },
  {
    id: "permission-deny",
    title: "a denied tool call does not run and the model sees the reason",
    rule: "rule 6",
    level: "required",
    requires: ["permissions"],
    needsTools: true,
    async run(settings) {
      const reason = "Conformance policy forbids writing denied.txt";
      await runScenario(
        settings,
        {
          id: "permission-deny",
          input: "Write denied.txt.",
          permissions: true,
          needsTools: true,
          turn: (_request, { profile, workDir, call }) =>
            call === 1
              ? {
                  toolCalls: [
                    {
                      name: profile.writeFile.tool,
                      input: profile.writeFile.input(workDir, "denied.txt", "must not exist"),
                    },
                  ],
                }
              : { text: "Understood, I did not write it." },
          answerPermission: () => ({ allow: false, reason }),
        },
        (run) => {
          checkCompletedNormally(run);
          check(
            run.events.some((e) => e.event.case === "permissionRequest"),
            "the harness never asked permission for the tool call",
          );
          check(
            !existsSync(path.join(run.workDir, "denied.txt")),
            "the tool ran although permission was denied (denied.txt exists)",
          );
          check(run.modelRequests.length >= 2, "the harness did not go back to the model after the denial");
          check(
            requestText(run.modelRequests[1]).includes(reason),
            "the model's next request does not contain the denial reason",
          );
        },
      );
    },
  },
  {
    id: "permission-modified-input",
    title: "an allowed call runs with the answer's replacement input",
    rule: "rule 6",
    level: "required",
    requires: ["permissions"],
    needsTools: true,
    async run(settings) {
      await runScenario(
        settings,
        {
          id: "permission-modified-input",
          input: "Write original.txt.",
          permissions: true,
          needsTools: true,
          turn: (_request, { profile, workDir, call }) =>
            call === 1
              ? {
                  toolCalls: [
                    {
                      name: profile.writeFile.tool,
                      input: profile.writeFile.input(workDir, "original.txt", "original content"),
                    },
                  ],
                }
              : { text: "Done." },
          answerPermission: (_request, r) => ({
            allow: true,
            input: (r.profile ?? noProfile()).writeFile.input(r.workDir, "modified.txt", "modified content") as never,
          }),
        },
        (run) => {
          checkCompletedNormally(run);
          check(
            !existsSync(path.join(run.workDir, "original.txt")),
            "the harness ran the call with the requested input, not the answer's replacement (original.txt exists)",
          );
          check(
            fileContent(path.join(run.workDir, "modified.txt")) === "modified content",
            "the call did not run with the answer's replacement input (modified.txt missing or wrong)",
          );
        },
      );
    },
  },
  {
    id: "permission-outcome",
    title: "an answer with allow: true but outcome OUTCOME_TIMED_OUT or OUTCOME_CANCELLED denies the call",
    rule: "rule 6, rule 7",
    level: "required",
    requires: ["permissions"],
    needsTools: true,
    async run(settings) {
      const outcomes = [
        {
          file: "timed-out.txt",
          outcome: PermissionAnswer_Outcome.TIMED_OUT,
          name: "OUTCOME_TIMED_OUT",
          reason: "nobody answered before the deadline",
        },
        {
          file: "cancelled.txt",
          outcome: PermissionAnswer_Outcome.CANCELLED,
          name: "OUTCOME_CANCELLED",
          reason: "the job was cancelled while the call waited",
        },
      ];
      let asked = 0;
      await runScenario(
        settings,
        {
          id: "permission-outcome",
          input: "Write timed-out.txt, then cancelled.txt.",
          permissions: true,
          needsTools: true,
          turn: (_request, { profile, workDir, call }) => {
            const step = outcomes[call - 1];
            return step
              ? {
                  toolCalls: [
                    {
                      name: profile.writeFile.tool,
                      input: profile.writeFile.input(workDir, step.file, "must not exist"),
                    },
                  ],
                }
              : { text: "Neither call ran." };
          },
          // allow: true on purpose: only OUTCOME_ANSWERED may allow a call.
          answerPermission: () => {
            const step = outcomes[asked++];
            return step ? { allow: true, outcome: step.outcome, reason: step.reason } : { allow: true };
          },
        },
        (run) => {
          checkSession(run);
          check(asked > 0, "the harness never asked permission for the tool call");
          for (const step of outcomes) {
            check(
              !existsSync(path.join(run.workDir, step.file)),
              `the tool ran (${step.file} exists) although the answer's outcome was ${step.name}; allow counts only with OUTCOME_ANSWERED, any other outcome denies the call`,
            );
          }
        },
      );
    },
  },
  {
    id: "unique-ids",
    title: "every permission request has an id, and every tool call a call_id, used once in the session",
    rule: "PermissionRequest.id, PermissionRequest.call_id",
    level: "required",
    requires: ["permissions"],
    needsTools: true,
    async run(settings) {
      await runScenario(
        settings,
        {
          id: "unique-ids",
          input: "Read notes.txt twice, then write copy.txt.",
          permissions: true,
          needsTools: true,
          // The same call twice: ids made from the tool and its input would repeat.
          turn: (_request, { profile, workDir, call }) => {
            if (call === 1) writeFileSync(path.join(workDir, "notes.txt"), "some notes");
            if (call <= 2)
              return {
                toolCalls: [{ name: profile.readFile.tool, input: profile.readFile.input(workDir, "notes.txt") }],
              };
            if (call === 3)
              return {
                toolCalls: [
                  { name: profile.writeFile.tool, input: profile.writeFile.input(workDir, "copy.txt", "some notes") },
                ],
              };
            return { text: "Read it twice and copied it." };
          },
        },
        (run) => {
          // The host fails a session at a repeated id or call id (duplicate_request_id), as the sandbox does.
          checkCompletedNormally(run);
          const asks = eventsOf(run.events, "permissionRequest");
          check(asks.length >= 3, `the harness asked permission ${asks.length} times for the model's 3 tool calls`);
        },
      );
    },
  },
];

/**
 * The permission request for the model's write names its tool and carries
 * its input: the runtime's hooks, policy and the people who approve decide
 * on the request alone, so a request that hides or changes the input (`{}`,
 * a summary) has them approve a call they never saw.
 */
function checkAskedAsCalled(
  run: ScenarioRun,
  asks: ReadonlyArray<{ value: PermissionRequest }>,
  file: string,
  content: string,
): void {
  const profile = run.profile ?? noProfile();
  const { tool } = profile.writeFile;
  const called = profile.writeFile.input(run.workDir, file, content);
  const ask = asks.find((a) => a.value.tool === tool);
  check(
    ask !== undefined,
    `the model called ${tool} but no permission_request names it (requests name: ${asks.map((a) => a.value.tool).join(", ")}); a request carries the harness's own name for the tool it is about`,
  );
  const asked: JsonObject = ask.value.input ?? {};
  const differing = Object.keys(called).filter((key) => !isDeepStrictEqual(asked[key], called[key]));
  check(
    differing.length === 0,
    `the permission_request for the ${tool} call carries the input ${JSON.stringify(asked)}, not the call's ${JSON.stringify(called)} (${differing.join(", ")} missing or changed); the runtime's hooks and the people who approve decide on the request's input, so it must be the input the call runs with`,
  );
}

function noProfile(): never {
  throw new Error("no tool profile: the harness offered no known tools");
}
