// One round of a bench of a root sandbox's bubblewrap sessions, shared by
// sandbox-session-uids.ts and sandbox-syscall-filter.ts: a sandbox started
// with the round's options, `warmup` sessions unmeasured, then `sessions`
// one at a time, each the SDK's fake harness making one call to the scripted
// model through the in-sandbox LLM forwarder. Returns the CPU a session of
// this process (the sandbox, the client and the model run in it, the same in
// every variant) and the median session time.
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { ProtocolVersion } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { SandboxService, SessionStatus, type RunSessionResponse } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { startSandbox, type RunningSandbox, type SandboxConfig } from "@oz0/sandbox";
import { testCredentials } from "@oz0/serving/testing";
import { percentile } from "./bench-report.js";

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const HARNESS = path.join(REPO, "sdk", "harness-ts", "bin", "oz0-fake-harness.js");

export interface SessionRoundResult {
  cpuMs: number;
  p50Ms: number;
}

export async function sessionRound(options: {
  /** Besides a root of its own, bwrap, the repository read-only and the test credentials. */
  sandbox: Omit<SandboxConfig, "root">;
  modelUrl: string;
  sessions: number;
  warmup: number;
  /** Throws when the sandbox did not start as the variant needs (e.g. its sessions' uids). */
  check?: (sandbox: RunningSandbox) => void;
}): Promise<SessionRoundResult> {
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-bench-sessions-"));
  const sandbox = await startSandbox({
    port: 0,
    root,
    isolation: "bwrap",
    readOnlyPaths: [REPO],
    auth: testCredentials.settingsFor("sandbox"),
    ...options.sandbox,
  });
  try {
    options.check?.(sandbox);
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
                llm: { anthropicBaseUrl: options.modelUrl, token: "bench-token" },
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
    for (let i = 0; i < options.warmup; i++) await session();
    const before = process.cpuUsage();
    const times: number[] = [];
    for (let i = 0; i < options.sessions; i++) times.push(await session());
    const used = process.cpuUsage(before);
    return {
      cpuMs: (used.user + used.system) / 1000 / options.sessions,
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
