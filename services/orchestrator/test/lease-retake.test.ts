// needs: postgres
// A replica that loses a job's lease by its own clock (its renewals lagged on
// a loaded machine) stops working on the job, and often takes the very same
// job again at its next sweep, under a new lease, since nobody else did. The
// work of the first lease may still be in flight then. The cluster acceptance
// test once failed this way: a session's permission request, still being
// decided under the lost lease, was stored under the new one as well, and
// the new follower read its own request back as a repeat
// (duplicate_request_id). Here the job runner runs on real PostgreSQL leases,
// its sessions on a sandbox that replays their messages after a seq, and the
// loss and the retake are made at the moments that matter.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { PermissionRequestSchema, SessionEventSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { createLogger } from "@oz0/serving";
import type { Lease } from "../src/cluster/lease-manager.js";
import { openPostgresCluster, type PostgresCluster } from "../src/cluster/postgres-cluster.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import { JobRunner } from "../src/jobs/job-runner.js";
import { PermissionPolicy, type PermissionStage } from "../src/policy/permission-policy.js";
import { MessageQueue } from "../src/sessions/message-queue.js";
import type { SandboxMessage, SessionChannel, SessionRunner } from "../src/sessions/session-runner.js";
import { StaticPlacement, type SandboxPlacement } from "../src/sessions/sandbox-placement.js";
import type { LostSession } from "../src/cluster/sandbox-node-registry.js";
import type { JobStore, NewAgentVersion } from "../src/store/job-store.js";
import { databaseUrl, dropSchema, eventually, freshSchema } from "./postgres-test-support.js";

const schemas: string[] = [];
const homes: string[] = [];

/** A sandbox node keeping each session's messages, as the real one does: a re-attach gets those after its seq. */
class ReplayingSandbox implements SessionRunner {
  readonly url = "replaying://sandbox";
  readonly #logs = new Map<string, SandboxMessage[]>();
  readonly #followers = new Map<string, MessageQueue<SandboxMessage>[]>();
  readonly #breaks = new Map<string, (() => void)[]>();
  readonly answers: string[] = [];
  reattaches = 0;

  start(options: { request: { sessionId: string } }): SessionChannel {
    this.#logs.set(options.request.sessionId, []);
    const channel = this.#follow(options.request.sessionId, 0);
    this.push(options.request.sessionId, { kind: "started", sessionId: options.request.sessionId });
    return channel;
  }

  reattach(options: { sessionId: string; afterSeq: number }): SessionChannel {
    this.reattaches++;
    return this.#follow(options.sessionId, options.afterSeq);
  }

  async cancel(): Promise<void> {}

  /** The session's next message, to every follower. */
  push(sessionId: string, message: DistributiveOmit<SandboxMessage, "seq">): void {
    const log = this.#logs.get(sessionId)!;
    const sequenced = { ...message, seq: log.length + 1 } as SandboxMessage;
    log.push(sequenced);
    for (const queue of this.#followers.get(sessionId) ?? []) queue.push(sequenced);
  }

  sessions(): string[] {
    return [...this.#logs.keys()];
  }

  /** Every stream of the session breaks (its node went silent); a re-attach gets a new one. */
  breakStreams(sessionId: string): void {
    for (const broken of this.#breaks.get(sessionId) ?? []) broken();
    this.#breaks.set(sessionId, []);
  }

  #follow(sessionId: string, afterSeq: number): SessionChannel {
    const queue = new MessageQueue<SandboxMessage>();
    for (const message of this.#logs.get(sessionId) ?? []) if (message.seq > afterSeq) queue.push(message);
    this.#followers.set(sessionId, [...(this.#followers.get(sessionId) ?? []), queue]);
    const broke = new Promise<"broke">((resolve) =>
      this.#breaks.set(sessionId, [...(this.#breaks.get(sessionId) ?? []), () => resolve("broke")]),
    );
    async function* messages(): AsyncGenerator<SandboxMessage> {
      const next = queue[Symbol.asyncIterator]();
      for (;;) {
        const item = await Promise.race([next.next(), broke]);
        if (item === "broke") throw new Error("the stream broke");
        if (item.done) return;
        yield item.value;
      }
    }
    return {
      [Symbol.asyncIterator]: messages,
      answerPermission: async (answer) => {
        this.answers.push(`${answer.id}:${answer.allow ? "allow" : "deny"}`);
      },
      answerRuntimeTool: async () => undefined,
      close: () => queue.end(),
    };
  }
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

/** A policy hook whose first decision waits until `release()`: a hook that is slow once. */
function slowOnce(): PermissionStage & { asked: Promise<void>; release: () => void } {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let asked!: () => void;
  const wasAsked = new Promise<void>((resolve) => (asked = resolve));
  let calls = 0;
  return {
    name: "slow-once",
    asked: wasAsked,
    release,
    async decide() {
      if (calls++ === 0) {
        asked();
        await released;
      }
      return undefined;
    },
  };
}

const agent: NewAgentVersion = {
  name: "coder",
  contentHash: "h1",
  plugin: "example",
  pluginVersion: "0.1.0",
  pluginPath: "/plugins/example",
  definition: { name: "coder", runtime: "harness:fake", model: { primary: "anthropic/m" }, instructions: "i.md" },
  instructions: "Do it.",
  harness: {
    plugin: "example",
    pluginPath: "/plugins/example",
    manifest: { name: "fake", command: ["oz0-fake-harness"], permissions: true },
  },
} as unknown as NewAgentVersion;

interface Replica {
  cluster: PostgresCluster;
  runner: JobRunner;
  sandbox: ReplayingSandbox;
  /** The replica's renewals, by its own clock, did not confirm the job's lease in time. */
  loseByOwnClock(jobId: string): void;
  close(): Promise<void>;
}

/** Which sessions' nodes went silent, as the node registry would say; `hold` keeps the next answer back. */
class NodeWatch {
  lost: LostSession | undefined;
  asked = 0;
  #held: ((lost: LostSession | undefined) => void) | undefined;
  #holdNext = false;

  hold(): void {
    this.#holdNext = true;
  }

  answer(lost: LostSession | undefined): void {
    this.#held?.(lost);
    this.#held = undefined;
  }

  placement(sandbox: SessionRunner): SandboxPlacement {
    const fixed = new StaticPlacement({ runners: [sandbox] });
    return {
      tracksNodes: false,
      place: (request) => fixed.place(request),
      runnerForSession: (job) => fixed.runnerForSession(job),
      release: () => Promise.resolve(),
      lostSessions: () => Promise.resolve([]),
      lostSession: () => {
        this.asked++;
        if (!this.#holdNext) return Promise.resolve(this.lost);
        this.#holdNext = false;
        return new Promise((resolve) => (this.#held = resolve));
      },
    };
  }
}

async function replica(options: {
  hook?: PermissionStage;
  store?: (store: JobStore) => JobStore;
  nodes?: NodeWatch;
}): Promise<Replica> {
  const schema = freshSchema();
  schemas.push(schema);
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-lease-retake-"));
  homes.push(home);
  const cluster = await openPostgresCluster({
    connectionString: databaseUrl(),
    schema,
    replicaId: "orch-slow",
    maxConnections: 4,
    leaseTtlMs: 1_000,
    sweepIntervalMs: 3_600_000,
  });
  await cluster.store.publishAgentVersion(agent);
  const sandbox = new ReplayingSandbox();
  const runner = new JobRunner({
    store: options.store ? options.store(cluster.store) : cluster.store,
    feed: new JobFeed(),
    placement: options.nodes ? options.nodes.placement(sandbox) : new StaticPlacement({ runners: [sandbox] }),
    // A broken stream asks about its node at once (no stream here breaks unless a test breaks it).
    reattachAttempts: 1,
    tokens: {
      mint: async (o) => ({
        token: "oz0_test",
        tokenId: `tok_${o.jobId}`,
        anthropicBaseUrl: "",
        openaiBaseUrl: "",
        headers: {},
      }),
      revoke: async () => ({ neverUsed: false }),
    },
    policy: new PermissionPolicy({ hooks: options.hook ? [options.hook] : [] }),
    home,
    logger: createLogger({ name: "lease-retake", level: "error" }),
    ownership: cluster.jobs,
  });
  // As start-orchestrator wires them.
  await cluster.start({
    onTakeOver: (lease) => runner.resumeJob(lease.resource),
    onLeaseLost: (lease) => runner.abandon(lease.resource),
    onApprovalAnswered: () => undefined,
  });
  const onLost = (lease: Lease): void => {
    if (cluster.jobs.lose(lease)) runner.abandon(lease.resource);
  };
  return {
    cluster,
    runner,
    sandbox,
    loseByOwnClock: (jobId) => {
      cluster.leases.expireUnconfirmed(onLost, { marginMs: 0, now: performance.now() + 60_000 });
      assert.equal(cluster.jobs.owns(jobId), false, "the lease given up");
    },
    close: async () => {
      await runner.close();
      await cluster.close();
    },
  };
}

async function retake(r: Replica, jobId: string): Promise<void> {
  await eventually(
    async () => ((await r.cluster.sweeper.sweepOnce()).some((l) => l.resource === jobId) ? true : undefined),
    "the job taken again at the replica's own sweep",
  );
}

function permissionRequest(id: string, callId: string): DistributiveOmit<SandboxMessage, "seq"> {
  return {
    kind: "event",
    event: create(SessionEventSchema, {
      event: {
        case: "permissionRequest",
        value: create(PermissionRequestSchema, { id, callId, tool: "read_file", title: "read" }),
      },
    }),
  };
}

void describe("a job taken again by the replica that lost its lease", () => {
  after(async () => {
    for (const schema of schemas) await dropSchema(schema);
    for (const home of homes) rmSync(home, { recursive: true, force: true });
  });

  void it("refuses the decision still in flight under the lost lease; the new follower decides the request once", async () => {
    const hook = slowOnce();
    const r = await replica({ hook });
    try {
      const job = await r.runner.runAgent({ agent: "coder", input: "go" });
      await eventually(async () => (r.sandbox.sessions().length > 0 ? true : undefined), "the session started");
      r.sandbox.push(job.sessionId, permissionRequest("perm-1", "call-1"));
      // The first follower is deciding perm-1 (its hook is slow) when the lease goes, and comes back.
      await hook.asked;
      r.loseByOwnClock(job.id);
      await retake(r, job.id);
      hook.release();
      const decided = await eventually(async () => (await r.cluster.store.listPermissions({ jobId: job.id }))[0]);
      await eventually(async () => (r.sandbox.answers.length > 0 ? true : undefined), "the answer delivered");
      assert.equal(decided.status, "approved");
      assert.deepEqual(
        (await r.cluster.store.listPermissions({ jobId: job.id })).map((p) => p.id),
        ["perm-1"],
      );
      const stored = (await r.cluster.store.getJob(job.id))!;
      assert.equal(stored.error, "", "no rule broken: the request was the session's only one");
      assert.deepEqual(r.sandbox.answers, ["perm-1:allow"]);
      // The session goes on under the new lease: its next request is decided too.
      r.sandbox.push(job.sessionId, permissionRequest("perm-2", "call-2"));
      await eventually(async () => (r.sandbox.answers.length > 1 ? true : undefined), "perm-2 answered");
      assert.deepEqual(r.sandbox.answers, ["perm-1:allow", "perm-2:allow"]);
    } finally {
      await r.close();
    }
  });

  void it("fails the job once with its node's loss, though the follower let go of was asking whether the node was lost", async () => {
    const nodes = new NodeWatch();
    const r = await replica({ nodes });
    try {
      const job = await r.runner.runAgent({ agent: "coder", input: "go" });
      await eventually(async () => (r.sandbox.sessions().length > 0 ? true : undefined), "the session started");
      r.sandbox.push(job.sessionId, {
        kind: "event",
        event: create(SessionEventSchema, {
          event: { case: "started", value: { harnessName: "fake", capabilities: { permissions: true } } },
        }),
      });
      await eventually(async () => ((await r.cluster.store.getJob(job.id))?.state === "running" ? true : undefined));
      // The stream breaks, and the follower's question "is its node lost?" is slow to come back.
      nodes.hold();
      r.sandbox.breakStreams(job.sessionId);
      await eventually(async () => (nodes.asked === 1 ? true : undefined), "the first follower asking");
      // Meanwhile the lease is lost by the replica's own clock and taken again: a new follower re-attaches.
      await r.cluster.leases.stop();
      r.loseByOwnClock(job.id);
      await retake(r, job.id);
      await eventually(async () => (r.sandbox.reattaches === 1 ? true : undefined), "the new follower re-attached");
      // The node did go silent: the first follower hears so late, then the new one meets it too.
      const lost: LostSession = {
        sessionId: job.sessionId,
        jobId: job.id,
        nodeId: "node-1",
        nodeUrl: r.sandbox.url,
        lastHeartbeat: new Date(),
        reason: "sandbox node node-1 stopped sending heartbeats",
      };
      nodes.answer(lost);
      nodes.lost = lost;
      r.sandbox.breakStreams(job.sessionId);
      const ended = await eventually(async () => {
        const current = await r.cluster.store.getJob(job.id);
        return current?.state === "failed" ? current : undefined;
      }, "the job failed with its node");
      assert.equal(ended.error, lost.reason);
    } finally {
      await r.close();
    }
  });

  void it("follows a job whose lease was lost while it was created, once taken again", async () => {
    let loseOnCreate = true;
    // The renewal's verdict lands while the job is being stored, before its session starts.
    const r: Replica = await replica({
      store: (store) =>
        new Proxy(store, {
          get(target, key) {
            if (key === "createJob")
              return async (...args: Parameters<JobStore["createJob"]>) => {
                const created = await target.createJob(...args);
                if (loseOnCreate) {
                  loseOnCreate = false;
                  r.loseByOwnClock(args[0].id);
                }
                return created;
              };
            const value: unknown = Reflect.get(target, key, target);
            return typeof value === "function" ? (value as (...a: unknown[]) => unknown).bind(target) : value;
          },
        }),
    });
    try {
      const job = await r.runner.runAgent({ agent: "coder", input: "go" });
      assert.deepEqual(r.sandbox.sessions(), [], "not started under a lease already lost");
      await retake(r, job.id);
      await eventually(async () => (r.sandbox.sessions().length > 0 ? true : undefined), "started at the retake");
      r.sandbox.push(job.sessionId, permissionRequest("perm-1", "call-1"));
      await eventually(async () => (r.sandbox.answers.length > 0 ? true : undefined), "perm-1 answered");
      assert.deepEqual(r.sandbox.answers, ["perm-1:allow"]);
      assert.equal(r.runner.activeCount, 1);
    } finally {
      await r.close();
    }
  });
});
