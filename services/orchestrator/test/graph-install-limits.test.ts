// What a plugin's graph may declare, checked at install (GraphRegistry.prepare) before anything is registered.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { definitionToYaml, type Flow, type GraphDefinition } from "@oz0/graph";
import { createLogger } from "@oz0/serving";
import { GraphJobs } from "../src/graphs/graph-jobs.js";
import { GraphRegistry } from "../src/graphs/graph-registry.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import type { JobRunner } from "../src/jobs/job-runner.js";
import type { SandboxPlacement } from "../src/sessions/sandbox-placement.js";
import { openGraphStore, type GraphStore } from "../src/store/graph-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-graph-install-limits-"));
const store = new SqliteJobStore({ file: path.join(dir, "orchestrator.db") });
// prepare reads and checks files only; versions are published later, through the graph store.
const registry = new GraphRegistry({ store, graphStore: {} as GraphStore });

after(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

let files = 0;
/** Installs `definition` (or YAML text) as a plugin's only graph, its agent `writer` known. */
async function prepare(definition: GraphDefinition | string): Promise<unknown> {
  const file = `graph-${++files}.yaml`;
  writeFileSync(path.join(dir, file), typeof definition === "string" ? definition : definitionToYaml(definition));
  return registry.prepare({ root: dir, files: [file], pluginAgents: ["writer"] });
}

function harness(root: Flow, name = "fan"): GraphDefinition {
  return { format: "oz0.graph/v1", kind: "harness", name, id: `harness:${name}`, root };
}

const writer = (id: string): Flow => [{ kind: "agent", id, agent: "writer" }];

void test("a parallel node with more branches than a run may start at once is refused, naming the node and the limit", async () => {
  const branches = Array.from({ length: 20_000 }, (_, i) => writer(`agent:writer-${i}`));
  await assert.rejects(
    prepare(harness([{ kind: "parallel", id: "parallel:all", branches }])),
    /graph "fan" is invalid: PARALLEL_TOO_MANY_BRANCHES at \/root\/0\/branches: parallel "parallel:all" has 20000 branches; a parallel node may have at most 32, since every branch starts at once/,
  );
  // Nested parallels multiply: 8 branches of 8 would run 64 steps at once, more than a run may.
  const inner = (i: number): Flow => [
    {
      kind: "parallel",
      id: `parallel:inner-${i}`,
      branches: Array.from({ length: 9 }, (_, j) => writer(`agent:writer-${i}-${j}`)),
    },
  ];
  await assert.rejects(
    prepare(
      harness([{ kind: "parallel", id: "parallel:outer", branches: Array.from({ length: 8 }, (_, i) => inner(i)) }]),
    ),
    /TOO_MANY_CONCURRENT_STEPS at \/root\/0: parallel "parallel:outer" can run 72 steps at once \(the branches of parallel nodes inside it add up\); a run may run at most 64 at once/,
  );
  // At the limits it installs.
  await prepare(
    harness([
      {
        kind: "parallel",
        id: "parallel:outer",
        branches: Array.from({ length: 8 }, (_, i) => [
          {
            kind: "parallel",
            id: `parallel:inner-${i}`,
            branches: Array.from({ length: 8 }, (_, j) => writer(`agent:writer-${i}-${j}`)),
          },
        ]),
      },
    ]),
  );
});

void test("a node id its step's lifecycle events could not carry is refused: too long at the loop's last round, or of other characters", async () => {
  const inLoop = (id: string): GraphDefinition =>
    harness([{ kind: "loop", id: "loop:l", body: writer(id), until: writer("agent:judge"), maxIterations: 250 }]);
  // Events carry "<node id>@<path>": here the path reaches 0.1000.body.0 (250 rounds, 3 more granted by a manager).
  const fits = `agent:${"w".repeat(128 - "agent:".length - "@0.1000.body.0".length)}`;
  await prepare(inLoop(fits));
  await assert.rejects(
    prepare(inLoop(`${fits}x`)),
    new RegExp(
      `field /root/0/body/0: node id "${fits}x" cannot name its step on lifecycle events, which carry "<node id>@<step path>" \\(here up to "${fits}x@0.1000.body.0", 129 characters\\)`,
    ),
  );
  await assert.rejects(prepare(harness(writer("agent:the writer"))), /node id "agent:the writer" cannot name its step/);
  // A session token's prefix: the events service drops the value.
  await assert.rejects(prepare(harness(writer("agent:oz0st_x"))), /node id "agent:oz0st_x" cannot name its step/);
  // A choice on a key is a step of its own, under the choice's id.
  await assert.rejects(
    prepare(
      harness([{ kind: "choice", id: "choice:é", key: "k", arms: [{ label: "a", flow: writer("agent:writer") }] }]),
    ),
    /field \/root\/0: node id "choice:é" cannot name its step/,
  );
});

void test("a definition nested hundreds deep is refused naming the depth limit, not as a stack overflow", async () => {
  let node = `{"kind":"agent","id":"agent:writer","agent":"writer"}`;
  for (let i = 0; i < 500; i++) node = `{"kind":"parallel","id":"parallel:${i}","branches":[[${node}]]}`;
  await assert.rejects(
    prepare(`{"format":"oz0.graph/v1","kind":"harness","name":"deep","id":"harness:deep","root":[${node}]}`),
    /graph-\d+\.yaml: the graph definition is invalid: \/: is nested more than 100 levels deep; a definition may nest at most 100 levels/,
  );
});

void test("a graph is named like an agent: lower-case letters, digits and '-', starting with a letter", async () => {
  for (const name of ["Fan Out", "fan_out", "-fan", "fan/out", "f".repeat(65), "élan"]) {
    await assert.rejects(
      prepare(harness(writer("agent:writer"), name)),
      new RegExp(
        `field /name: graph name ${JSON.stringify(name).replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")} is not a name of lower-case letters, digits and '-', starting with a letter, at most 64 characters \\(the rule for agent names, which share its name space\\); rename the graph`,
      ),
      name,
    );
  }
  await prepare(harness(writer("agent:writer"), `f${"-9".repeat(31)}a`));
});

void test("a graph version installed before the fan-out limits is not run", async () => {
  const graphStore = await openGraphStore({ home: dir });
  try {
    const published = new GraphRegistry({ store, graphStore });
    const branches = Array.from({ length: 40 }, (_, i) => writer(`agent:writer-${i}`));
    // Published as an older orchestrator did, without the limits.
    await published.publishVersion({
      graph: { file: "wide.yaml", definition: harness([{ kind: "parallel", id: "parallel:all", branches }], "wide") },
      plugin: "old",
      pluginVersion: "1",
      pluginPath: dir,
    });
    const graphs = new GraphJobs({
      graphStore,
      store,
      feed: new JobFeed(),
      jobs: {} as JobRunner,
      registry: published,
      placement: {} as SandboxPlacement,
      logger: createLogger({ name: "graph-install-limits", level: "error" }),
    });
    await assert.rejects(
      graphs.run({ graph: "wide", input: "go" }),
      /graph wide version 1 \(plugin old\) was installed before its limits were checked and is not run: PARALLEL_TOO_MANY_BRANCHES at \/root\/0\/branches: parallel "parallel:all" has 40 branches; .*; fix the graph and install its plugin again/,
    );
    assert.deepEqual(await store.listJobs({ limit: 10 }), [], "no job was created");
  } finally {
    await graphStore.close();
  }
});
