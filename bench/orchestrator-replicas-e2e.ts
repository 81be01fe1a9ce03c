// Jobs per second end to end with one orchestrator against three on the
// same PostgreSQL, in the same run: every service its own process (the
// cluster the acceptance test runs, services/orchestrator/test/support/
// cluster-stack.ts), two sandbox nodes registering with heartbeats, one LLM
// proxy on PostgreSQL, the scripted model answering at once. Each job is a
// real session of the fake harness: one tool call, then the answer. Jobs go
// to the replicas in turn, `--inflight` at a time, and a job counts when it
// has ended. Prints jobs/s per round and the ratio of three to one.
// bench/orchestrator-replicas.ts measures the database side alone.
//   node --import tsx bench/orchestrator-replicas-e2e.ts [--jobs 120] [--inflight 16] [--repeat 2]
// Uses DATABASE_URL when set, else starts PostgreSQL with @oz0/test-infra.
import { randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { startPostgres, type RunningPostgres } from "@oz0/test-infra";
import pg from "pg";
import {
  proxySchema,
  startClusterStack,
  type ClusterStack,
} from "../services/orchestrator/test/support/cluster-stack.js";
import { makePluginRepo } from "../services/orchestrator/test/support/test-stack.js";
import { benchOptions } from "./bench-options.js";
import { startReport } from "./bench-report.js";

// Read before main() starts PostgreSQL, so a misspelt flag costs nothing.
const { jobs, inflight, repeat } = benchOptions({
  jobs: { type: "number", default: 120 },
  inflight: { type: "number", default: 16 },
  repeat: { type: "number", default: 2 },
});

const AGENT = [
  "name: bench",
  "description: one tool call, then the answer",
  "runtime: harness:fake",
  "model:",
  "  primary: anthropic/claude-sonnet-5-5",
  "instructions: prompts/fixer.md",
  "harness:",
  "  tools: [read_file, write_file, run_command]",
  "",
].join("\n");
const TERMINAL = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]);

async function round(options: {
  url: string;
  plugin: string;
  orchestrators: number;
  jobs: number;
  inflight: number;
}): Promise<number> {
  const schema = `oz0_bench_${randomBytes(5).toString("hex")}`;
  const c = await startClusterStack({
    databaseUrl: options.url,
    schema,
    orchestrators: options.orchestrators,
    sandboxes: 2,
    proxies: 1,
    sandboxCapacity: 16,
    turns: (request) => {
      const messages = (request.body?.messages as { role: string }[] | undefined) ?? [];
      return messages.some((m) => m.role === "assistant")
        ? { text: "done" }
        : { toolCalls: [{ name: "run_command", input: { command: "echo ok" } }] };
    },
  });
  try {
    await c.plugins(0).installPlugin({ source: options.plugin });
    // Until both nodes send heartbeats, jobs would wait for room: not what is measured.
    await ended(c, 0, (await c.jobs(0).runAgent({ agent: "bench", input: "warm up" })).job!.id);
    let next = 0;
    let failed = 0;
    const start = performance.now();
    await Promise.all(
      Array.from({ length: options.inflight }, async () => {
        while (next < options.jobs) {
          const replica = next++ % options.orchestrators;
          const { job } = await c.jobs(replica).runAgent({ agent: "bench", input: "go" });
          if ((await ended(c, replica, job!.id)) !== JobState.SUCCEEDED) failed++;
        }
      }),
    );
    const seconds = (performance.now() - start) / 1000;
    if (failed > 0) throw new Error(`${failed} of ${options.jobs} jobs did not succeed; see the logs under ${c.home}`);
    return options.jobs / seconds;
  } finally {
    await c.close();
    const client = new pg.Client({ connectionString: options.url });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.query(`DROP SCHEMA IF EXISTS ${proxySchema(schema)} CASCADE`);
    await client.end();
  }
}

/** Polls a job at the replica that took it until it has ended; its end state. */
async function ended(c: ClusterStack, replica: number, jobId: string): Promise<JobState> {
  for (;;) {
    const { job } = await c.jobs(replica).getJob({ jobId });
    if (TERMINAL.has(job!.state)) return job!.state;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function main(): Promise<void> {
  let own: RunningPostgres | undefined;
  const url = process.env.DATABASE_URL ?? (own = await startPostgres({ database: "bench" })).url;
  const plugin = await makePluginRepo({ name: "bench", agents: { bench: AGENT } });
  const report = startReport("orchestrator-replicas-e2e");
  try {
    console.log(
      `${jobs} jobs of one tool call each, ${inflight} in flight, 2 sandbox nodes of 16 sessions, 1 LLM proxy, all on one PostgreSQL`,
    );
    const ratios: number[] = [];
    for (let r = 0; r < repeat; r++) {
      const one = await round({ url, plugin, orchestrators: 1, jobs, inflight });
      const three = await round({ url, plugin, orchestrators: 3, jobs, inflight });
      ratios.push(three / one);
      console.log(
        `round ${r + 1}: 1 orchestrator ${one.toFixed(1)} jobs/s, 3 orchestrators ${three.toFixed(1)} jobs/s`,
      );
    }
    report.ratio("ratio 3 / 1 orchestrators", ratios, { unit: "x" });
  } finally {
    await own?.close();
    report.end();
  }
}

await main();
