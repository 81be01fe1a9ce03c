// Cases about how a session ends: cancellation (rule 5), the processes a
// harness leaves behind, and the turn limit.
import { writeFileSync } from "node:fs";
import path from "node:path";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { checkSession, endedWith, stderrHint, stopReasonName } from "./case-checks.js";
import type { ConformanceCase } from "./case-checks.js";
import { check, runScenario } from "./conformance-scenario.js";
import type { ScenarioRun, ScenarioSettings } from "./conformance-scenario.js";
import { containmentWarning } from "./session-processes.js";

/** Runs a session and cancels it (SIGTERM to its group) while the harness waits on its model. */
async function cancelledSession(
  settings: ScenarioSettings,
  id: string,
  verify: (run: ScenarioRun) => void,
): Promise<void> {
  let release: () => void = () => {};
  const hang = new Promise<void>((resolve) => (release = resolve));
  let cancelled = false;
  try {
    await runScenario(
      settings,
      {
        id,
        input: "Think for a long time.",
        turn: async (_request, { session }) => {
          cancelled = true;
          session.cancel("conformance: cancellation case");
          await hang;
          return { text: "too late" };
        },
      },
      (run) => {
        // A harness that ends before its first model call (a one-route harness refusing the other) was never
        // cancelled: say what it did instead of judging its ending as a cancellation.
        check(
          cancelled,
          run.violations[0] ??
            `the harness ended the session itself ${endedWith(run.outcome)} before the kit cancelled it; the kit cancels a session while it waits on its model, and this one made no model call${stderrHint(run)}`,
        );
        verify(run);
      },
    );
  } finally {
    release();
  }
}

function checkNothingLeft(run: ScenarioRun, when: string): void {
  const [escaped] = run.leftovers.escaped;
  check(
    escaped === undefined,
    `process ${escaped?.pid} (${escaped?.command}) left the session's process group (setsid, or a daemon) and was still running 1 s ${when}; SIGTERM goes to the process group only, so it never hears of the session's end, and the runtime kills it (as the kit did); a harness stops what it started before it exits`,
  );
  const named = run.leftovers.inGroupProcesses.map((p) => `${p.pid} (${p.command})`).join(", ");
  check(
    !run.leftovers.inGroup,
    `processes of the harness${named ? ` (${named})` : ""} were still running in its process group 1 s ${when} (the kit killed them); a harness waits for what it started before it exits`,
  );
}

export const LIFECYCLE_CASES: readonly ConformanceCase[] = [
  {
    id: "max-turns",
    title: "stops at limits.max_turns with STOP_REASON_MAX_TURNS",
    rule: "Limits.max_turns",
    level: "required",
    needsTools: true,
    async run(settings) {
      await runScenario(
        settings,
        {
          id: "max-turns",
          input: "Keep reading notes.txt.",
          maxTurns: 2,
          needsTools: true,
          turn: (_request, { profile, workDir }) => {
            writeFileSync(path.join(workDir, "notes.txt"), "read me again");
            return {
              toolCalls: [{ name: profile.readFile.tool, input: profile.readFile.input(workDir, "notes.txt") }],
            };
          },
        },
        (run) => {
          checkSession(run);
          check(
            run.modelRequests.length <= 2,
            `the harness made ${run.modelRequests.length} model calls with max_turns 2`,
          );
          const reason = run.outcome.result?.stopReason;
          check(
            reason === StopReason.MAX_TURNS,
            `the result's stop reason is ${stopReasonName(reason)}, expected STOP_REASON_MAX_TURNS`,
          );
        },
      );
    },
  },
  {
    id: "cancellation",
    title: "SIGTERM ends the session within the grace period, without a protocol error",
    rule: "rule 5",
    level: "required",
    async run(settings) {
      await cancelledSession(settings, "cancellation", (run) => {
        checkSession(run, "cancelled");
      });
    },
  },
  {
    id: "cancelled-result",
    title: "after SIGTERM the harness writes a result with STOP_REASON_CANCELLED before it exits",
    rule: "rule 5",
    level: "required",
    async run(settings) {
      await cancelledSession(settings, "cancelled-result", (run) => {
        const { result, exitCode, signal } = run.outcome;
        check(
          result !== undefined,
          `the harness exited (${signal ?? `code ${exitCode}`}) after SIGTERM without writing a result; a harness that gets SIGTERM writes a result with STOP_REASON_CANCELLED, then exits`,
        );
        check(
          result.stopReason === StopReason.CANCELLED,
          `after SIGTERM the result's stop reason is ${stopReasonName(result.stopReason)}, expected STOP_REASON_CANCELLED`,
        );
      });
    },
  },
  {
    id: "processes",
    title: "nothing the harness started outlives the session, in its process group or out of it (setsid)",
    rule: "rule 5",
    level: "required",
    anyRoute: true,
    async run(settings) {
      await runScenario(settings, { id: "processes", input: "Say hello.", turn: () => ({ text: "Hello." }) }, (run) => {
        checkNothingLeft(run, "after the harness exited");
      });
      await cancelledSession(settings, "processes-cancelled", (run) => {
        checkNothingLeft(run, "after the harness exited on SIGTERM");
      });
      // Where the kit can only search for them (no cgroup, no subreaper), say so rather than pass silently.
      const warning = containmentWarning();
      if (warning !== undefined) process.emitWarning(warning);
    },
  },
];
