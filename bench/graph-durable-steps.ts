// Per-step overhead of durable graph execution: @oz0/graph with its SQLite
// checkpoint store against LangGraph.js (StateGraph + SqliteSaver), the same
// graphs, in the same process, each with a fresh database file, both with WAL
// and synchronous=FULL (what SqliteSaver gets by default). Prints per-step
// times, ratios and storage bytes per step.
//   node --import tsx bench/graph-durable-steps.ts [--steps 1000] [--fanout 100] [--repeat 3]
import { setMaxListeners } from "node:events";
import { mkdtempSync, rmSync, statSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import Database from "better-sqlite3";
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite";
import { GraphRunner, Harness, InProcessExecutor, SqliteCheckpointStore, Step, type Chain, type HarnessContext } from "@oz0/graph";
import { benchOptions } from "./bench-options.js";

// LangGraph's fan-out adds one abort listener per task to a shared signal;
// the default limit of 10 only produces a warning, not a fault.
setMaxListeners(1000);

const { steps: STEPS, fanout: FANOUT, repeat: REPEAT, grow: GROW } = benchOptions({
  steps: { type: "number", default: 1000 },
  fanout: { type: "number", default: 100 },
  repeat: { type: "number", default: 3 },
  grow: { type: "number", default: 200 },
});

const dir = mkdtempSync(path.join(tmpdir(), "oz0-bench-graph-"));
let fileNo = 0;
const freshDb = (): string => path.join(dir, `db-${fileNo++}.sqlite`);

/** Bytes on disk once the WAL is folded into the main file. */
function storedBytes(file: string): number {
  const db = new Database(file);
  db.pragma("wal_checkpoint(TRUNCATE)");
  db.close();
  return statSync(file).size + (existsSync(`${file}-wal`) ? statSync(`${file}-wal`).size : 0);
}

/** Sum of the stored payload lengths (rows' bytes), independent of page allocation. */
function payloadBytes(file: string, sql: string): number {
  const db = new Database(file, { readonly: true });
  const row = db.prepare(sql).get() as { b: number | null };
  db.close();
  return row.b ?? 0;
}

class Noop extends Step {
  public constructor(i: number) {
    super(`noop-${i}`);
  }

  public run(): void {}
}

/** Writes one new 64-byte key: the bag grows by one entry per step. */
class Grow extends Step {
  public constructor(i: number) {
    super(`grow-${i}`);
  }

  public run(ctx: HarnessContext): void {
    ctx.set(this.name, "x".repeat(64));
  }
}

type Shape = "sequence" | "fanout";

async function oz0(shape: Shape, n: number, make: (i: number) => Step): Promise<{ ms: number; file: string }> {
  const steps = Array.from({ length: n }, (_, i) => make(i));
  const h = new Harness(`bench-${shape}-${n}`);
  if (shape === "sequence") {
    let link: Chain = h.next(steps[0] as Step);
    for (const s of steps.slice(1)) link = link.next(s);
  } else {
    for (const s of steps) h.next(s);
  }
  const file = freshDb();
  const store = new SqliteCheckpointStore({ database: file });
  const runner = new GraphRunner({ definition: h.toDefinition(), executor: new InProcessExecutor({ steps }), store });
  const t0 = performance.now();
  const result = await runner.run({ prompt: "bench", runId: "bench-run" });
  const ms = performance.now() - t0;
  if (result.status !== "succeeded") throw new Error(`oz0 run ${result.status}: ${result.error?.message}`);
  store.close();
  return { ms, file };
}

async function langgraph(shape: Shape, n: number, grow: boolean): Promise<{ ms: number; file: string }> {
  const State = Annotation.Root({
    prompt: Annotation<string>(),
    bag: Annotation<Record<string, string>>({ reducer: (a, b) => ({ ...a, ...b }), default: () => ({}) }),
  });
  // The builder's types track node names; a generated graph cannot spell them out.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const g: any = new StateGraph(State);
  for (let i = 0; i < n; i++) {
    const name = `n${i}`;
    g.addNode(name, () => (grow ? { bag: { [name]: "x".repeat(64) } } : {}));
  }
  for (let i = 0; i < n; i++) {
    if (shape === "sequence") g.addEdge(i === 0 ? START : `n${i - 1}`, `n${i}`);
    else {
      g.addEdge(START, `n${i}`);
      g.addEdge(`n${i}`, END);
    }
  }
  if (shape === "sequence") g.addEdge(`n${n - 1}`, END);
  const file = freshDb();
  const saver = SqliteSaver.fromConnString(file);
  const app = g.compile({ checkpointer: saver });
  const t0 = performance.now();
  await app.invoke({ prompt: "bench" }, { configurable: { thread_id: "bench-run" }, recursionLimit: n + 10 });
  const ms = performance.now() - t0;
  (saver as unknown as { db: Database.Database }).db.close();
  return { ms, file };
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const fmt = (x: number, d = 1): string => x.toFixed(d);

const OZ0_PAYLOAD =
  "SELECT SUM(LENGTH(path) + LENGTH(node_id) + LENGTH(outcome) + COALESCE(LENGTH(delta), 0) + COALESCE(LENGTH(decision), 0)) AS b FROM graph_steps";
const LG_PAYLOAD =
  "SELECT (SELECT SUM(LENGTH(checkpoint) + LENGTH(metadata) + LENGTH(checkpoint_id) + COALESCE(LENGTH(parent_checkpoint_id), 0)) FROM checkpoints) + (SELECT COALESCE(SUM(LENGTH(value) + LENGTH(channel) + LENGTH(task_id)), 0) FROM writes) AS b";

async function compare(label: string, shape: Shape, n: number, grow: boolean): Promise<void> {
  const make = (i: number): Step => (grow ? new Grow(i) : new Noop(i));
  // One small warm-up each, so JIT and module loading are not billed to the first timed run.
  await oz0(shape, 10, make);
  await langgraph(shape, 10, grow);
  const ours: number[] = [];
  const theirs: number[] = [];
  let oursFile = "";
  let theirsFile = "";
  for (let r = 0; r < REPEAT; r++) {
    const a = await oz0(shape, n, make);
    const b = await langgraph(shape, n, grow);
    ours.push(a.ms);
    theirs.push(b.ms);
    oursFile = a.file;
    theirsFile = b.file;
  }
  const oursStep = (median(ours) * 1000) / n;
  const theirsStep = (median(theirs) * 1000) / n;
  const oursDisk = storedBytes(oursFile);
  const theirsDisk = storedBytes(theirsFile);
  const oursPayload = payloadBytes(oursFile, OZ0_PAYLOAD);
  const theirsPayload = payloadBytes(theirsFile, LG_PAYLOAD);
  console.log(`\n${label} (${n} steps, median of ${REPEAT})`);
  console.log(`  per step      oz0 ${fmt(oursStep)} µs   langgraph ${fmt(theirsStep)} µs   langgraph/oz0 ${fmt(theirsStep / oursStep, 2)}x`);
  console.log(
    `  payload/step  oz0 ${fmt(oursPayload / n)} B   langgraph ${fmt(theirsPayload / n)} B   ratio ${fmt(theirsPayload / Math.max(1, oursPayload), 1)}x`,
  );
  console.log(`  file/step     oz0 ${fmt(oursDisk / n)} B   langgraph ${fmt(theirsDisk / n)} B   (whole database file incl. schema and free pages)`);
}

/** Storage growth: payload bytes per step at n and 2n steps; linear storage keeps bytes/step flat. */
async function growth(n: number): Promise<void> {
  console.log(`\nstorage growth, each step adds one 64-byte key (payload bytes per step)`);
  for (const size of [n, 2 * n]) {
    const a = await oz0("sequence", size, (i) => new Grow(i));
    const b = await langgraph("sequence", size, true);
    console.log(
      `  ${String(size).padStart(5)} steps  oz0 ${fmt(payloadBytes(a.file, OZ0_PAYLOAD) / size)} B/step   langgraph ${fmt(payloadBytes(b.file, LG_PAYLOAD) / size)} B/step`,
    );
  }
}

try {
  console.log(`graph-durable-steps: @oz0/graph SqliteCheckpointStore vs LangGraph.js StateGraph + SqliteSaver (node ${process.version})`);
  await compare("sequence of no-op custom steps", "sequence", STEPS, false);
  await compare(`${FANOUT}-way parallel fan-out of no-op steps`, "fanout", FANOUT, false);
  await growth(GROW);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
