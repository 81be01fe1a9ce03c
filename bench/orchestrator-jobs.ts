// The orchestrator's overhead on real sessions, against a baseline in the
// same run. The four services run as child processes (the embedded stack);
// the model is a scripted model in this process (one tool call, then the
// answer), the harness is the SDK's oz0-fake-harness.
//  1. Jobs started per second through the API: RunAgent calls in flight at
//     once, until every call returned (the job stored, its session starting);
//     then how long until every job ended.
//  2. End-to-end latency of one job (RunAgent to its terminal event on
//     WatchJob), one at a time, against the same harness session run directly
//     on the sandbox (RunSession with the same request, token minted at the
//     proxy), in alternation. Prints medians and the ratio.
//   node --import tsx bench/orchestrator-jobs.ts [--jobs 40] [--inflight 8] [--latency 10]

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { create } from "@bufbuild/protobuf";
import {
  PermissionAnswer_Outcome,
  PermissionAnswerSchema,
  ProtocolVersion,
  SessionRequestSchema,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import { JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { startScriptedModel, type ScriptedRequest } from "@oz0/harness/testing";
import { stackTokenFor } from "@oz0/serving";
import { clientsFor } from "../services/orchestrator/src/cli/connection.js";
import { startEmbeddedStack } from "../services/orchestrator/src/dev/embedded-stack.js";
import { resolveHarnessCommand } from "../services/orchestrator/src/agents/harness-command.js";
import { LlmProxyClient } from "../services/orchestrator/src/sessions/llm-proxy-client.js";
import { SandboxClient } from "../services/orchestrator/src/sessions/sandbox-client.js";
import { benchOptions } from "./bench-options.js";
import { median, startReport } from "./bench-report.js";

const {
  jobs: JOBS,
  inflight: INFLIGHT,
  latency: LATENCY,
} = benchOptions({
  jobs: { type: "number", default: 40 },
  inflight: { type: "number", default: 8 },
  latency: { type: "number", default: 10 },
});

const report = startReport("orchestrator-jobs");
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-bench-jobs-"));
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
const providers = path.join(home, "providers.json");
writeFileSync(
  providers,
  JSON.stringify({ providers: [{ name: "anthropic", baseUrl: model.url, prices: { "*": { input: 3, output: 15 } } }] }),
);
const plugin = path.join(home, "plugin-src");
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

const stack = await startEmbeddedStack({
  home,
  env: { "llm-proxy": { OZ0_PROVIDERS_FILE: providers }, sandbox: { OZ0_MAX_SESSIONS: String(Math.max(64, JOBS)) } },
});
try {
  const api = clientsFor(stack.urls.orchestrator, stack.ownerToken);
  await api.plugins.installPlugin({ source: plugin });
  const { agent } = await api.agents.getAgent({ name: "bench" });

  const waitForEnd = async (jobId: string): Promise<JobState> => {
    for await (const { event } of api.jobs.watchJob({ jobId })) {
      if (
        event?.event.case === "stateChanged" &&
        [JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED].includes(event.event.value.state)
      ) {
        return event.event.value.state;
      }
    }
    return (await api.jobs.getJob({ jobId })).job!.state;
  };

  // 1. Jobs started per second.
  const ids: string[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: INFLIGHT }, async () => {
      while (next < JOBS) {
        next++;
        const { job } = await api.jobs.runAgent({ agent: "bench", input: `job ${next}` });
        ids.push(job!.id);
      }
    }),
  );
  const startedMs = performance.now() - t0;
  const states = await Promise.all(ids.map(waitForEnd));
  const allDoneMs = performance.now() - t0;
  const succeeded = states.filter((s) => s === JobState.SUCCEEDED).length;
  console.log(
    `started ${JOBS} jobs (${INFLIGHT} RunAgent calls in flight): ${(JOBS / (startedMs / 1000)).toFixed(1)} jobs/s started`,
  );
  console.log(
    `  all ended after ${(allDoneMs / 1000).toFixed(2)} s: ${(JOBS / (allDoneMs / 1000)).toFixed(1)} jobs/s completed, ${succeeded}/${JOBS} succeeded`,
  );

  // 2. End-to-end latency against the same session run directly on the sandbox.
  const sandbox = new SandboxClient({
    url: stack.urls.sandbox,
    token: stackTokenFor(stack.credentials, "orchestrator", "sandbox"),
  });
  const proxy = new LlmProxyClient({ url: stack.urls["llm-proxy"], token: stack.credentials.orchestrator });
  const pluginPath = (await api.plugins.listPlugins({})).plugins[0]!.path;
  const command = resolveHarnessCommand({
    plugin: "bench",
    pluginPath,
    manifest: { name: "fake", command: ["oz0-fake-harness"] },
  });
  const direct = async (i: number): Promise<number> => {
    const t = performance.now();
    const sessionId = `bench_direct_${i}`;
    const token = await proxy.mint({ jobId: `direct_${i}`, agent: "bench", sessionId });
    const channel = sandbox.start({
      request: create(SessionRequestSchema, {
        protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1,
        sessionId,
        jobId: `direct_${i}`,
        agent: { name: "bench", version: agent!.version },
        model: { primary: "anthropic/bench-model" },
        instructions: "Run the command, then answer.\n",
        input: `direct ${i}`,
        limits: { maxTurns: 5 },
        permissions: true,
        llm: {
          anthropicBaseUrl: token.anthropicBaseUrl,
          openaiBaseUrl: token.openaiBaseUrl,
          token: token.token,
          headers: token.headers,
        },
      }),
      command,
      pluginDir: pluginPath,
      attachments: [],
    });
    for await (const message of channel) {
      // The direct client answers permissions itself: allow every call.
      if (message.kind === "event" && message.event.event.case === "permissionRequest") {
        await channel.answerPermission(
          create(PermissionAnswerSchema, {
            id: message.event.event.value.id,
            allow: true,
            outcome: PermissionAnswer_Outcome.ANSWERED,
          }),
        );
      }
    }
    await proxy.revoke({ tokenId: sessionId });
    return performance.now() - t;
  };
  const viaOrchestrator = async (i: number): Promise<number> => {
    const t = performance.now();
    const { job } = await api.jobs.runAgent({ agent: "bench", input: `latency ${i}` });
    await waitForEnd(job!.id);
    return performance.now() - t;
  };
  await direct(-1);
  await viaOrchestrator(-1);
  const directMs: number[] = [];
  const orchestratedMs: number[] = [];
  for (let i = 0; i < LATENCY; i++) {
    directMs.push(await direct(i));
    orchestratedMs.push(await viaOrchestrator(i));
  }
  const d = median(directMs);
  const o = median(orchestratedMs);
  console.log(
    `end-to-end latency, median of ${LATENCY}: directly on the sandbox ${d.toFixed(0)} ms, through the orchestrator ${o.toFixed(0)} ms`,
  );
  console.log(`  overhead ${(o - d).toFixed(0)} ms per job`);
  // Each pair of jobs (one direct, one through the orchestrator, back to back) is a round.
  report.ratio(
    "  ratio orchestrator/direct, pair by pair",
    orchestratedMs.map((ms, i) => ms / directMs[i]!),
  );
} finally {
  await stack.close();
  await model.close();
  rmSync(home, { recursive: true, force: true });
  report.end();
}
