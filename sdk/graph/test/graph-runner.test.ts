// The engine's rules: parallel merge and conflicts, cancellation of siblings,
// choices, loops, the manager's decisions, in-flight invokes, pinning and
// redaction, each with deterministic in-process "agents".
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  Graph,
  GraphError,
  GraphRunner,
  Harness,
  HarnessContext,
  InMemoryCheckpointStore,
  InProcessExecutor,
  Step,
  agent,
  resumeStoredRuns,
  stepPathBounds,
  type ControlEvent,
  type GraphManager,
  type ManagerDecision,
  type StepRunInfo,
} from "../src/index.js";

/** A custom step defined by a function, for tests only (real steps are classes with their own names). */
class FnStep extends Step {
  readonly #fn: (ctx: HarnessContext, info: StepRunInfo) => void | Promise<void>;

  public constructor(name: string, fn: (ctx: HarnessContext, info: StepRunInfo) => void | Promise<void>) {
    super(name);
    this.#fn = fn;
  }

  public run(ctx: HarnessContext, info: StepRunInfo): void | Promise<void> {
    return this.#fn(ctx, info);
  }
}

function scriptedManager(decisions: ManagerDecision[]): GraphManager & { events: ControlEvent[] } {
  const events: ControlEvent[] = [];
  return {
    events,
    decide: async (event) => {
      events.push(event);
      const next = decisions.shift();
      if (!next) throw new Error("the test's manager has no decision left");
      return next;
    },
  };
}

void test("parallel branches see the bag as it was at the fork and merge in declaration order with conflicts reported", async () => {
  const seen: Record<string, unknown> = {};
  const left = new FnStep("left", (ctx) => {
    seen.left = ctx.get("shared");
    ctx.set("shared", "from-left");
    ctx.set("onlyLeft", 1);
  });
  const right = new FnStep("right", (ctx) => {
    seen.right = ctx.get("shared");
    ctx.set("shared", "from-right");
  });
  const third = new FnStep("third", (ctx) => {
    ctx.set("shared", "from-third");
    ctx.set("onlyLeft", 3);
  });
  const h = new Harness("merge");
  const start = h.next(new FnStep("init", (ctx) => ctx.set("shared", "initial")));
  start.next(left);
  start.next(right);
  start.next(third);
  const runner = new GraphRunner({
    definition: h.toDefinition(),
    executor: new InProcessExecutor({ steps: [left, right, third] }),
  });
  // init is not registered on purpose: it is looked up through the executor, which must find it.
  const executor = new InProcessExecutor({
    steps: [left, right, third, new FnStep("init", (ctx) => ctx.set("shared", "initial"))],
  });
  const result = await new GraphRunner({ definition: runner.definition, executor }).run({ prompt: "p" });
  assert.equal(result.status, "succeeded");
  assert.deepEqual(seen, { left: "initial", right: "initial" });
  assert.equal(result.bag.shared, "from-third");
  assert.equal(result.bag.onlyLeft, 3);
  assert.deepEqual(
    result.conflicts.map((c) => ({ key: c.key, branches: c.branches, winner: c.winner, path: c.path })),
    [
      { key: "shared", branches: [0, 1, 2], winner: 2, path: "/1" },
      { key: "onlyLeft", branches: [0, 2], winner: 2, path: "/1" },
    ],
  );
  const unregistered = await runner.run({ prompt: "p" });
  assert.equal(unregistered.status, "failed");
  assert.equal(unregistered.error?.code, "STEP_FAILED");
  assert.match(unregistered.error?.message ?? "", /custom step "init" is not registered/);
});

void test("a failing branch cancels its siblings through their AbortSignal and the run fails with a control event", async () => {
  let siblingSignal: AbortSignal | undefined;
  let afterCancel = false;
  const slow = new FnStep("slow", async (_ctx, info) => {
    siblingSignal = info.signal;
    await new Promise<void>((resolve) => info.signal.addEventListener("abort", () => resolve(), { once: true }));
  });
  const later = new FnStep("later", () => {
    afterCancel = true;
  });
  const boom = new FnStep("boom", async () => {
    await new Promise((r) => setImmediate(r));
    throw new Error("disk full");
  });
  const h = new Harness("cancel");
  h.next(slow).next(later);
  h.next(boom);
  const events: string[] = [];
  const result = await new GraphRunner({
    definition: h.toDefinition(),
    executor: new InProcessExecutor({ steps: [slow, later, boom] }),
    onEvent: (e) => {
      if (e.type === "control") events.push(`${e.control?.kind}: ${e.control?.detail}`);
    },
  }).run({ prompt: "p" });
  assert.equal(result.status, "failed");
  assert.equal(result.error?.code, "STEP_FAILED");
  assert.match(
    result.error?.message ?? "",
    /step step:boom at \/0\/b1\/0 failed: disk full\. Fix the cause and resume the run, or configure a managerAgent/,
  );
  assert.equal(siblingSignal?.aborted, true);
  assert.equal((siblingSignal?.reason as GraphError).code, "BRANCH_CANCELLED");
  assert.equal(afterCancel, false, "the cancelled branch did not continue");
  assert.deepEqual(events, [
    "branch_failed: branch 1 failed: step step:boom at /0/b1/0 failed: disk full. Fix the cause and resume the run, or configure a managerAgent to retry or skip failed steps; cancelling its siblings",
  ]);
});

void test("the manager can retry, skip, answer or abort a failed step", async () => {
  let flaky = 0;
  const executor = new InProcessExecutor({
    agents: {
      flaky: () => {
        if (++flaky < 3) throw new Error(`timeout ${flaky}`);
        return "finally";
      },
      broken: () => {
        throw new Error("always broken");
      },
    },
  });

  const retry = new Harness("retry");
  retry.next(agent("flaky"));
  const m1 = scriptedManager([{ action: "retry" }, { action: "retry" }]);
  const r1 = await new GraphRunner({ definition: retry.toDefinition(), executor, manager: m1 }).run({ prompt: "p" });
  assert.equal(r1.status, "succeeded");
  assert.equal(r1.output, "finally");
  assert.deepEqual(
    m1.events.map((e) => (e.kind === "step_error" ? [e.attempt, e.error.message] : [])),
    [
      [1, "timeout 1"],
      [2, "timeout 2"],
    ],
  );

  const skip = new Harness("skip");
  skip.next(agent("broken")).next(new FnStep("after", (ctx) => ctx.set("after", true)));
  const m2 = scriptedManager([{ action: "skip" }]);
  const r2 = await new GraphRunner({
    definition: skip.toDefinition(),
    executor: new InProcessExecutor({
      agents: { broken: () => Promise.reject(new Error("no")) },
      steps: [new FnStep("after", (ctx) => ctx.set("after", true))],
    }),
    manager: m2,
  }).run({ prompt: "p" });
  assert.equal(r2.status, "succeeded");
  assert.equal(r2.bag.after, true);
  assert.equal(r2.bag.broken, undefined);

  const answer = new Harness("answer");
  answer.next(agent("broken"));
  const r3 = await new GraphRunner({
    definition: answer.toDefinition(),
    executor,
    manager: scriptedManager([{ action: "answer", text: "manual reply" }]),
  }).run({
    prompt: "p",
  });
  assert.equal(r3.status, "succeeded");
  assert.equal(r3.bag.broken, "manual reply");
  assert.equal(r3.output, "manual reply");

  const abort = new Harness("abort");
  abort.next(agent("broken"));
  const m4 = scriptedManager([{ action: "abort", reason: "not worth it" }]);
  const r4 = await new GraphRunner({ definition: abort.toDefinition(), executor, manager: m4 }).run({
    prompt: "p",
    input: { secret: "s3cret" },
  });
  assert.equal(r4.status, "aborted");
  assert.equal(r4.error?.code, "RUN_ABORTED");
  assert.match(r4.error?.message ?? "", /not worth it/);

  // Endless retries are cut off.
  const r5 = await new GraphRunner({
    definition: abort.toDefinition(),
    executor,
    manager: scriptedManager(Array.from({ length: 10 }, () => ({ action: "retry" }) as const)),
    maxRetries: 2,
  }).run({ prompt: "p" });
  assert.equal(r5.status, "failed");
  assert.match(r5.error?.message ?? "", /failed 3 times/);
});

void test("the definition's secretKeys are masked in every snapshot, before the runner's own redaction; steps still read them", async () => {
  let stepSaw: unknown;
  const reads = new FnStep("reads", (ctx) => {
    stepSaw = ctx.get("apiKey");
    ctx.set("token", "tok-made-by-a-step");
  });
  const h = new Harness("secret-keys", { secretKeys: ["apiKey", "token", "unset"] });
  h.next(reads).next(agent("broken"));
  const manager = scriptedManager([{ action: "skip" }]);
  const result = await new GraphRunner({
    definition: h.toDefinition(),
    executor: new InProcessExecutor({ steps: [reads], agents: { broken: () => Promise.reject(new Error("x")) } }),
    manager,
    redact: (bag) => ({ ...bag, seenByRedact: JSON.stringify(bag) }),
  }).run({ prompt: "p", input: { apiKey: "sk-live-123", plain: 1 } });
  assert.equal(stepSaw, "sk-live-123");
  const snapshot = manager.events[0]?.snapshot ?? {};
  assert.equal(snapshot.apiKey, "[secret]");
  assert.equal(snapshot.token, "[secret]");
  assert.equal(snapshot.plain, 1);
  assert.equal("unset" in snapshot, false, "a secret key never set is not made up");
  assert.ok(!JSON.stringify(snapshot).includes("sk-live-123"), "the runner's redaction gets the masked bag");
  assert.ok(!JSON.stringify(snapshot).includes("tok-made-by-a-step"));
  // The caller's final bag is the run's own, unmasked.
  assert.equal(result.bag.apiKey, "sk-live-123");
  assert.deepEqual(h.toDefinition().secretKeys, ["apiKey", "token", "unset"]);
});

void test("the manager sees only the redacted snapshot", async () => {
  const h = new Harness("redact");
  h.next(agent("broken"));
  const manager = scriptedManager([{ action: "skip" }]);
  await new GraphRunner({
    definition: h.toDefinition(),
    executor: new InProcessExecutor({ agents: { broken: () => Promise.reject(new Error("x")) } }),
    manager,
    redact: (bag) => ({ ...bag, apiKey: bag.apiKey === null || bag.apiKey === undefined ? bag.apiKey : "[redacted]" }),
  }).run({ prompt: "p", input: { apiKey: "sk-live-123" } });
  assert.deepEqual(manager.events[0]?.snapshot, { apiKey: "[redacted]", prompt: "p" });
  // The default redacts nothing.
  const ctx = new HarnessContext({ initial: { apiKey: "sk" } });
  assert.deepEqual(ctx.snapshot(), { apiKey: "sk" });
  assert.equal(ctx.get("missing"), null);
  ctx.set("n", undefined);
  assert.deepEqual(ctx.keys(), ["apiKey", "n"]);
});

void test("maxIterations reached asks the manager, whose decision can grant more rounds or end the loop", async () => {
  const h = new Harness("loop");
  h.loop(agent("coder"))
    .until(agent("reviewer"))
    .maxIterations(2)
    .next(new FnStep("after", (ctx) => ctx.set("after", true)));
  let reviews = 0;
  const executor = new InProcessExecutor({
    agents: { coder: (r) => `v${r.iteration}`, reviewer: () => (++reviews >= 3 ? "break" : "again") },
    steps: [new FnStep("after", (ctx) => ctx.set("after", true))],
  });
  const manager = scriptedManager([{ action: "retry" }]);
  const result = await new GraphRunner({ definition: h.toDefinition(), executor, manager }).run({ prompt: "p" });
  assert.equal(result.status, "succeeded");
  assert.equal(result.bag.coder, "v3");
  assert.equal(result.bag.after, true);
  assert.deepEqual(
    manager.events.map((e) => (e.kind === "max_iterations" ? e.maxIterations : 0)),
    [2],
  );

  reviews = -100;
  const aborted = await new GraphRunner({
    definition: h.toDefinition(),
    executor,
    manager: scriptedManager([{ action: "abort" }]),
  }).run({ prompt: "p" });
  assert.equal(aborted.status, "aborted");
});

void test("a manager that keeps answering retry at maxIterations gets at most maxRetries extensions, then the loop fails", async () => {
  const h = new Harness("endless");
  h.loop(agent("coder")).until(agent("reviewer")).maxIterations(2);
  let coded = 0;
  // A reviewer that never approves and a manager that always grants more rounds: the loop must still end.
  const executor = new InProcessExecutor({ agents: { coder: () => `v${++coded}`, reviewer: () => "again" } });
  const retries = (): ManagerDecision[] => Array.from({ length: 50 }, () => ({ action: "retry" }) as const);

  const manager = scriptedManager(retries());
  const result = await new GraphRunner({ definition: h.toDefinition(), executor, manager, maxRetries: 3 }).run({
    prompt: "p",
  });
  assert.equal(result.status, "failed");
  assert.equal(result.error?.code, "STEP_FAILED");
  assert.match(
    result.error?.message ?? "",
    /^loop loop:coder at \/0 hit maxIterations \(2\) and the manager's retries ran out: .* Raise the loop's maxIterations for new runs, or, running the graph with @oz0\/graph yourself, GraphRunnerOptions.maxRetries/,
  );
  assert.equal(coded, 8, "2 iterations, then 3 extensions of 2");
  assert.deepEqual(
    manager.events.map((e) => (e.kind === "max_iterations" ? e.maxIterations : 0)),
    [2, 4, 6, 8],
  );

  // The default cap is the same 3; with maxRetries 0 the first retry is refused.
  coded = 0;
  const byDefault = new GraphRunner({ definition: h.toDefinition(), executor, manager: scriptedManager(retries()) });
  assert.equal((await byDefault.run({ prompt: "p" })).error?.code, "STEP_FAILED");
  assert.equal(coded, 8);
  coded = 0;
  const none = await new GraphRunner({
    definition: h.toDefinition(),
    executor,
    manager: scriptedManager(retries()),
    maxRetries: 0,
  }).run({ prompt: "p" });
  assert.equal(none.error?.code, "STEP_FAILED");
  assert.equal(coded, 2);
});

void test("a restart in the middle of a loop's extensions does not reset their count", async () => {
  const store = new InMemoryCheckpointStore();
  const h = new Harness("endless-resume");
  h.loop(agent("coder")).until(agent("reviewer")).maxIterations(2);
  const def = h.toDefinition();
  const coded: number[] = [];
  const executor = new InProcessExecutor({
    agents: {
      coder: ({ iteration }) => {
        coded.push(iteration);
        // The first time iteration 5 runs, it never returns: the process "dies" there.
        if (iteration === 5 && coded.filter((i) => i === 5).length === 1) return new Promise<string>(() => undefined);
        return `v${iteration}`;
      },
      reviewer: () => "again",
    },
  });
  const retries = (): ManagerDecision[] => Array.from({ length: 50 }, () => ({ action: "retry" }) as const);
  const asked = (m: { events: ControlEvent[] }): number[] =>
    m.events.map((e) => (e.kind === "max_iterations" ? e.maxIterations : 0));

  const first = scriptedManager(retries());
  await new GraphRunner({ definition: def, executor, store, manager: first, maxRetries: 3 }).start({
    prompt: "p",
    runId: "loop-r1",
  });
  while (coded.length < 5) await new Promise((r) => setImmediate(r));
  assert.deepEqual(asked(first), [2, 4], "two extensions granted before the crash");

  // A new runner resumes: the two recorded extensions are replayed and still count.
  const second = scriptedManager(retries());
  const resumed = new GraphRunner({ definition: def, executor, store, manager: second, maxRetries: 3 });
  const result = await (await resumed.resume({ runId: "loop-r1" })).result;
  assert.equal(result.status, "failed");
  assert.equal(result.error?.code, "STEP_FAILED");
  assert.match(result.error?.message ?? "", /maxIterations \(2\) and the manager's retries ran out/);
  assert.deepEqual(asked(second), [6, 8]);
  assert.deepEqual(coded, [1, 2, 3, 4, 5, 5, 6, 7, 8]);

  // Resuming the failed run replays the refused retry: it fails the same way without asking or running anything.
  const third = scriptedManager(retries());
  const again = new GraphRunner({ definition: def, executor, store, manager: third, maxRetries: 3 });
  const replayed = await (await again.resume({ runId: "loop-r1" })).result;
  assert.deepEqual([replayed.status, replayed.error?.code], ["failed", "STEP_FAILED"]);
  assert.deepEqual([third.events.length, coded.length], [0, 9]);

  // With a higher maxRetries the recorded retry is granted and the loop goes on.
  const fourth = scriptedManager([{ action: "skip" }]);
  const raised = new GraphRunner({ definition: def, executor, store, manager: fourth, maxRetries: 4 });
  const done = await (await raised.resume({ runId: "loop-r1" })).result;
  assert.equal(done.status, "succeeded");
  assert.deepEqual(asked(fourth), [10]);
  assert.deepEqual(coded.slice(9), [9, 10]);
});

void test("a restart after a failed step's retries does not reset its attempts", async () => {
  const store = new InMemoryCheckpointStore();
  const h = new Harness("step-retries-resume");
  h.next(agent("flaky"));
  const def = h.toDefinition();
  let calls = 0;
  const executor = new InProcessExecutor({
    agents: {
      flaky: () => {
        calls++;
        // The second call never returns: the process "dies" in the first retry.
        if (calls === 2) return new Promise<string>(() => undefined);
        return Promise.reject(new Error(`broken ${calls}`));
      },
    },
  });
  const retries = (): ManagerDecision[] => Array.from({ length: 10 }, () => ({ action: "retry" }) as const);
  const attempts = (m: { events: ControlEvent[] }): number[] =>
    m.events.map((e) => (e.kind === "step_error" ? e.attempt : 0));

  const first = scriptedManager(retries());
  await new GraphRunner({ definition: def, executor, store, manager: first, maxRetries: 2 }).start({
    prompt: "p",
    runId: "retry-r1",
  });
  while (calls < 2) await new Promise((r) => setImmediate(r));
  assert.deepEqual(attempts(first), [1], "one retry granted before the crash");

  // The resumed run re-runs the granted attempt 2, and has one retry left, not two.
  const second = scriptedManager(retries());
  const resumed = new GraphRunner({ definition: def, executor, store, manager: second, maxRetries: 2 });
  const result = await (await resumed.resume({ runId: "retry-r1" })).result;
  assert.equal(result.status, "failed");
  assert.match(result.error?.message ?? "", /failed 3 times: broken 4\. The manager may retry at most 2 times/);
  assert.deepEqual(attempts(second), [2, 3]);
  assert.equal(calls, 4, "three attempts that ended, and the one the crash cut short");
});

void test("a terminal that sets neither again nor break fails the step", async () => {
  const h = new Harness("bad-terminal");
  h.loop(agent("coder"))
    .until(new FnStep("judge", (ctx) => ctx.set("choice", "maybe")))
    .maxIterations(3);
  const result = await new GraphRunner({
    definition: h.toDefinition(),
    executor: new InProcessExecutor({
      agents: { coder: () => "x" },
      steps: [new FnStep("judge", (ctx) => ctx.set("choice", "maybe"))],
    }),
  }).run({ prompt: "p" });
  assert.equal(result.status, "failed");
  assert.match(result.error?.message ?? "", /set choice to "maybe"; it must set "again" or "break"/);
});

void test("choices: a custom evaluator sets choice, an unknown label without otherwise fails, long text is not a label", async () => {
  const h = new Harness("choice");
  const route = new FnStep("route", (ctx) => ctx.set("choice", String(ctx.get("prompt"))));
  h.choice(route)
    .when("a", new FnStep("arm-a", (ctx) => ctx.set("arm", "a")))
    .next(new FnStep("done", (ctx) => ctx.set("done", true)));
  const steps = [
    route,
    new FnStep("arm-a", (ctx) => ctx.set("arm", "a")),
    new FnStep("done", (ctx) => ctx.set("done", true)),
  ];
  const runner = new GraphRunner({ definition: h.toDefinition(), executor: new InProcessExecutor({ steps }) });
  const a = await runner.run({ prompt: "a" });
  assert.deepEqual([a.status, a.bag.arm, a.bag.done], ["succeeded", "a", true]);
  const z = await runner.run({ prompt: "z" });
  assert.equal(z.status, "failed");
  assert.match(z.error?.message ?? "", /label "z", which matches no arm \(a\) and there is no otherwise/);

  const chatty = new Harness("chatty");
  chatty
    .choice(agent("triage"))
    .when("bug", agent("writer"))
    .otherwise(agent("writer", { id: "agent:writer-other" }));
  const long = await new GraphRunner({
    definition: chatty.toDefinition(),
    executor: new InProcessExecutor({ agents: { triage: () => "I think this is\nprobably a bug", writer: () => "w" } }),
  }).run({ prompt: "p" });
  assert.equal(long.status, "failed");
  assert.equal(long.error?.code, "STEP_FAILED");
  assert.match(long.error?.message ?? "", /neither set "choice" nor replied with a short label/);

  const byKey = new Harness("by-key");
  byKey
    .choiceKey("route")
    .when("b", new FnStep("arm-b", (ctx) => ctx.set("arm", "b")))
    .otherwise(new FnStep("drop", (ctx) => ctx.set("arm", "drop")));
  const keySteps = [
    new FnStep("arm-b", (ctx) => ctx.set("arm", "b")),
    new FnStep("drop", (ctx) => ctx.set("arm", "drop")),
  ];
  const keyRunner = new GraphRunner({
    definition: byKey.toDefinition(),
    executor: new InProcessExecutor({ steps: keySteps }),
  });
  assert.equal((await keyRunner.run({ prompt: "p", input: { route: "b" } })).bag.arm, "b");
  assert.equal((await keyRunner.run({ prompt: "p" })).bag.arm, "drop");
});

void test("an invoke while a run is in flight fails that run without a manager, is answered with one, and an idle invoke starts a run", async () => {
  let release: () => void = () => undefined;
  const gate = new Promise<void>((r) => {
    release = r;
  });
  const wait = new FnStep("wait", async () => gate);
  const h = new Harness("busy");
  h.next(wait);
  const executor = new InProcessExecutor({ steps: [wait] });

  const plain = new GraphRunner({ definition: h.toDefinition(), executor });
  const first = await plain.invoke({ prompt: "one" });
  assert.equal(first.kind, "started");
  await assert.rejects(
    plain.invoke({ prompt: "two" }),
    (e: unknown) => e instanceof GraphError && e.code === "RUN_IN_FLIGHT" && /configure a managerAgent/.test(e.message),
  );
  // Without a manager the in-flight run fails, as the seed says.
  const failed = first.kind === "started" ? await first.run.result : undefined;
  assert.equal(failed?.status, "failed");
  assert.equal(failed?.error?.code, "RUN_IN_FLIGHT");

  const manager = scriptedManager([{ action: "answer", text: "still working on it" }]);
  const managed = new GraphRunner({ definition: h.toDefinition(), executor, manager });
  const started = await managed.invoke({ prompt: "one" });
  const answered = await managed.invoke({ prompt: "status?" });
  assert.equal(answered.kind, "answered");
  assert.equal(answered.kind === "answered" ? answered.text : "", "still working on it");
  assert.equal(manager.events[0]?.kind === "invoke_in_flight" ? manager.events[0].prompt : "", "status?");

  release();
  if (started.kind === "started") assert.equal((await started.run.result).status, "succeeded");
  const again = await plain.invoke({ prompt: "three" });
  assert.equal(again.kind, "started", "an idle invoke starts a new run");
  if (again.kind === "started") assert.equal((await again.run.result).bag.prompt, "three");
});

void test("cancel aborts the step's signal and ends the run cancelled", async () => {
  let signal: AbortSignal | undefined;
  const hang = new FnStep("hang", (_ctx, info) => {
    signal = info.signal;
    return new Promise<void>(() => undefined);
  });
  const h = new Harness("cancel-run");
  h.next(hang);
  const runner = new GraphRunner({ definition: h.toDefinition(), executor: new InProcessExecutor({ steps: [hang] }) });
  const handle = await runner.start({ prompt: "p", runId: "r-cancel" });
  while (!signal) await new Promise((r) => setImmediate(r));
  assert.equal(runner.cancel("r-cancel"), true);
  const result = await handle.result;
  assert.equal(result.status, "cancelled");
  assert.equal(signal.aborted, true);
});

void test("cancel while the manager decides ends the run at once, tells the manager, and records no decision", async () => {
  const boom = new FnStep("boom", () => {
    throw new Error("disk full");
  });
  const h = new Harness("cancel-decision");
  h.next(boom).next(agent("after"));
  let asked: { signal: AbortSignal | undefined; decide: (d: ManagerDecision) => void } | undefined;
  // A manager agent's job takes its time (a model call, a person's approval): this one decides only when told to.
  const manager: GraphManager = {
    decide: (_event, options) =>
      new Promise((resolve) => {
        asked = { signal: options?.signal, decide: resolve };
      }),
  };
  const store = new InMemoryCheckpointStore();
  let afterRan = false;
  const runner = new GraphRunner({
    definition: h.toDefinition(),
    executor: new InProcessExecutor({ steps: [boom], agents: { after: () => String((afterRan = true)) } }),
    manager,
    store,
  });
  const handle = await runner.start({ prompt: "p", runId: "r-cancel-decision" });
  while (!asked) await new Promise((r) => setImmediate(r));
  assert.equal(runner.cancel("r-cancel-decision"), true);
  assert.equal(asked.signal?.aborted, true, "the manager hears of the cancel, to stop deciding");
  // A decision arriving after the cancel is not the run's any more.
  asked.decide({ action: "skip" });
  const result = await handle.result;
  assert.equal(result.status, "cancelled");
  assert.equal(afterRan, false);
  assert.deepEqual(
    (await store.loadSteps("r-cancel-decision")).map((s) => s.path),
    [],
    "nothing recorded for the failed step",
  );
});

void test("a run abandoned mid-step resumes in a new runner, replaying recorded deltas; runs are pinned to their definition", async () => {
  const store = new InMemoryCheckpointStore();
  const executions: string[] = [];
  const counter = (name: string, hangOnce = false): FnStep => {
    let hung = false;
    return new FnStep(name, (ctx, info) => {
      executions.push(info.idempotencyKey);
      if (hangOnce && !hung) {
        hung = true;
        return new Promise<void>(() => undefined);
      }
      ctx.set(name, Number(ctx.get("n") ?? 0) + 1);
      ctx.set("n", Number(ctx.get("n") ?? 0) + 1);
    });
  };
  const h = new Harness("resume", { version: "1" });
  h.next(counter("a")).next(counter("b")).next(counter("c"));
  const def = h.toDefinition();
  const crashed = new GraphRunner({
    definition: def,
    executor: new InProcessExecutor({ steps: [counter("a"), counter("b", true), counter("c")] }),
    store,
  });
  await crashed.start({ prompt: "p", runId: "r1" });
  while (executions.length < 2) await new Promise((r) => setImmediate(r));
  // The first runner is abandoned here, as if its process had died.

  const other = new Harness("resume", { version: "2" });
  other.next(counter("a"));
  const wrong = new GraphRunner({ definition: other.toDefinition(), executor: new InProcessExecutor(), store });
  await assert.rejects(
    wrong.resume({ runId: "r1" }),
    (e: unknown) => e instanceof GraphError && e.code === "DEFINITION_MISMATCH" && /version 1/.test(e.message),
  );
  assert.deepEqual(await wrong.resumeAll(), [], "resumeAll skips runs pinned to other definitions");

  // A restarted orchestrator: every unfinished run, each with its pinned definition.
  const handles = await resumeStoredRuns({
    executor: new InProcessExecutor({ steps: [counter("a"), counter("b"), counter("c")] }),
    store,
  });
  assert.deepEqual(
    handles.map((h) => h.runId),
    ["r1"],
  );
  const result = await handles[0]?.result;
  const fresh = new GraphRunner({ definition: def, executor: new InProcessExecutor(), store });
  assert.equal(result?.status, "succeeded");
  assert.deepEqual(executions, ["r1/0", "r1/1", "r1/1", "r1/2"]);
  assert.deepEqual([result?.bag.a, result?.bag.b, result?.bag.c, result?.bag.n], [1, 2, 3, 3]);
  assert.deepEqual(
    (await store.loadSteps("r1")).map((s) => s.path),
    ["/0", "/1", "/2"],
  );
  await assert.rejects(fresh.resume({ runId: "r1" }), { code: "RUN_FINISHED" });
});

void test("every step attempt gets a span carrying node id, path and iteration; failures are marked", async () => {
  const spans: { name: string; attributes: Record<string, unknown>; status?: number; ended: boolean }[] = [];
  const tracer = {
    startSpan: (name: string, options?: { attributes?: Record<string, string | number | boolean> }) => {
      const span: (typeof spans)[number] = { name, attributes: { ...options?.attributes }, ended: false };
      spans.push(span);
      return {
        setStatus: (s: { code: number }) => {
          span.status = s.code;
        },
        end: () => {
          span.ended = true;
        },
      };
    },
  };
  let fails = 1;
  const h = new Harness("spans");
  h.loop(agent("coder")).until(agent("reviewer")).maxIterations(2);
  const result = await new GraphRunner({
    definition: h.toDefinition(),
    executor: new InProcessExecutor({
      agents: {
        coder: () => {
          if (fails-- > 0) throw new Error("flaky");
          return "patch";
        },
        reviewer: () => "again",
      },
    }),
    // retry the flaky coder, then end the loop when it reaches maxIterations
    manager: scriptedManager([{ action: "retry" }, { action: "skip" }]),
    tracer,
  }).run({ prompt: "p", runId: "span-run" });
  assert.equal(result.status, "succeeded");
  assert.deepEqual(
    spans.map((s) => [
      s.name,
      s.attributes["oz0.step_path"],
      s.attributes["oz0.iteration"],
      s.attributes["oz0.attempt"],
      s.status ?? 0,
      s.ended,
    ]),
    [
      ["graph.step agent:coder", "/0/1/body/0", 1, 1, 2, true],
      ["graph.step agent:coder", "/0/1/body/0", 1, 2, 0, true],
      ["graph.step agent:reviewer", "/0/1/until/0", 1, 1, 0, true],
      ["graph.step agent:coder", "/0/2/body/0", 2, 1, 0, true],
      ["graph.step agent:reviewer", "/0/2/until/0", 2, 1, 0, true],
    ],
  );
  assert.ok(spans.every((s) => s.attributes["oz0.run_id"] === "span-run"));
});

void test("a step that sets what JSON cannot keep fails, naming the key, before anything is recorded", async () => {
  const cyclic: Record<string, unknown> = { name: "loop" };
  cyclic.self = cyclic;
  const cases: [unknown, RegExp][] = [
    // Read back after a resume as a string: a later step's `when.getTime()` worked only in the first run.
    [new Date(0), /"v" is a Date/],
    [{ score: Number.NaN }, /"v"\."score" is NaN/],
    [[1, 2n], /"v"\[1\] is a bigint/],
    [new Map([["a", 1]]), /"v" is a Map/],
    [cyclic, /"v"\."self" refers back to a value that holds it/],
    [{ nested: { gone: undefined } }, /"v"\."nested"\."gone" is undefined/],
  ];
  for (const [value, named] of cases) {
    const store = new InMemoryCheckpointStore();
    const stamp = new FnStep("stamp", (ctx) => ctx.set("v", value));
    let nextRan = false;
    const next = new FnStep("next", () => {
      nextRan = true;
    });
    const h = new Harness("json-bag");
    h.next(stamp).next(next);
    const runner = new GraphRunner({
      definition: h.toDefinition(),
      executor: new InProcessExecutor({ steps: [stamp, next] }),
      store,
    });
    const result = await runner.run({ prompt: "p", runId: "r-json" });
    assert.equal(result.status, "failed", String(named));
    assert.match(result.error?.message ?? "", named);
    assert.match(result.error?.message ?? "", /step step:stamp at \/0 failed: .*bag values must be JSON data/);
    assert.equal(nextRan, false);
    assert.deepEqual(await store.loadSteps("r-json"), [], "nothing recorded");
  }
  // JSON data of every kind passes, as does a value shared by two keys (JSON copies it).
  const shared = { a: [1, "two", true, null, { b: -0.5 }] };
  const ok = new FnStep("ok", (ctx) => {
    ctx.set("x", shared);
    ctx.set("y", shared);
    ctx.set("z", Object.assign(Object.create(null) as object, { c: 1 }));
  });
  const h = new Harness("json-ok");
  h.next(ok);
  const fine = await new GraphRunner({
    definition: h.toDefinition(),
    executor: new InProcessExecutor({ steps: [ok] }),
  }).run({
    prompt: "p",
  });
  assert.equal(fine.status, "succeeded", fine.error?.message);
  await assert.rejects(
    new GraphRunner({ definition: h.toDefinition(), executor: new InProcessExecutor({ steps: [ok] }) }).run({
      prompt: "p",
      input: { since: new Date(0) },
    }),
    /the run's input holds a value JSON cannot keep: "since" is a Date/,
  );
});

void test("a run whose signal aborted before it was launched ends cancelled before any step starts", async () => {
  const started: string[] = [];
  const h = new Harness("signalled");
  h.next(agent("a"));
  const runner = new GraphRunner({
    definition: h.toDefinition(),
    // Runs until the run is cancelled.
    executor: new InProcessExecutor({
      agents: { a: ({ path }) => (started.push(path), new Promise<string>(() => undefined)) },
    }),
  });
  const cancel = new AbortController();
  cancel.abort("not needed any more");
  const result = await runner.run({ prompt: "p", runId: "r1", signal: cancel.signal });
  assert.equal(result.status, "cancelled");
  assert.equal(result.error?.message, "run r1 was cancelled: not needed any more");
  assert.deepEqual(started, []);
  // Resumed with a signal that aborts later: as cancel() does.
  const later = new AbortController();
  const resumed = await runner.resume({ runId: "r1", signal: later.signal });
  later.abort(new Error("stopped by the operator"));
  const end = await resumed.result;
  assert.equal(end.status, "cancelled");
  assert.equal(end.error?.message, "run r1 was cancelled: stopped by the operator");
  assert.deepEqual(started, ["/0"]);
});

void test("stepPathBounds gives each step node the longest path its events carry, a manager's loop retries included", async () => {
  const h = new Harness("bounded");
  let rounds = 0;
  h.loop(agent("coder"))
    .until(agent("reviewer"))
    .maxIterations(2)
    .next(
      new Graph("after")
        .choiceKey("k")
        .when("a", agent("done"))
        .otherwise(agent("done", { id: "agent:fallback" })),
    );
  const definition = h.toDefinition();
  // The last path each node started at: loops only count up.
  const last = new Map<string, string>();
  const runner = new GraphRunner({
    definition,
    maxRetries: 1,
    executor: new InProcessExecutor({
      agents: { coder: () => "patch", reviewer: () => (++rounds < 10 ? "again" : "break"), done: () => "ok" },
    }),
    manager: { decide: async () => ({ action: "retry" }) },
    onEvent: (e) => {
      if (e.type !== "step_started" || !e.nodeId || !e.path) return;
      last.set(e.nodeId, e.path);
    },
  });
  // Two rounds, two more granted once; the third grant is refused, and the run fails there.
  const result = await runner.run({ prompt: "p" });
  assert.equal(result.status, "failed");
  assert.match(result.error?.message ?? "", /manager's retries ran out/);
  const bounds = stepPathBounds(definition, { maxRetries: 1 });
  assert.deepEqual(
    bounds.map((b) => [b.nodeId, b.where, b.longestPath]),
    [
      ["agent:coder", "/root/0/body/0", "/0/4/body/0"],
      ["agent:reviewer", "/root/0/until/0", "/0/4/until/0"],
      ["choice-key:k", "/graphs/after/0", "/1/0/key"],
      ["agent:done", "/graphs/after/0/arms/0/flow/0", "/1/0/arm0/0"],
      ["agent:fallback", "/graphs/after/0/otherwise/0", "/1/0/else/0"],
    ],
  );
  assert.equal(last.get("agent:coder"), "/0/4/body/0");
  assert.equal(last.get("agent:reviewer"), "/0/4/until/0");
});
