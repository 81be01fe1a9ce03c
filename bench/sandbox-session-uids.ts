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
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startScriptedModel } from "@oz0/harness/testing";
import { ProtocolVersion } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { SandboxService, SessionStatus, type RunSessionResponse } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { startSandbox } from "@oz0/sandbox";
import { testCredentials } from "@oz0/serving/testing";
import { benchOptions } from "./bench-options.js";
import { percentile, startReport } from "./bench-report.js";

const {
  sessions: SESSIONS,
  rounds: ROUNDS,
  warmup: WARMUP,
} = benchOptions({
  sessions: { type: "number", default: 40 },
  rounds: { type: "number", default: 4 },
  warmup: { type: "number", default: 5 },
});
const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const HARNESS = path.join(REPO, "sdk", "harness-ts", "bin", "oz0-fake-harness.js");

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
async function round(kind: Kind): Promise<{ cpuMs: number; p50Ms: number }> {
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-bench-uids-"));
  const sandbox = await startSandbox({
    port: 0,
    root,
    isolation: "bwrap",
    readOnlyPaths: [REPO],
    auth: testCredentials.settingsFor("sandbox"),
    ...(kind === "own" ? { setprivPath: path.join(root, "no-setpriv-here") } : {}),
  });
  try {
    if ((sandbox.sessionUids !== undefined) !== (kind === "uids"))
      throw new Error(
        `the sandbox for "${kind}" runs its sessions ${sandbox.sessionUids ? "under uids" : "as its own user"}`,
      );
    const client = createClient(
      SandboxService,
      createGrpcTransport({ baseUrl: sandbox.url, interceptors: [testCredentials.caller] }),
    );
    const session = async (): Promise<number> => {
      const started = performance.now();
      async function* requests() {
        yield {
          message: {
            case: "start" as const,
            value: {
              command: [process.execPath, HARNESS],
              pluginDir: path.dirname(HARNESS),
              request: {
                protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1,
                jobId: "bench",
                input: "say hello",
                model: { primary: "anthropic/scripted" },
                llm: { anthropicBaseUrl: model.url, token: "bench-token" },
              },
            },
          },
        };
      }
      let last: RunSessionResponse | undefined;
      for await (const message of client.runSession(requests())) last = message;
      if (last?.message.case !== "exited" || last.message.value.status !== SessionStatus.COMPLETED)
        throw new Error(`a session did not complete: ${JSON.stringify(last?.message.value)}`);
      return performance.now() - started;
    };
    for (let i = 0; i < WARMUP; i++) await session();
    const before = process.cpuUsage();
    const times: number[] = [];
    for (let i = 0; i < SESSIONS; i++) times.push(await session());
    const used = process.cpuUsage(before);
    return {
      cpuMs: (used.user + used.system) / 1000 / SESSIONS,
      p50Ms: percentile(
        times.sort((a, b) => a - b),
        0.5,
      ),
    };
  } finally {
    await sandbox.close();
    rmSync(root, { recursive: true, force: true });
  }
}

const results: Record<Kind, { cpuMs: number; p50Ms: number }[]> = { uids: [], own: [] };
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
