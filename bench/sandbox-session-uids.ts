// What running a root sandbox's bubblewrap sessions under uids of their own
// costs (services/sandbox README, "Run by root: a uid per session"): the same
// sessions, one at a time, through a sandbox whose sessions each take a uid
// of the range, and through one whose sessions run as root's uid 0 in a user
// namespace (as before, and as the sandbox still does when the range cannot
// be used: here forced by a setpriv that does not exist), the two taking
// turns going first. Each session is the SDK's fake harness making one call
// to the scripted model through the in-sandbox LLM forwarder. Prints the
// sandbox's CPU per session (this process's: the sandbox, the client and the
// model run in it, the same in both) and the median session time, and their
// ratios. Needs root and a bwrap that works.
//
//   node --import tsx bench/sandbox-session-uids.ts [--sessions 40] [--rounds 4] [--warmup 5]
import path from "node:path";
import { startScriptedModel } from "@oz0/harness/testing";
import { benchOptions } from "./bench-options.js";
import { startReport } from "./bench-report.js";
import { REPO, sessionRound, type SessionRoundResult } from "./sandbox-session-rounds.js";

const {
  sessions: SESSIONS,
  rounds: ROUNDS,
  warmup: WARMUP,
} = benchOptions({
  sessions: { type: "number", default: 40 },
  rounds: { type: "number", default: 4 },
  warmup: { type: "number", default: 5 },
});

const report = startReport("sandbox-session-uids");
if (process.getuid?.() !== 0) {
  console.log("needs root: only a root sandbox runs its sessions under uids of their own");
  report.end();
  process.exit(1);
}
const model = await startScriptedModel({
  turns: () => ({ text: "hello", usage: { input: 10, output: 2 } }),
  isSideCall: () => false,
});

type Kind = "uids" | "own";

/** One sandbox of `kind`, `WARMUP` sessions unmeasured, then `SESSIONS` one at a time. */
function round(kind: Kind): Promise<SessionRoundResult> {
  return sessionRound({
    sandbox: kind === "own" ? { setprivPath: path.join(REPO, "no-setpriv-here") } : {},
    modelUrl: model.url,
    sessions: SESSIONS,
    warmup: WARMUP,
    check(sandbox) {
      if ((sandbox.sessionUids !== undefined) !== (kind === "uids"))
        throw new Error(
          `the sandbox for "${kind}" runs its sessions ${sandbox.sessionUids ? "under uids" : "as its own user"}`,
        );
    },
  });
}

const results: Record<Kind, SessionRoundResult[]> = { uids: [], own: [] };
try {
  for (let r = 0; r < ROUNDS; r++) {
    for (const kind of (r % 2 === 0 ? ["uids", "own"] : ["own", "uids"]) as Kind[]) {
      const result = await round(kind);
      results[kind].push(result);
      console.log(
        `round ${r + 1} ${kind}: ${result.cpuMs.toFixed(2)} ms of CPU a session, median session ${result.p50Ms.toFixed(1)} ms`,
      );
    }
  }
  report.ratio(
    "CPU a session, under uids / as root's uid 0",
    results.uids.map((u, i) => u.cpuMs / results.own[i]!.cpuMs),
  );
  report.ratio(
    "median session time, under uids / as root's uid 0",
    results.uids.map((u, i) => u.p50Ms / results.own[i]!.p50Ms),
  );
} finally {
  await model.close();
  report.end();
}
