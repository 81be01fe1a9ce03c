// Per-step overhead of durable graph execution: @oz0/graph with its SQLite
// checkpoint store against LangGraph.js (StateGraph + SqliteSaver), in the same
// process, each run with a fresh database file, all in WAL mode, at both
// durabilities side by side:
// - synchronous=FULL, @oz0/graph's default: a recorded step survives a power cut;
// - synchronous=NORMAL, what SqliteSaver runs with by default: it sets only
//   journal_mode=WAL, and better-sqlite3 is built with
//   SQLITE_DEFAULT_WAL_SYNCHRONOUS=1, so its connection drops to NORMAL at its
//   first write (the bench reads the pragma back and prints it).
// LangGraph runs in two forms: one node per step (the same graph as ours) and
// one node that loops over a conditional edge, the way LangGraph users write a
// loop; its checkpoints then stay small. Prints per-step times, ratios per
// round (median and spread) and storage bytes per step.
//   node --import tsx bench/graph-durable-steps.ts [--steps 1000] [--fanout 100] [--repeat 3] [--grow 200]
import { setMaxListeners } from "node:events";
import { mkdtempSync, rmSync, statSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import Database from "better-sqlite3";
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import { SqliteSaver } from "@langchain/langgraph-checkpoint-sqlite";
import {
  GraphRunner,
  Harness,
  InProcessExecutor,
  SqliteCheckpointStore,
  Step,
  type Chain,
  type HarnessContext,
} from "@oz0/graph";
import { benchOptions } from "./bench-options.js";
import { median, startReport } from "./bench-report.js";

// LangGraph's fan-out adds one abort listener per task to a shared signal;
// the default limit of 10 only produces a warning, not a fault.
setMaxListeners(1000);

const {
  steps: STEPS,
  fanout: FANOUT,
  repeat: REPEAT,
  grow: GROW,
} = benchOptions({
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

type Durability = "full" | "normal";

async function oz0(
  shape: Shape,
  n: number,
  make: (i: number) => Step,
  durability: Durability = "full",
): Promise<{ ms: number; file: string }> {
  const steps = Array.from({ length: n }, (_, i) => make(i));
  const h = new Harness(`bench-${shape}-${n}`);
  if (shape === "sequence") {
    let link: Chain = h.next(steps[0] as Step);
    for (const s of steps.slice(1)) link = link.next(s);
  } else {
    for (const s of steps) h.next(s);
  }
  const file = freshDb();
  const store = new SqliteCheckpointStore({ database: file, synchronous: durability });
  const runner = new GraphRunner({ definition: h.toDefinition(), executor: new InProcessExecutor({ steps }), store });
  const t0 = performance.now();
  const result = await runner.run({ prompt: "bench", runId: "bench-run" });
  const ms = performance.now() - t0;
  if (result.status !== "succeeded") throw new Error(`oz0 run ${result.status}: ${result.error?.message}`);
  store.close();
  return { ms, file };
}

/** LangGraph's forms: one node per step, or one node that loops `n` times over a conditional edge. */
type LangGraphForm = Shape | "loop";
/** The `synchronous` pragma SqliteSaver's connection last ran with (0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA). */
const saverSynchronous = new Map<Durability, number>();

async function langgraph(
  form: LangGraphForm,
  n: number,
  grow: boolean,
  durability: Durability = "normal",
): Promise<{ ms: number; file: string }> {
  const State = Annotation.Root({
    prompt: Annotation<string>(),
    i: Annotation<number>({ reducer: (_, b) => b, default: () => 0 }),
    bag: Annotation<Record<string, string>>({ reducer: (a, b) => ({ ...a, ...b }), default: () => ({}) }),
  });
  // The builder's types track node names; a generated graph cannot spell them out.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const g: any = new StateGraph(State);
  if (form === "loop") {
    g.addNode("step", (state: { i: number }) => ({
      i: state.i + 1,
      ...(grow ? { bag: { [`n${state.i}`]: "x".repeat(64) } } : {}),
    }));
    g.addEdge(START, "step");
    g.addConditionalEdges("step", (state: { i: number }) => (state.i < n ? "step" : END));
  } else {
    for (let i = 0; i < n; i++) {
      const name = `n${i}`;
      g.addNode(name, () => (grow ? { bag: { [name]: "x".repeat(64) } } : {}));
    }
    for (let i = 0; i < n; i++) {
      if (form === "sequence") g.addEdge(i === 0 ? START : `n${i - 1}`, `n${i}`);
      else {
        g.addEdge(START, `n${i}`);
        g.addEdge(`n${i}`, END);
      }
    }
    if (form === "sequence") g.addEdge(`n${n - 1}`, END);
  }
  const file = freshDb();
  const saver = SqliteSaver.fromConnString(file);
  const db = (saver as unknown as { db: Database.Database }).db;
  // Set explicitly, FULL stays FULL in WAL mode; left alone, SqliteSaver's default applies.
  if (durability === "full") db.pragma("synchronous = FULL");
  const app = g.compile({ checkpointer: saver });
  const t0 = performance.now();
  await app.invoke({ prompt: "bench" }, { configurable: { thread_id: "bench-run" }, recursionLimit: n + 10 });
  const ms = performance.now() - t0;
  saverSynchronous.set(durability, db.pragma("synchronous", { simple: true }) as number);
  db.close();
  return { ms, file };
}

const fmt = (x: number, d = 1): string => x.toFixed(d);

const OZ0_PAYLOAD =
  "SELECT SUM(LENGTH(path) + LENGTH(node_id) + LENGTH(outcome) + COALESCE(LENGTH(delta), 0) + COALESCE(LENGTH(decision), 0)) AS b FROM graph_steps";
const LG_PAYLOAD =
  "SELECT (SELECT SUM(LENGTH(checkpoint) + LENGTH(metadata) + LENGTH(checkpoint_id) + COALESCE(LENGTH(parent_checkpoint_id), 0)) FROM checkpoints) + (SELECT COALESCE(SUM(LENGTH(value) + LENGTH(channel) + LENGTH(task_id)), 0) FROM writes) AS b";

const SYNCHRONOUS = ["OFF", "NORMAL", "FULL", "EXTRA"];
/** @oz0/graph's times per round at synchronous=FULL (its default), by label, for the defaults-against-defaults ratio. */
const oursAtFull = new Map<string, number[]>();

/**
 * `n` steps of one shape at one durability: @oz0/graph against LangGraph in
 * the given forms, alternating within each round; prints per-step medians
 * and, per form, the ratio of each round (median and spread).
 */
async function compare(
  label: string,
  shape: Shape,
  n: number,
  durability: Durability,
  forms: LangGraphForm[],
): Promise<void> {
  const make = (i: number): Step => new Noop(i);
  // One small warm-up each, so JIT and module loading are not billed to the first timed run.
  await oz0(shape, 10, make, durability);
  for (const form of forms) await langgraph(form, 10, false, durability);
  const ours: number[] = [];
  const theirs = new Map<LangGraphForm, number[]>(forms.map((f) => [f, []]));
  const files = new Map<string, string>();
  for (let r = 0; r < REPEAT; r++) {
    const a = await oz0(shape, n, make, durability);
    ours.push(a.ms);
    files.set("oz0", a.file);
    for (const form of forms) {
      const b = await langgraph(form, n, false, durability);
      theirs.get(form)!.push(b.ms);
      files.set(form, b.file);
    }
  }
  const perStep = (ms: number): number => (ms * 1000) / n;
  console.log(`\n${label}, synchronous=${durability.toUpperCase()} (${n} steps, ${REPEAT} rounds)`);
  const oursPayload = payloadBytes(files.get("oz0")!, OZ0_PAYLOAD);
  console.log(
    `  oz0                         ${fmt(perStep(median(ours))).padStart(8)} µs/step   payload ${fmt(oursPayload / n)} B/step   file ${fmt(storedBytes(files.get("oz0")!) / n)} B/step`,
  );
  for (const form of forms) {
    const times = theirs.get(form)!;
    const name = form === "loop" ? "langgraph, one looping node" : "langgraph, a node per step";
    const payload = payloadBytes(files.get(form)!, LG_PAYLOAD);
    console.log(
      `  ${name.padEnd(28)}${fmt(perStep(median(times))).padStart(8)} µs/step   payload ${fmt(payload / n)} B/step   file ${fmt(storedBytes(files.get(form)!) / n)} B/step`,
    );
    report.ratio(
      `  ${name} / oz0, per step`,
      times.map((t, i) => t / ours[i]!),
      { unit: "x" },
    );
    // Out of the box: LangGraph at its NORMAL against @oz0/graph at its FULL (the FULL section's rounds, run just before).
    const full = oursAtFull.get(label);
    if (durability === "normal" && full)
      report.ratio(
        `  ${name} (NORMAL) / oz0 (FULL), each at its default`,
        times.map((t, i) => t / full[i]!),
        { unit: "x" },
      );
  }
  if (durability === "full") oursAtFull.set(label, ours);
  console.log(
    `  (SqliteSaver's connection ran with synchronous=${SYNCHRONOUS[saverSynchronous.get(durability) ?? -1] ?? "?"})`,
  );
}

/** Storage growth: payload bytes per step at n and 2n steps; linear storage keeps bytes/step flat. */
async function growth(n: number): Promise<void> {
  console.log(`\nstorage growth, each step adds one 64-byte key (payload bytes per step)`);
  for (const size of [n, 2 * n]) {
    const a = await oz0("sequence", size, (i) => new Grow(i));
    const b = await langgraph("sequence", size, true);
    const c = await langgraph("loop", size, true);
    console.log(
      `  ${String(size).padStart(5)} steps  oz0 ${fmt(payloadBytes(a.file, OZ0_PAYLOAD) / size)} B/step   ` +
        `langgraph, a node per step ${fmt(payloadBytes(b.file, LG_PAYLOAD) / size)} B/step   one looping node ${fmt(payloadBytes(c.file, LG_PAYLOAD) / size)} B/step`,
    );
  }
}

const report = startReport("graph-durable-steps");
try {
  console.log(
    "@oz0/graph SqliteCheckpointStore vs LangGraph.js StateGraph + SqliteSaver; per step, lower is better; ratios are LangGraph / oz0 per round",
  );
  for (const durability of ["full", "normal"] as const) {
    await compare("sequence of no-op custom steps", "sequence", STEPS, durability, ["sequence", "loop"]);
    await compare(`${FANOUT}-way parallel fan-out of no-op steps`, "fanout", FANOUT, durability, ["fanout"]);
  }
  await growth(GROW);
} finally {
  rmSync(dir, { recursive: true, force: true });
  report.end();
}
