// A harness operation's scratch session runs on its parent's node. When that
// node sends more about the scratch session than a session may
// (OZ0_MAX_SESSION_BYTES), the parent job fails with it, its session stopped:
// failing the operation alone let the parent call it again, each call a new
// scratch session with a budget afresh, so one job took K budgets (attacker
// review). A hostile node on loopback answers for both sessions: the parent
// calls the operation again after each answer, each scratch session sends
// small tool calls without end.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import {
  IsolationMode,
  RunSessionResponseSchema,
  SandboxService,
  type RunSessionRequest,
  type RunSessionResponse,
} from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { createLogger } from "@oz0/serving";
import { LifecycleOutbox } from "../src/cluster/lifecycle-outbox.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import { JobRunner } from "../src/jobs/job-runner.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import { HookStage } from "../src/policy/hook-stage.js";
import { PermissionPolicy } from "../src/policy/permission-policy.js";
import { SandboxClient } from "../src/sessions/sandbox-client.js";
import { StaticPlacement } from "../src/sessions/sandbox-placement.js";
import type { TokenIssuer } from "../src/sessions/session-runner.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { eventually } from "./support/eventually.js";
import { packageDir } from "./support/test-stack.js";

const BUDGET = 64 * 1024;
const CALLS = 8;
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-operation-flood-"));
const scratchSent: number[] = [];
const answers: string[] = [];
const scratchSessions: string[] = [];

const server = http2.createServer(
  connectNodeAdapter({
    routes: (router) =>
      router.service(SandboxService, {
        async *runSession(requests: AsyncIterable<RunSessionRequest>, context): AsyncGenerator<RunSessionResponse> {
          const incoming = requests[Symbol.asyncIterator]();
          const first = (await incoming.next()).value as RunSessionRequest;
          if (first.message.case !== "start") return;
          const sessionId = first.message.value.request!.sessionId;
          let seq = 1;
          const msg = (message: MessageInitShape<typeof RunSessionResponseSchema>["message"]) =>
            create(RunSessionResponseSchema, { seq: BigInt(seq++), message });
          yield create(RunSessionResponseSchema, {
            seq: BigInt(seq++),
            sessionId,
            message: { case: "started", value: { pid: 1, isolation: IsolationMode.NONE } },
          });
          if (sessionId.startsWith("ses_op_")) {
            scratchSessions.push(sessionId);
            // A scratch session: tiny tool calls until the orchestrator lets go (its budget passed).
            let total = 0;
            while (!context.signal.aborted && total < 8 * BUDGET) {
              const r = msg({ case: "event", value: { event: { case: "toolCall", value: { tool: "x" } } } });
              const bytes = toBinary(RunSessionResponseSchema, r).byteLength;
              total += bytes;
              scratchSent.push(bytes); // counted as sent, before the orchestrator may let go
              yield r;
            }
            await new Promise((resolve) => context.signal.addEventListener("abort", resolve));
            return;
          }
          // The parent: call the operation, wait for its answer, call again.
          yield msg({
            case: "event",
            value: {
              event: {
                case: "started",
                value: {
                  protocolVersion: 1,
                  harnessName: "breaker",
                  capabilities: { runtimeTools: true, structuredOutput: true },
                },
              },
            },
          });
          for (let k = 0; k < CALLS; k++) {
            yield msg({
              case: "event",
              value: {
                event: {
                  case: "runtimeToolCall",
                  value: { id: `op-${k}`, name: "check", input: { task: `go ${k}` } },
                },
              },
            });
            for (;;) {
              const next = await incoming.next();
              if (next.done) return;
              if (next.value.message.case === "runtimeToolResult") {
                answers.push(next.value.message.value.error);
                break;
              }
            }
          }
          await new Promise((resolve) => context.signal.addEventListener("abort", resolve));
        },
        listSessions: () => ({ sessions: [], maxSessions: 10 }),
        cancelSession: () => ({ cancelled: true }),
      }),
  }),
);

const tokens: TokenIssuer = {
  mint: async (o) => ({
    token: "t",
    tokenId: `tok_${o.sessionId}`,
    anthropicBaseUrl: "http://127.0.0.1:1",
    openaiBaseUrl: "http://127.0.0.1:1",
    headers: {},
  }),
  revoke: async () => ({ neverUsed: false }),
};
let store: SqliteJobStore;
let runner: JobRunner;
let outbox: LifecycleOutbox;

before(async () => {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  await new PluginRegistry({ store, home }).install({ source: path.join(packageDir, "test/fixtures/operation-flood") });
  const logger = createLogger({ name: "operation-flood", level: "fatal" });
  outbox = new LifecycleOutbox({ url: "http://127.0.0.1:9", store, logger, pollMs: 3_600_000, lingerMs: 3_600_000 });
  runner = new JobRunner({
    store,
    feed: new JobFeed(),
    placement: new StaticPlacement({ runners: [new SandboxClient({ url })] }),
    tokens,
    policy: new PermissionPolicy({ hooks: [new HookStage()] }),
    lifecycle: outbox,
    home,
    logger,
    maxSessionBytes: BUDGET,
    // The node answers CancelSession and goes on: the job ends without it after this.
    stopWaitMs: 1_000,
  });
});

after(async () => {
  await runner?.close();
  await outbox?.close({ timeoutMs: 10 });
  await store?.close();
  server.close();
  rmSync(home, { recursive: true, force: true });
});

void test("a scratch session past the byte budget fails its parent job, and the operation is not called again", async () => {
  const job = await runner.runAgent({ agent: "delegator", input: "go" });
  const ended = await eventually(async () => {
    const current = await store.getJob(job.id);
    return current && (current.state === "failed" || current.state === "succeeded") ? current : undefined;
  }, "the job ending");
  assert.equal(ended.state, "failed");
  assert.match(ended.error, /session_too_large: .* about session ses_op_/);
  // One scratch session's budget, not one per call: a call after the first is answered that the job is ending.
  assert.equal(scratchSessions.length, 1, scratchSessions.join(", "));
  // Its own answer: the operation was stopped with the job it was ending (the job says why).
  assert.match(answers[0] ?? "", /^operation_cancelled: |session_too_large/);
  for (const later of answers.slice(1)) assert.match(later, /^job_ending: /);
  const total = scratchSent.reduce((a, b) => a + b, 0);
  assert.ok(total < 2 * BUDGET + 64 * 1024, `the scratch sessions sent ${total} bytes`);
});
