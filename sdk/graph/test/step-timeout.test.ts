// A custom step has a deadline: one that never returns fails at its timeout
// (the step's `timeout`, or the runner's default) with STEP_TIMED_OUT, its
// signal aborted so it can stop, and the manager's retry applies as for any
// failure. Without one, a step that never returned held its run forever.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  GraphRunner,
  Harness,
  InProcessExecutor,
  parseDefinitionYaml,
  Step,
  validateDefinition,
  type ControlEvent,
  type HarnessContext,
  type StepRunInfo,
} from "../src/index.js";

/** Never returns on its first run, until its signal aborts; returns at once on the next. */
class Stuck extends Step {
  public readonly aborted: unknown[] = [];
  #runs = 0;

  public constructor(timeout?: string) {
    super("stuck", timeout ? { timeout } : {});
  }

  public async run(ctx: HarnessContext, info: StepRunInfo): Promise<void> {
    if (++this.#runs > 1) {
      ctx.set("output", "done");
      return;
    }
    await new Promise<void>((resolve) => {
      info.signal.addEventListener("abort", () => {
        this.aborted.push(info.signal.reason);
        resolve();
      });
    });
    // A step that ignores its signal and sets keys late: too late, nothing of it is recorded.
    ctx.set("late", true);
  }
}

void test("a custom step past its timeout fails with STEP_TIMED_OUT, told through its signal", async () => {
  const step = new Stuck("1s");
  const harness = new Harness("stuck");
  harness.next(step);
  const definition = harness.toDefinition();
  assert.equal(definition.root[0]?.kind === "step" && definition.root[0].timeout, "1s");
  const result = await new GraphRunner({ definition, executor: new InProcessExecutor({ steps: [step] }) }).run({
    prompt: "go",
  });
  assert.equal(result.status, "failed");
  assert.match(
    result.error?.message ?? "",
    /step step:stuck at \/0 failed: custom step stuck \(step:stuck\) ran past its timeout of 1s and was told to stop/,
  );
  assert.equal((step.aborted[0] as { code?: string }).code, "STEP_TIMED_OUT");
  assert.equal(result.bag.late, undefined);
});

void test("the runner's default timeout applies to a step that sets none, and a manager's retry runs it again", async () => {
  const step = new Stuck();
  const harness = new Harness("stuck");
  harness.next(step);
  const events: ControlEvent[] = [];
  const runner = new GraphRunner({
    definition: harness.toDefinition(),
    executor: new InProcessExecutor({ steps: [step] }),
    customStepTimeoutMs: 200,
    manager: {
      decide: async (event) => {
        events.push(event);
        return { action: "retry" };
      },
    },
  });
  const result = await runner.run({ prompt: "go" });
  assert.equal(result.status, "succeeded", result.error?.message);
  assert.equal(result.output, "done");
  assert.deepEqual(
    events.map((e) => (e.kind === "step_error" ? e.error.code : e.kind)),
    ["STEP_TIMED_OUT"],
  );
});

void test("a step's timeout is a duration of at most 24h, more than none", () => {
  const yaml = (timeout: string): string => `
format: oz0.graph/v1
kind: harness
name: t
id: harness:t
root: [{ kind: step, id: "step:s", step: s, timeout: "${timeout}" }]
`;
  assert.equal(parseDefinitionYaml(yaml("1h30m")).root.length, 1);
  const problems = (timeout: string): string[] => {
    const result = validateDefinition(parseDefinitionYaml(yaml(timeout)));
    return result.ok ? [] : result.problems.map((p) => `${p.code} ${p.path}`);
  };
  assert.deepEqual(problems("24h"), []);
  assert.deepEqual(problems("0s"), ["STEP_TIMEOUT_INVALID /root/0/timeout"]);
  assert.deepEqual(problems("25h"), ["STEP_TIMEOUT_INVALID /root/0/timeout"]);
  assert.throws(() => parseDefinitionYaml(yaml("ten minutes")), /\/root\/0\/timeout/);
});
