// What tracing costs a job, against tracing off in the same run. Two embedded
// stacks (the four services as child processes, the SDK's fake harness, one
// scripted model in this process: a tool call, then the answer): one with no
// OTEL_* (nothing starts), one exporting every span and metric over OTLP/HTTP
// to a receiver in this process. Rounds alternate between the two so drift on
// a shared machine hits both alike; each round runs --jobs jobs with
// --inflight RunAgent calls at once and counts jobs completed per second.
// Goal: tracing less than 10% slower (ratio on/off above 0.90).
//   node --import tsx bench/tracing-overhead.ts [--jobs 30] [--inflight 6] [--rounds 3]
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { startScriptedModel, type ScriptedRequest } from "@oz0/harness/testing";
import { clientsFor } from "../services/orchestrator/src/cli/connection.js";
import { startEmbeddedStack, type EmbeddedStack } from "../services/orchestrator/src/dev/embedded-stack.js";
import { startOtlpReceiver } from "../tools/test-infra/src/otlp-receiver.js";
import { benchOptions } from "./bench-options.js";
import { median, startReport } from "./bench-report.js";

const {
  jobs: JOBS,
  inflight: INFLIGHT,
  rounds: ROUNDS,
} = benchOptions({
  jobs: { type: "number", default: 30 },
  inflight: { type: "number", default: 6 },
  rounds: { type: "number", default: 3 },
});

const report = startReport("tracing-overhead");
const root = mkdtempSync(path.join(os.tmpdir(), "oz0-bench-tracing-"));
const model = await startScriptedModel({
  isSideCall: () => false,
  turns: (request: ScriptedRequest) => {
    const assistantTurns = ((request.body?.messages as { role: string }[] | undefined) ?? []).filter(
      (m) => m.role === "assistant",
    ).length;
    return assistantTurns === 0
      ? { toolCalls: [{ name: "run_command", input: { command: "true" } }] }
      : { text: "done" };
  },
});
const receiver = await startOtlpReceiver();
const plugin = path.join(root, "plugin-src");
mkdirSync(path.join(plugin, "agents"), { recursive: true });
writeFileSync(
  path.join(plugin, "oz0-plugin.yaml"),
  'name: bench\nversion: 0.1.0\nharnesses:\n  - name: fake\n    command: ["oz0-fake-harness"]\n    permissions: true\n    tools: [read_file, write_file, run_command]\nagents: [agents/bench.yaml]\n',
);
writeFileSync(path.join(plugin, "instructions.md"), "Run the command, then answer.\n");
writeFileSync(
  path.join(plugin, "agents", "bench.yaml"),
  "name: bench\nruntime: harness:fake\nmodel: { primary: anthropic/bench-model }\ninstructions: instructions.md\nlimits: { max_steps: 5 }\n",
);

const otel = {
  OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
  OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
  OTEL_TRACES_SAMPLER: "always_on",
  OTEL_LOGS_EXPORTER: "none",
};

async function stackFor(name: string, tracing: boolean): Promise<EmbeddedStack> {
  const home = path.join(root, name);
  mkdirSync(home, { recursive: true });
  const providers = path.join(home, "providers.json");
  writeFileSync(
    providers,
    JSON.stringify({
      providers: [{ name: "anthropic", baseUrl: model.url, prices: { "*": { input: 3, output: 15 } } }],
    }),
  );
  const extra = tracing ? otel : {};
  return startEmbeddedStack({
    home,
    env: {
      orchestrator: { ...extra },
      events: { ...extra },
      "llm-proxy": { OZ0_PROVIDERS_FILE: providers, ...extra },
      sandbox: { OZ0_MAX_SESSIONS: String(Math.max(64, JOBS)), ...extra },
    },
  });
}

// The parent's own environment must not switch tracing on in the "off" stack.
for (const key of Object.keys(process.env)) if (key.startsWith("OTEL_")) delete process.env[key];
const stacks = { off: await stackFor("off", false), on: await stackFor("on", true) };
try {
  const apis = {
    off: clientsFor(stacks.off.urls.orchestrator, stacks.off.ownerToken),
    on: clientsFor(stacks.on.urls.orchestrator, stacks.on.ownerToken),
  };
  for (const api of Object.values(apis)) await api.plugins.installPlugin({ source: plugin });

  /** Jobs completed per second for one round on one stack. */
  const round = async (which: "off" | "on"): Promise<number> => {
    const api = apis[which];
    const waitForEnd = async (jobId: string): Promise<JobState> => {
      for await (const { event } of api.jobs.watchJob({ jobId })) {
        if (
          event?.event.case === "stateChanged" &&
          [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED].includes(event.event.value.state)
        )
          return event.event.value.state;
      }
      return (await api.jobs.getJob({ jobId })).job!.state;
    };
    let next = 0;
    let failed = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: INFLIGHT }, async () => {
        while (next < JOBS) {
          next++;
          const { job } = await api.jobs.runAgent({ agent: "bench", input: `job ${next}` });
          if ((await waitForEnd(job!.id)) !== JobState.SUCCEEDED) failed++;
        }
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    if (failed > 0)
      throw new Error(`${failed} of ${JOBS} jobs did not succeed with tracing ${which}; see ${root}/${which}/logs`);
    return JOBS / seconds;
  };

  await round("off");
  await round("on");
  const rates = { off: [] as number[], on: [] as number[] };
  for (let r = 0; r < ROUNDS; r++) {
    for (const which of r % 2 === 0 ? (["off", "on"] as const) : (["on", "off"] as const)) {
      const rate = await round(which);
      rates[which].push(rate);
      console.log(`round ${r + 1}, tracing ${which}: ${rate.toFixed(2)} jobs/s (${JOBS} jobs, ${INFLIGHT} at once)`);
    }
  }
  const off = median(rates.off);
  const on = median(rates.on);
  console.log(`median jobs/s: tracing off ${off.toFixed(2)}, tracing exporting ${on.toFixed(2)}`);
  report.ratio(
    "  ratio on/off, round by round",
    rates.on.map((rate, r) => rate / rates.off[r]!),
    { digits: 3, goal: "> 0.90 (less than 10% slower)" },
  );
  await stacks.on.close();
  console.log(`  the receiver got ${receiver.spans().length} spans in ${receiver.requests} export requests`);
} finally {
  await stacks.off.close();
  await stacks.on.close();
  await receiver.close();
  await model.close();
  rmSync(root, { recursive: true, force: true });
  report.end();
}
