// What the control plane costs per job in CPU: the four services (events,
// llm-proxy, sandbox, orchestrator) as the embedded stack runs them, each its
// own process on loopback, running jobs of the Python fake harness (cheap to
// start) against a scripted model in this process: one tool call
// (run_command), then the answer; a client watches each job to its end, as
// `oz0 run` does. Each service's CPU is read from /proc/<pid>/stat (user +
// system, all its threads) before and after a round and divided by the jobs
// in it (the sandbox's with its keeper spawner, a helper process that forks
// the sessions' keepers for it, and its uid lock helper); the sessions' own processes (the harness,
// bubblewrap, the in-sandbox LLM forwarder, the keepers) are not in it, nor is this process (the client
// and the scripted model, printed apart). The baseline, in each round: the
// same harness session (same request, same two model turns, same tool call)
// spawned directly by this process with no service in between, its CPU read
// from this process's waited-for children. (The sandbox's children's time
// cannot stand for the sessions: bubblewrap's namespace init is not waited
// for into it, so under bwrap it stays near zero.)
// Goal (issue 24): at most 10 ms of CPU per job across the four services.
//
// Then, unless --profile-jobs 0, a second stack whose four services run under
// `node --cpu-prof`: the top self-time functions and places of each, from
// the samples taken while its jobs ran, and those samples as a .cpuprofile
// beside the whole one (start-up and shutdown cut off), which a flame graph
// opens (Chrome DevTools' Performance panel, speedscope.app).
//   node --import tsx bench/control-plane-cost.ts [--jobs 20] [--inflight 4] [--rounds 3] [--warmup-jobs 300] [--harness-runs 5] [--idle-ms 10000] [--idle-settle-ms 2000] [--profile-jobs 30] [--profile-dir DIR] [--data-root DIR] [--kafka]
// --warmup-jobs: jobs each stack runs before it is measured or profiled. A
// service's first few hundred jobs cost it about twice what later ones do (V8
// compiles its hot code as it goes), so the rounds measure services that run
// jobs all day; the warm-up's own CPU per job is printed too, as the cold
// figure (--warmup-jobs 0 measures cold services).
// --perf: after the rounds, one more round under a system-wide Linux `perf
// record` (perf-record.ts; needs perf, and root), the measured stack's
// services running with --perf-basic-prof so their JavaScript frames have
// names: each process's on-CPU samples per job, kernel included, and what the
// rounds cannot see, the sessions' own short-lived processes (the harness,
// its keeper and entry, bubblewrap) by command name; the services' top
// symbols and system calls, and folded stacks for a flame graph in
// --profile-dir.
// --data-root: where the stacks' data directories go (default ~/.cache/oz0-bench):
// outside /tmp, as a deployment's are (a session's /tmp is its own folder, and
// bwrap makes mount points in it for each bound path under the host's /tmp).
// --kafka: the events service relays to Kafka (KAFKA_BROKERS when set, else a
// broker started with @oz0/test-infra); without it, the embedded default, the
// local log only.
// OZ0_BENCH_ORCHESTRATOR_DIST=DIR: the orchestrator's child runs DIR/main.js (a
// copy of an earlier services/orchestrator/dist, kept inside the repository so
// its packages resolve) instead of the current build, the other three
// services unchanged: runs alternating with and without it compare two
// orchestrators side by side. OZ0_BENCH_SANDBOX_DIST=DIR: the same for the
// sandbox's child (DIR a copy of an earlier services/sandbox/dist), and
// OZ0_BENCH_LLM_PROXY_DIST=DIR for the LLM proxy's, OZ0_BENCH_EVENTS_DIST=DIR for
// the events service's (its dist has no packages of its own: a copy anywhere in
// the repository resolves).
import { spawn } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { create, toJsonString } from "@bufbuild/protobuf";
import Database from "better-sqlite3";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startEmbeddedStack, type EmbeddedStack, type StackServiceName } from "@oz0/orchestrator";
import { startScriptedModel, type ScriptedRequest } from "@oz0/harness/testing";
import { ProtocolVersion, SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { JobService, JobState, PluginService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { bearerInterceptor } from "@oz0/serving";
import { startKafka, type RunningKafka } from "@oz0/test-infra";
import { benchOptions } from "./bench-options.js";
import { median, startReport } from "./bench-report.js";
import { cpuProfileWindow, type TimedCpuProfile } from "./cpu-profile-window.js";
import { summariseCpuProfile, type ProfileLine } from "./llm-proxy-cpu-profile.js";
import {
  foldedStacks,
  othersByCommand,
  perfUnavailable,
  processShare,
  startPerfRecord,
  type PerfSample,
} from "./perf-record.js";
import { readProcessCpu, readProcessWakeups, ticksPerSecond, type ProcessCpu } from "./process-cpu.js";

const options = benchOptions({
  jobs: { type: "number", default: 20 },
  inflight: { type: "number", default: 4 },
  rounds: { type: "number", default: 3 },
  "warmup-jobs": { type: "number", default: 300 },
  "harness-runs": { type: "number", default: 5 },
  "idle-ms": { type: "number", default: 10000 },
  "idle-settle-ms": { type: "number", default: 2000 },
  "profile-jobs": { type: "number", default: 30 },
  "profile-dir": { type: "string" },
  "data-root": { type: "string" },
  kafka: { type: "boolean" },
  perf: { type: "boolean" },
});

const GOAL_MS = 10;
/** What the measured services run with under --perf: names for their JavaScript frames in /tmp/perf-<pid>.map. */
const PERF_NODE_FLAGS = "--perf-basic-prof";
const PERF_FREQUENCY = 999;

const CORES_FOR_IMPLIED_RATE = 2;
const SERVICES: readonly StackServiceName[] = ["orchestrator", "sandbox", "llm-proxy", "events"];
const TERMINAL = new Set([JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]);
const repoRoot = path.join(import.meta.dirname, "..");

const ms = (x: number): string => x.toFixed(2);
const pct = (part: number, whole: number): string => `${whole === 0 ? "0.0" : ((100 * part) / whole).toFixed(1)}%`;

if (options.perf) {
  const why = perfUnavailable();
  if (why !== undefined) {
    console.error(`--perf: ${why}; or run without --perf`);
    process.exit(2);
  }
}

const report = startReport("control-plane-cost");

const ticks = ticksPerSecond();
// Outside /tmp by default, as a deployment's data directory is (~/.oz0, a volume): a session's /tmp is a folder of
// its own, so bwrap makes a mount point there for each bound path under the host's /tmp (the working directory and
// the plugin's folder, about ten folders a session), which the sandbox then removes.
const dataRoot = options["data-root"] ?? path.join(os.homedir(), ".cache", "oz0-bench");
mkdirSync(dataRoot, { recursive: true });
const root = mkdtempSync(path.join(dataRoot, "cp-cost-"));
const profileDir =
  options["profile-dir"] ??
  path.join(os.tmpdir(), `oz0-control-plane-profiles-${new Date().toISOString().replace(/[:.]/g, "-")}`);
let kafka: RunningKafka | undefined;
const brokers = options.kafka
  ? (process.env.KAFKA_BROKERS ?? (kafka = await startKafka()).brokers.join(","))
  : undefined;

const model = await startScriptedModel({
  isSideCall: () => false,
  turns: (request: ScriptedRequest) => {
    const messages = (request.body?.messages as { role: string }[] | undefined) ?? [];
    return messages.some((m) => m.role === "assistant")
      ? { text: "done" }
      : { toolCalls: [{ name: "run_command", input: { command: "true" } }] };
  },
});

// The Python fake harness as a plugin author ships it: started through its shebang (see kit-harnesses-on-stack.test.ts).
const plugin = path.join(root, "plugin-src");
mkdirSync(path.join(plugin, "agents"), { recursive: true });
copyFileSync(
  path.join(repoRoot, "sdk", "harness-ts", "fake", "python", "fake_harness.py"),
  path.join(plugin, "fake_harness.py"),
);
chmodSync(path.join(plugin, "fake_harness.py"), 0o755);
writeFileSync(
  path.join(plugin, "oz0-plugin.yaml"),
  'name: bench\nversion: 0.1.0\nharnesses:\n  - name: python\n    command: ["./fake_harness.py"]\n    permissions: true\n    tools: [read_file, write_file, run_command]\nagents: [agents/bench.yaml]\n',
);
writeFileSync(path.join(plugin, "instructions.md"), "Run the command, then answer.\n");
writeFileSync(
  path.join(plugin, "agents", "bench.yaml"),
  "name: bench\nruntime: harness:python\nmodel: { primary: anthropic/bench-model }\ninstructions: instructions.md\nlimits: { max_steps: 5 }\n",
);

interface Api {
  jobs: Client<typeof JobService>;
  plugins: Client<typeof PluginService>;
}

const orchestratorMain = path.join(repoRoot, "services", "orchestrator", "dist", "main.js");
const orchestratorDist = process.env.OZ0_BENCH_ORCHESTRATOR_DIST;
const sandboxMain = path.join(repoRoot, "services", "sandbox", "dist", "main.js");
const sandboxDist = process.env.OZ0_BENCH_SANDBOX_DIST;
const llmProxyMain = path.join(repoRoot, "services", "llm-proxy", "dist", "main.js");
const llmProxyDist = process.env.OZ0_BENCH_LLM_PROXY_DIST;
const eventsMain = path.join(repoRoot, "services", "events", "dist", "main.js");
const eventsDist = process.env.OZ0_BENCH_EVENTS_DIST;
/** The wrapper's line that runs `dist`'s main.js in place of `main`. */
const swapMain = (main: string, dist: string | undefined): string =>
  dist === undefined ? "" : `if [ "$1" = "${main}" ]; then shift; set -- "${path.resolve(dist, "main.js")}" "$@"; fi\n`;

/**
 * Starts a stack whose services run as `process.execPath main.js` under a
 * script that execs node with `nodeFlags` and, with
 * OZ0_BENCH_ORCHESTRATOR_DIST, the orchestrator's main.js from that folder.
 * Node 20 refuses --cpu-prof in NODE_OPTIONS (later releases take it,
 * nodejs/node#57018), hence a script named by process.execPath for the
 * length of the start-up.
 */
async function stackFor(
  name: string,
  extra: Partial<Record<StackServiceName, Record<string, string>>> = {},
  nodeFlags = "",
): Promise<EmbeddedStack> {
  if (
    nodeFlags === "" &&
    orchestratorDist === undefined &&
    sandboxDist === undefined &&
    llmProxyDist === undefined &&
    eventsDist === undefined
  )
    return startStack(name, extra);
  const node = process.execPath;
  const wrapper = path.join(root, `node-${name}.sh`);
  const swap =
    swapMain(orchestratorMain, orchestratorDist) +
    swapMain(sandboxMain, sandboxDist) +
    swapMain(llmProxyMain, llmProxyDist) +
    swapMain(eventsMain, eventsDist);
  writeFileSync(wrapper, `#!/bin/sh\n${swap}exec "${node}" ${nodeFlags} "$@"\n`, { mode: 0o755 });
  process.execPath = wrapper;
  try {
    return await startStack(name, extra);
  } finally {
    process.execPath = node;
  }
}

async function startStack(
  name: string,
  extra: Partial<Record<StackServiceName, Record<string, string>>>,
): Promise<EmbeddedStack> {
  const home = path.join(root, name);
  mkdirSync(home, { recursive: true });
  const providers = path.join(home, "providers.json");
  writeFileSync(
    providers,
    JSON.stringify({
      providers: [{ name: "anthropic", baseUrl: model.url, prices: { "*": { input: 3, output: 15 } } }],
    }),
  );
  return startEmbeddedStack({
    home,
    env: {
      orchestrator: { ...extra.orchestrator },
      events: { ...(brokers ? { KAFKA_BROKERS: brokers } : {}), ...extra.events },
      "llm-proxy": { OZ0_PROVIDERS_FILE: providers, ...extra["llm-proxy"] },
      sandbox: { OZ0_MAX_SESSIONS: String(Math.max(16, options.inflight)), ...extra.sandbox },
    },
  });
}

async function apiFor(stack: EmbeddedStack): Promise<Api> {
  const transport = createGrpcTransport({
    baseUrl: stack.urls.orchestrator,
    interceptors: [bearerInterceptor(stack.ownerToken)],
  });
  const api = { jobs: createClient(JobService, transport), plugins: createClient(PluginService, transport) };
  await api.plugins.installPlugin({ source: plugin });
  return api;
}

const pidsOf = (stack: EmbeddedStack): Record<StackServiceName, number> =>
  Object.fromEntries(stack.processes.map((p) => [p.name, p.pid])) as Record<StackServiceName, number>;

/** A service's CPU so far and its wake-ups (voluntary context switches: the main thread's and every thread's). */
type Reading = Record<StackServiceName, ProcessCpu & { wakeups: { main: number; all: number } }>;
const read = (pids: Record<StackServiceName, number>): Reading =>
  Object.fromEntries(
    SERVICES.map((name) => {
      const own = { ...readProcessCpu(pids[name], ticks), wakeups: readProcessWakeups(pids[name]) };
      if (name !== "sandbox") return [name, own];
      // The sandbox's keeper spawner forks the sessions' keepers for it (services/sandbox/src/keeper-spawner.ts), and its
      // uid lock helper holds their uids: their own CPU and wake-ups are the sandbox's.
      const helpers = sandboxHelpers(pids[name]).map((pid) => ({
        cpu: readProcessCpu(pid, ticks),
        wakeups: readProcessWakeups(pid).all,
      }));
      return [
        name,
        {
          ...own,
          ownMs: own.ownMs + helpers.reduce((sum, x) => sum + x.cpu.ownMs, 0),
          ownSystemMs: own.ownSystemMs + helpers.reduce((sum, x) => sum + x.cpu.ownSystemMs, 0),
          wakeups: { main: own.wakeups.main, all: own.wakeups.all + helpers.reduce((sum, x) => sum + x.wakeups, 0) },
        },
      ];
    }),
  ) as Reading;

type Wakeups = Record<StackServiceName, { main: number; all: number }>;

/**
 * The sandbox's Perl helpers, found among its children: its keeper spawner (the spawner's loop) and the helper that
 * holds its session uids' locks (services/sandbox/src/session-uid-locks.ts).
 */
function sandboxHelpers(sandboxPid: number): number[] {
  const pids: number[] = [];
  try {
    for (const task of readdirSync(`/proc/${sandboxPid}/task`))
      for (const child of readFileSync(`/proc/${sandboxPid}/task/${task}/children`, "utf8").split(" ").filter(Boolean))
        if (/sub add_spare|# oz0 session uid locks/.test(readFileSync(`/proc/${child}/cmdline`, "utf8")))
          pids.push(Number(child));
  } catch {
    // A child that ended meanwhile, or no /proc/<pid>/task/<tid>/children (a kernel without it): counted as none.
  }
  return pids;
}

/** Runs `jobs` jobs, `inflight` at a time, each watched to its end; throws when one did not succeed. */
async function runJobs(api: Api, jobs: number, inflight: number, logs: string): Promise<void> {
  let next = 0;
  let failed = 0;
  await Promise.all(
    Array.from({ length: Math.min(inflight, jobs) }, async () => {
      while (next < jobs) {
        next++;
        const { job } = await api.jobs.runAgent({ agent: "bench", input: `job ${next}` });
        if ((await watchToEnd(api, job!.id)) !== JobState.SUCCEEDED) failed++;
      }
    }),
  );
  if (failed > 0) throw new Error(`${failed} of ${jobs} jobs did not succeed; see the services' logs under ${logs}`);
}

async function watchToEnd(api: Api, jobId: string): Promise<JobState> {
  for await (const { event } of api.jobs.watchJob({ jobId })) {
    if (event?.event.case === "stateChanged" && TERMINAL.has(event.event.value.state)) return event.event.value.state;
  }
  return (await api.jobs.getJob({ jobId })).job!.state;
}

/** Rows per job in the orchestrator's job events and the events service's outbox of the measured stack (after it closed): how much each job writes. */
function storedPerJob(jobs: number): string {
  const count = (file: string, table: string): string => {
    try {
      const db = new Database(file, { readonly: true, fileMustExist: true });
      try {
        return ((db.prepare(`SELECT count(*) AS n FROM ${table}`).get() as { n: number }).n / jobs).toFixed(1);
      } finally {
        db.close();
      }
    } catch (error) {
      return `unknown (${(error as Error).message})`;
    }
  };
  const home = path.join(root, "measured");
  return `${count(path.join(home, "orchestrator.db"), "job_events")} job events in the orchestrator, ${count(path.join(home, "events", "events.sqlite"), "events")} events in the events service's outbox`;
}

/** CPU ms of one harness session spawned directly (no service in between), the median of `runs` run one after another. */
async function harnessAlone(runs: number): Promise<number> {
  const harness = path.join(plugin, "fake_harness.py");
  const cpu: number[] = [];
  for (let i = 0; i < runs; i++) {
    const workingDir = mkdtempSync(path.join(root, "direct-"));
    const request = create(SessionRequestSchema, {
      protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1,
      sessionId: `direct_${i}`,
      jobId: `direct_${i}`,
      agent: { name: "bench", version: 1 },
      model: { primary: "anthropic/bench-model" },
      instructions: "Run the command, then answer.\n",
      input: `direct ${i}`,
      workingDir,
      limits: { maxTurns: 5 },
      llm: { anthropicBaseUrl: model.url, token: "oz0st_bench" },
    });
    const before = readProcessCpu(process.pid, ticks).childrenMs;
    const child = spawn(harness, [], {
      cwd: workingDir,
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: workingDir },
      stdio: ["pipe", "pipe", "ignore"],
    });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8");
      // As the sandbox does: stdin closes once the result is out, so the harness exits.
      if (output.includes('"result"')) child.stdin.end();
    });
    child.stdin.write(`${toJsonString(SessionRequestSchema, request)}\n`);
    const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
    if (code !== 0 || !output.includes("STOP_REASON_COMPLETED"))
      throw new Error(`the harness run directly failed (exit ${code}): ${output.slice(-300)}`);
    cpu.push(readProcessCpu(process.pid, ticks).childrenMs - before);
    rmSync(workingDir, { recursive: true, force: true });
  }
  return median(cpu);
}

/** What one round cost: CPU ms per job of each service and of this process, the harness run alone; jobs/s; its wall time. */
interface Round {
  perJob: Record<StackServiceName, number>;
  /** The part of perJob spent in the kernel. */
  systemPerJob: Record<StackServiceName, number>;
  /** Wake-ups per job: the main thread's and every thread's. */
  wakeupsPerJob: Wakeups;
  harnessAloneMs: number;
  benchPerJob: number;
  jobsPerSecond: number;
  seconds: number;
}

/** After the last job ended, the sandbox still removes its directories and the events service still writes: counted in the round. */
const SETTLE_MS = 500;

/** Runs --warmup-jobs jobs (none: undefined): connections, the agent's first resolution, and V8's compiling of the services' hot code. */
async function warmUp(api: Api, pids: Record<StackServiceName, number>, logs: string): Promise<Round | undefined> {
  if (options["warmup-jobs"] <= 0) return undefined;
  return await round(api, pids, options["warmup-jobs"], logs, { harnessRuns: 0 });
}

async function round(
  api: Api,
  pids: Record<StackServiceName, number>,
  jobs: number,
  logs: string,
  { harnessRuns = options["harness-runs"] }: { harnessRuns?: number } = {},
): Promise<Round> {
  // Before the services' readings: the direct runs touch none of them.
  const harnessAloneMs = harnessRuns > 0 ? await harnessAlone(harnessRuns) : Number.NaN;
  const before = read(pids);
  const benchBefore = process.cpuUsage();
  const t0 = performance.now();
  await runJobs(api, jobs, options.inflight, logs);
  const jobsSeconds = (performance.now() - t0) / 1000;
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  const after = read(pids);
  const bench = process.cpuUsage(benchBefore);
  const perJob = Object.fromEntries(
    SERVICES.map((name) => [name, (after[name].ownMs - before[name].ownMs) / jobs]),
  ) as Record<StackServiceName, number>;
  const systemPerJob = Object.fromEntries(
    SERVICES.map((name) => [name, (after[name].ownSystemMs - before[name].ownSystemMs) / jobs]),
  ) as Record<StackServiceName, number>;
  const wakeupsPerJob = Object.fromEntries(
    SERVICES.map((name) => [
      name,
      {
        main: (after[name].wakeups.main - before[name].wakeups.main) / jobs,
        all: (after[name].wakeups.all - before[name].wakeups.all) / jobs,
      },
    ]),
  ) as Wakeups;
  return {
    perJob,
    systemPerJob,
    wakeupsPerJob,
    harnessAloneMs,
    benchPerJob: (bench.user + bench.system) / 1000 / jobs,
    jobsPerSecond: jobs / jobsSeconds,
    seconds: jobsSeconds + SETTLE_MS / 1000,
  };
}

const total = (perJob: Record<StackServiceName, number>): number =>
  SERVICES.reduce((sum, name) => sum + perJob[name], 0);

try {
  console.log(
    `jobs of the Python fake harness (one tool call, then the answer; 2 model calls), ${options.jobs} per round, ${options.inflight} at once, ${options.rounds} rounds after ${options["warmup-jobs"]} warm-up jobs; ` +
      `events ${brokers ? `relaying to Kafka at ${brokers}` : "on its local log only (no Kafka; --kafka for a broker)"}; CPU clock ${ticks} ticks/s (${(1000 / ticks).toFixed(0)} ms resolution per reading)`,
  );
  const stack = await stackFor("measured", {}, options.perf ? PERF_NODE_FLAGS : "");
  let rounds: Round[];
  let idle: Record<StackServiceName, number>;
  try {
    console.log(
      `sandbox isolation: ${stack.isolation?.mode ?? "unknown"}${stack.isolation?.reason ? ` (${stack.isolation.reason})` : ""}`,
    );
    if (orchestratorDist !== undefined) console.log(`orchestrator: ${path.resolve(orchestratorDist, "main.js")}`);
    if (sandboxDist !== undefined) console.log(`sandbox: ${path.resolve(sandboxDist, "main.js")}`);
    const api = await apiFor(stack);
    const pids = pidsOf(stack);
    const logs = path.join(root, "measured", "logs");
    const warmup = await warmUp(api, pids, logs);
    if (warmup !== undefined)
      console.log(
        `warm-up: ${options["warmup-jobs"]} jobs, not in the rounds; CPU per job while warming ${ms(total(warmup.perJob))} ms (${SERVICES.map((n) => `${n} ${ms(warmup.perJob[n])}`).join(", ")})`,
      );

    // Baseline of the services' own background (timers, heartbeats, pollers): CPU per second with no job, once the
    // warm-up's last jobs have finished their tail work (read at once, a 3 s window took two 10 ms clock ticks of
    // the events service's for its background).
    await new Promise((resolve) => setTimeout(resolve, options["idle-settle-ms"]));
    const idleBefore = read(pids);
    await new Promise((resolve) => setTimeout(resolve, options["idle-ms"]));
    const idleAfter = read(pids);
    idle = Object.fromEntries(
      SERVICES.map((name) => [name, ((idleAfter[name].ownMs - idleBefore[name].ownMs) * 1000) / options["idle-ms"]]),
    ) as Record<StackServiceName, number>;

    rounds = [];
    for (let r = 0; r < options.rounds; r++) {
      const result = await round(api, pids, options.jobs, logs);
      rounds.push(result);
      console.log(
        `round ${r + 1}: ${result.jobsPerSecond.toFixed(2)} jobs/s; CPU per job ${ms(total(result.perJob))} ms (${SERVICES.map((n) => `${n} ${ms(result.perJob[n])}`).join(", ")}); ` +
          `the harness alone ${ms(result.harnessAloneMs)} ms; this process ${ms(result.benchPerJob)} ms`,
      );
    }
    if (options.perf) await perfPass(api, pids, logs);
  } finally {
    await stack.close();
    if (options.perf) removePerfMaps(pidsOf(stack));
  }
  // The perf round's jobs are in the stores too.
  const jobsRun = options["warmup-jobs"] + (options.rounds + (options.perf ? 1 : 0)) * options.jobs;
  console.log(`what a job leaves in the stores: ${storedPerJob(jobsRun)}`);

  const perService = Object.fromEntries(
    SERVICES.map((name) => [name, median(rounds.map((r) => r.perJob[name]))]),
  ) as Record<StackServiceName, number>;
  const totals = rounds.map((r) => total(r.perJob));
  const cpuPerJob = median(totals);
  const alone = median(rounds.map((r) => r.harnessAloneMs));
  const idleShare = median(
    rounds.map((r) => (SERVICES.reduce((sum, n) => sum + idle[n], 0) * r.seconds) / options.jobs),
  );
  console.log("");
  console.log(`CPU per job, median of ${rounds.length} rounds (range over rounds), the four services' own processes:`);
  for (const name of SERVICES) {
    const values = rounds.map((r) => r.perJob[name]);
    console.log(
      `  ${name.padEnd(13)} ${ms(perService[name]).padStart(7)} ms  (${ms(Math.min(...values))}–${ms(Math.max(...values))}); ` +
        `in the kernel ${ms(median(rounds.map((r) => r.systemPerJob[name])))} ms; idle background ${ms(idle[name])} ms per second; ` +
        `wake-ups ${median(rounds.map((r) => r.wakeupsPerJob[name].main)).toFixed(1)} (main thread), ${median(rounds.map((r) => r.wakeupsPerJob[name].all)).toFixed(1)} (all threads)`,
    );
  }
  console.log(
    `  ${"all four".padEnd(13)} ${ms(cpuPerJob).padStart(7)} ms  (${ms(Math.min(...totals))}–${ms(Math.max(...totals))}); of which about ${ms(idleShare)} ms is the idle background over a round's length`,
  );
  console.log(
    `  goal ≤ ${GOAL_MS} ms: ${cpuPerJob <= GOAL_MS ? "met" : "not met"}, at ${(cpuPerJob / GOAL_MS).toFixed(2)}x the goal`,
  );
  console.log(
    `  implied: ${((CORES_FOR_IMPLIED_RATE * 1000) / cpuPerJob).toFixed(0)} jobs/s on ${CORES_FOR_IMPLIED_RATE} cores if the services had them to themselves ` +
      `(measured here, with the harnesses on the same cores: ${median(rounds.map((r) => r.jobsPerSecond)).toFixed(2)} jobs/s)`,
  );
  console.log(
    `  baseline, the same harness session spawned directly, no service in between: ${ms(alone)} ms CPU (median of ${options["harness-runs"]} per round)`,
  );
  report.ratio(
    "  ratio control plane / the harness alone, CPU per job",
    rounds.map((r) => total(r.perJob) / r.harnessAloneMs),
  );
  console.log(
    `  this process (client and scripted model, left out above): ${ms(median(rounds.map((r) => r.benchPerJob)))} ms per job`,
  );

  if (options["profile-jobs"] > 0) {
    try {
      await profilePass();
    } catch (error) {
      // The numbers above stand; say why the profiles are missing, with the services' last words (the logs go with the temporary folder).
      console.log(`the profiled pass failed: ${(error as Error).message}`);
      const logs = path.join(root, "profiled", "logs");
      for (const file of readdirSync(logs))
        console.log(
          `  ${file}: ${readFileSync(path.join(logs, file), "utf8").trim().split("\n").slice(-3).join("\n    ")}`,
        );
      process.exitCode = 1;
    }
  }
} finally {
  report.end();
  await model.close();
  await kafka?.close();
  rmSync(root, { recursive: true, force: true });
}

/**
 * A second stack, every service under `node --cpu-prof`, running
 * --profile-jobs jobs.
 */
/** One more round under a system-wide `perf record`: CPU per job by process, the services' top symbols, folded stacks. */
async function perfPass(api: Api, pids: Record<StackServiceName, number>, logs: string): Promise<void> {
  mkdirSync(profileDir, { recursive: true });
  const recording = await startPerfRecord({ file: path.join(profileDir, "perf.data"), frequency: PERF_FREQUENCY });
  let result: Round;
  let samples: PerfSample[];
  try {
    result = await round(api, pids, options.jobs, logs, { harnessRuns: 0 });
  } finally {
    samples = await recording.stop();
  }
  const jobs = options.jobs;
  const perJob = (n: number): string => ms((n * 1000) / PERF_FREQUENCY / jobs);
  const groups: [string, Set<number>][] = SERVICES.map((name) => [
    name,
    new Set([pids[name], ...(name === "sandbox" ? sandboxHelpers(pids.sandbox) : [])]),
  ]);
  groups.push(["this process", new Set([process.pid])]);
  const known = new Set(groups.flatMap(([, set]) => [...set]));
  console.log("");
  console.log(
    `perf: one more round of ${jobs} jobs under a system-wide perf record (on-CPU samples at ${PERF_FREQUENCY} Hz, every process, kernel included); CPU per job by process:`,
  );
  const shares = new Map<string, ReturnType<typeof processShare>>();
  for (const [name, set] of groups) {
    const share = processShare(samples, set);
    shares.set(name, share);
    const measured = SERVICES.includes(name as StackServiceName)
      ? `; /proc's reading of the same round ${ms(result.perJob[name as StackServiceName])} ms`
      : "";
    console.log(
      `  ${name.padEnd(13)} ${perJob(share.samples).padStart(7)} ms, ${pct(share.kernelSamples, share.samples)} in the kernel${measured}`,
    );
  }
  const others = othersByCommand(samples, known);
  const othersTotal = others.reduce((sum, [, n]) => sum + n, 0);
  console.log(
    `  every other process, by command (on a quiet machine, mostly the sessions' own: the harness, its keeper and entry (perl), bwrap): ${perJob(othersTotal)} ms`,
  );
  for (const [command, n] of others.slice(0, 8)) console.log(`    ${command.padEnd(18)} ${perJob(n).padStart(7)} ms`);
  for (const name of SERVICES) {
    const share = shares.get(name)!;
    console.log(`  ${name}: top symbols (innermost frame; share of its samples):`);
    for (const [symbol, n] of share.selfSymbols) console.log(`    ${pct(n, share.samples).padStart(6)}  ${symbol}`);
    console.log(
      `    system calls: ${share.systemCalls.map(([call, n]) => `${call} ${pct(n, share.samples)}`).join(", ") || "none sampled"}`,
    );
  }
  for (const [name, set] of groups)
    writeFileSync(path.join(profileDir, `perf-${name.replace(/ /g, "-")}.folded`), foldedStacks(samples, set));
  const pidsNotKnown = new Set(samples.filter((s) => s.pid !== 0 && !known.has(s.pid)).map((s) => s.pid));
  writeFileSync(path.join(profileDir, "perf-others.folded"), foldedStacks(samples, pidsNotKnown));
  console.log(`  folded stacks for flame graphs (flamegraph.pl, speedscope.app): ${profileDir}/perf-*.folded`);
}

/** The JIT maps --perf-basic-prof wrote, and the V8 logs it leaves in the working directory: large, and of no use after the pass. */
function removePerfMaps(pids: Record<StackServiceName, number>): void {
  for (const pid of Object.values(pids)) {
    // V8 writes them to /tmp whatever TMPDIR says.
    rmSync(`/tmp/perf-${pid}.map`, { force: true });
    for (const file of readdirSync(process.cwd()))
      if (new RegExp(`^isolate-0x[0-9a-f]+-${pid}-v8\\.log$`).test(file)) rmSync(file, { force: true });
  }
}

async function profilePass(): Promise<void> {
  console.log("");
  const dirs = Object.fromEntries(SERVICES.map((name) => [name, path.join(profileDir, name)])) as Record<
    StackServiceName,
    string
  >;
  const stack = await stackFor(
    "profiled",
    Object.fromEntries(SERVICES.map((name) => [name, { OZ0_BENCH_CPU_PROF_DIR: dirs[name] }])),
    '--cpu-prof --cpu-prof-dir="$OZ0_BENCH_CPU_PROF_DIR"',
  );
  const fromUs = { value: 0 };
  const toUs = { value: 0 };
  let result: Round;
  // Node names a profile CPU.<date>.<time>.<pid>.<thread>.<n>.cpuprofile: the pid tells this run's from any left in the folder.
  const pids = pidsOf(stack);
  try {
    const api = await apiFor(stack);
    const logs = path.join(root, "profiled", "logs");
    await warmUp(api, pids, logs);
    // V8's profile timestamps and process.hrtime are both CLOCK_MONOTONIC: the window cuts start-up and shutdown off.
    fromUs.value = Number(process.hrtime.bigint() / 1000n);
    result = await round(api, pids, options["profile-jobs"], logs);
    toUs.value = Number(process.hrtime.bigint() / 1000n);
  } finally {
    // A clean exit (SIGTERM) writes the profiles.
    await stack.close();
  }
  console.log(
    `profiled: ${options["profile-jobs"]} jobs with all four services under --cpu-prof: ${ms(total(result.perJob))} ms CPU per job (the profiler's own cost included)`,
  );
  // V8 samples by wall clock: on a loaded machine a sample also counts time its thread waited for a core. So the shares are
  // printed, and each share of the process's CPU per job measured apart (which also holds worker threads the profile has not).
  const row =
    (cpuPerJob: number) =>
    (line: ProfileLine): string =>
      `    ${(line.share * 100).toFixed(1).padStart(5)}% ${(line.share * cpuPerJob).toFixed(2).padStart(6)} ms/job  ${line.name}`;
  for (const name of SERVICES) {
    const file = readdirSync(dirs[name]).find(
      (f) => f.startsWith("CPU.") && f.includes(`.${pids[name]}.`) && f.endsWith(".cpuprofile"),
    );
    if (file === undefined) {
      console.log(`${name}: no .cpuprofile written in ${dirs[name]} (did the service exit cleanly?)`);
      continue;
    }
    const jobsOnly = path.join(dirs[name], `jobs-${file}`);
    const profile = JSON.parse(readFileSync(path.join(dirs[name], file), "utf8")) as TimedCpuProfile;
    writeFileSync(jobsOnly, JSON.stringify(cpuProfileWindow(profile, { fromUs: fromUs.value, toUs: toUs.value })));
    const summary = summariseCpuProfile(jobsOnly, options["profile-jobs"], name === "orchestrator" ? 15 : 8);
    console.log(
      `${name}: ${ms(result.perJob[name])} ms CPU per job under the profiler; flame graph of the jobs: ${jobsOnly}`,
    );
    console.log(
      `  self time by function (share of the busy samples, (program) and (idle) left out; ms: that share of the CPU per job):`,
    );
    for (const line of summary.functions) console.log(row(result.perJob[name])(line));
    console.log("  by where the code lives:");
    for (const line of summary.places) console.log(row(result.perJob[name])(line));
  }
}
