// Jobs per second through the orchestrator's shared state with one replica
// against three on the same PostgreSQL, in the same run. Each replica is its
// own process (as pods would be) with its own pool, lease manager and fenced
// store; a job's life is what a replica writes for it: lease the job, create
// it, append its steps' events under the lease, finish it, release the lease.
// No sessions run: this measures the database side of scaling out, the part
// replicas contend on. Prints jobs/s per round and the ratio to one replica.
//   node --import tsx bench/orchestrator-replicas.ts [--jobs 600] [--steps 8] [--inflight 8] [--repeat 2]
// Uses DATABASE_URL when set, else starts PostgreSQL with @oz0/test-infra.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { JobEventSchema } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { startPostgres, type RunningPostgres } from "@oz0/test-infra";
import { LeaseManager } from "../services/orchestrator/src/cluster/lease-manager.js";
import { migrateOrchestrator } from "../services/orchestrator/src/store/migrations.js";
import { createPostgresPool } from "../services/orchestrator/src/store/sql-database.js";
import { PostgresJobStore } from "../services/orchestrator/src/store/postgres-store.js";
import { benchOptions } from "./bench-options.js";
import { startReport } from "./bench-report.js";

// --jobs has no default here: the bench's is 600 and a replica's 200, so
// main() and worker() apply their own. --worker, --url, --schema and
// --replica are what startReplica() passes to the replica processes.
const options = benchOptions({
  jobs: { type: "number" },
  steps: { type: "number", default: 8 },
  inflight: { type: "number", default: 8 },
  repeat: { type: "number", default: 2 },
  worker: { type: "boolean", internal: true },
  url: { type: "string", internal: true },
  schema: { type: "string", internal: true },
  replica: { type: "string", internal: true },
});

/** One replica: waits for "go" on stdin, runs its share of jobs, prints "done". */
async function worker(): Promise<void> {
  const connectionString = options.url!;
  const schema = options.schema!;
  const replica = options.replica!;
  const jobs = options.jobs ?? 200;
  const { steps, inflight } = options;
  const store = await PostgresJobStore.open({ connectionString, schema, maxConnections: inflight + 2 });
  const leases = await LeaseManager.open({ pool: store.pool, owner: replica });
  process.stdout.write("ready\n");
  const input = createInterface({ input: process.stdin });
  await new Promise<void>((resolve) => input.once("line", () => resolve()));
  // Stop reading stdin, or it keeps this process alive after the work.
  input.close();
  process.stdin.destroy();
  let next = 0;
  const runOne = async (id: string): Promise<void> => {
    const lease = await leases.acquire("job", id);
    if (!lease) throw new Error(`job ${id} already leased`);
    const now = new Date();
    await store.createJob({
      id,
      agentName: "bench",
      agentVersion: 1,
      input: "x",
      state: "running",
      createdAt: now,
      updatedAt: now,
      resultText: "",
      stopReason: 0,
      error: "",
      sessionId: `ses_${id}`,
      sandboxUrl: "",
      lastSeq: 0,
      sandboxSeq: 0,
      attachments: [],
      tokenId: "",
      ruleBroken: "",
      servedTools: "",
      startedBy: "",
    });
    const fenced = store.fenced(lease);
    for (let s = 0; s < steps; s++) {
      const events = [
        create(JobEventSchema, { event: { case: "text", value: { text: `step ${s} of ${id}` } } }),
        create(JobEventSchema, { event: { case: "text", value: { text: "more" } } }),
      ];
      await fenced.append({ jobId: id, events, job: { sandboxSeq: s + 1 } });
    }
    await fenced.updateJob(id, { state: "succeeded", finishedAt: new Date() });
    await leases.release(lease);
  };
  await Promise.all(
    Array.from({ length: inflight }, async () => {
      while (next < jobs) {
        const n = next++;
        await runOne(`${replica}-${n}`);
      }
    }),
  );
  await leases.close();
  await store.close();
  process.stdout.write("done\n");
}

interface Child {
  ready: Promise<void>;
  done: Promise<void>;
  go(): void;
}

function startReplica(options: {
  url: string;
  schema: string;
  replica: string;
  jobs: number;
  steps: number;
  inflight: number;
}): Child {
  const child = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      fileURLToPath(import.meta.url),
      "--worker",
      "--url",
      options.url,
      "--schema",
      options.schema,
      "--replica",
      options.replica,
      "--jobs",
      String(options.jobs),
      "--steps",
      String(options.steps),
      "--inflight",
      String(options.inflight),
    ],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  const lines = createInterface({ input: child.stdout });
  const seen = (word: string) =>
    new Promise<void>((resolve, reject) => {
      lines.on("line", (line) => line === word && resolve());
      child.once("exit", (code) =>
        reject(new Error(`replica ${options.replica} exited with ${code} before "${word}"`)),
      );
    });
  const ready = seen("ready");
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const done = seen("done").then(() => exited);
  return { ready, done, go: () => child.stdin.end("go\n") };
}

async function round(url: string, replicas: number, total: number, steps: number, inflight: number): Promise<number> {
  const schema = `oz0_bench_${randomBytes(5).toString("hex")}`;
  const pool = createPostgresPool({ connectionString: url, schema, maxConnections: 1 });
  await migrateOrchestrator(pool, schema);
  const children = Array.from({ length: replicas }, (_, i) =>
    startReplica({ url, schema, replica: `r${i}`, jobs: Math.ceil(total / replicas), steps, inflight }),
  );
  await Promise.all(children.map((c) => c.ready));
  const start = performance.now();
  for (const c of children) c.go();
  await Promise.all(children.map((c) => c.done));
  const seconds = (performance.now() - start) / 1000;
  const { rows } = await pool.query<{ n: string }>("SELECT count(*) AS n FROM jobs WHERE state = 'succeeded'");
  if (Number(rows[0]!.n) !== Math.ceil(total / replicas) * replicas)
    throw new Error(`expected every job succeeded, found ${rows[0]!.n}`);
  await pool.query(`DROP SCHEMA ${schema} CASCADE`);
  await pool.end();
  return (Math.ceil(total / replicas) * replicas) / seconds;
}

async function main(): Promise<void> {
  const total = options.jobs ?? 600;
  const { steps, inflight, repeat } = options;
  let own: RunningPostgres | undefined;
  const url = process.env.DATABASE_URL ?? (own = await startPostgres({ database: "bench" })).url;
  const report = startReport("orchestrator-replicas");
  try {
    console.log(`${total} jobs, ${steps} steps of 2 events each, ${inflight} in flight per replica`);
    const ratios: number[] = [];
    for (let r = 0; r < repeat; r++) {
      const one = await round(url, 1, total, steps, inflight);
      const three = await round(url, 3, total, steps, inflight);
      ratios.push(three / one);
      console.log(`round ${r + 1}: 1 replica ${one.toFixed(1)} jobs/s, 3 replicas ${three.toFixed(1)} jobs/s`);
    }
    report.ratio("ratio 3 replicas / 1", ratios, { unit: "x" });
  } finally {
    await own?.close();
    report.end();
  }
}

if (options.worker) await worker();
else await main();
