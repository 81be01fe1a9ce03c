// The source document's examples as written, translated to @oz0/graph, each
// run with deterministic functions standing in for agents.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ApiTrigger,
  Graph,
  Harness,
  InProcessExecutor,
  type HarnessContext,
  GraphRunner,
  Step,
  agent,
  type AgentRequest,
} from "../src/index.js";

class ParseEmail extends Step {
  public constructor() {
    super("parse-email");
  }

  public async run(ctx: HarnessContext): Promise<void> {
    const raw = String(ctx.get("prompt") ?? "");
    ctx.set("subject", raw.split("\n")[0]);
    ctx.set("output", raw);
  }
}

void test("email triage: the evaluator's short reply picks the arm; every arm may use the same writer", async () => {
  const triage = agent("email-triage");
  const writer = agent("writer");
  const inbox = new Harness("inbox", { triggers: [new ApiTrigger()] });
  inbox.choice(triage).when("bug_report", writer).when("feature_request", writer).otherwise(writer);

  const def = inbox.toDefinition();
  assert.equal(def.id, "harness:inbox");
  assert.deepEqual(def.triggers, [{ type: "api" }]);

  const prompts: string[] = [];
  const executor = new InProcessExecutor({
    agents: {
      "email-triage": ({ prompt }) =>
        prompt.includes("crash") ? "bug_report" : prompt.includes("please add") ? " feature_request\n" : "other",
      writer: ({ prompt }) => {
        prompts.push(prompt);
        return "Thanks for writing in.";
      },
    },
  });
  const runner = new GraphRunner({ definition: def, executor, validate: { knownAgents: ["email-triage", "writer"] } });

  const bug = await runner.run({ prompt: "The app crashes on start" });
  assert.equal(bug.status, "succeeded");
  assert.equal(bug.bag.choice, "bug_report");
  assert.equal(bug.bag.writer, "Thanks for writing in.");
  assert.equal(bug.bag["email-triage"], "bug_report");
  // The writer sees the prompt plus the evaluator's output, as the seed says.
  assert.equal(prompts[0], "The app crashes on start\n\nPrevious output:\nbug_report");

  const feature = await runner.run({ prompt: "please add dark mode" });
  assert.equal(feature.bag.choice, "feature_request");
  const other = await runner.run({ prompt: "hello" });
  assert.equal(other.bag.choice, "other");
  assert.equal(other.status, "succeeded");
});

void test("research and draft run in parallel, join, then the editor sees both", async () => {
  const search = agent("search");
  const summarize = agent("summarize");
  const drafter = agent("drafter");
  const editor = agent("editor");
  const harness = new Harness("article");
  const research = new Graph("research").next(search).next(summarize);
  const draft = new Graph("draft").next(drafter);
  harness.parallel(research, draft).next(editor);

  const def = harness.toDefinition();
  assert.deepEqual(Object.keys(def.graphs ?? {}).sort(), ["draft", "research"]);

  let running = 0;
  let overlapped = false;
  const slow = (text: string) => async (_r: AgentRequest) => {
    running++;
    if (running > 1) overlapped = true;
    await new Promise((r) => setTimeout(r, 5));
    running--;
    return text;
  };
  const executor = new InProcessExecutor({
    agents: {
      search: slow("three sources"),
      summarize: slow("summary of sources"),
      drafter: slow("first draft"),
      editor: ({ prompt }) => `edited(${prompt.length > 0 ? "ok" : "empty"})`,
    },
  });
  const result = await new GraphRunner({ definition: def, executor }).run({ prompt: "Write about graphs" });
  assert.equal(result.status, "succeeded");
  assert.ok(overlapped, "the two subgraphs ran at the same time");
  assert.equal(result.bag.summarize, "summary of sources");
  assert.equal(result.bag.drafter, "first draft");
  assert.equal(result.bag.editor, "edited(ok)");
  // Both branches wrote `output`: reported, and the later-declared branch (draft) wins.
  assert.deepEqual(
    result.conflicts.map((c) => [c.key, c.branches, c.winner]),
    [["output", [0, 1], 1]],
  );
});

void test("coder/reviewer loop: feedback flows into the next round and break ends it", async () => {
  const coder = agent("coder");
  const reviewer = agent("reviewer");
  const code = new Graph("code");
  code.loop(new Graph("implement").next(coder)).until(reviewer).maxIterations(5);

  const coderPrompts: string[] = [];
  let reviews = 0;
  const executor = new InProcessExecutor({
    agents: {
      coder: (r) => {
        coderPrompts.push(r.prompt);
        return `patch v${r.iteration}`;
      },
      reviewer: () => (++reviews < 3 ? `again\nfix nit ${reviews}` : "break"),
    },
  });
  const events: string[] = [];
  const runner = new GraphRunner({
    definition: code.toDefinition(),
    executor,
    onEvent: (e) => {
      if (e.type === "step_finished") events.push(`${e.nodeId}@${e.iteration}`);
    },
  });
  const result = await runner.run({ prompt: "make the test pass" });
  assert.equal(result.status, "succeeded");
  assert.equal(result.bag.coder, "patch v3");
  assert.equal(result.bag.choice, "break");
  // Loops reuse node ids; the iteration tells rounds apart.
  assert.deepEqual(events, [
    "agent:coder@1",
    "agent:reviewer@1",
    "agent:coder@2",
    "agent:reviewer@2",
    "agent:coder@3",
    "agent:reviewer@3",
  ]);
  assert.equal(coderPrompts[0], "make the test pass");
  assert.equal(coderPrompts[1], "make the test pass\n\nPrevious output:\nagain\nfix nit 1\n\nFeedback:\nfix nit 1");
});

void test("coder/reviewer loop stops at maxIterations(5) and reports the control event", async () => {
  const code = new Graph("code");
  code
    .loop(new Graph("implement").next(agent("coder")))
    .until(agent("reviewer"))
    .maxIterations(5);
  let coderRuns = 0;
  const controls: string[] = [];
  const executor = new InProcessExecutor({
    agents: { coder: () => `patch ${++coderRuns}`, reviewer: () => "again\nstill failing" },
  });
  const result = await new GraphRunner({
    definition: code.toDefinition(),
    executor,
    onEvent: (e) => {
      if (e.type === "control") controls.push(e.control?.kind ?? "");
    },
  }).run({ prompt: "fix it" });
  assert.equal(result.status, "succeeded");
  assert.equal(coderRuns, 5);
  assert.equal(result.bag.feedback, "still failing");
  assert.deepEqual(controls, ["max_iterations"]);
});

void test("a custom ParseEmail step runs before the triage, and next() does not mutate steps", async () => {
  const triage = agent("email-triage");
  const parse = new ParseEmail();
  const harness = new Harness("inbox");
  harness.next(parse).next(triage);

  // Step.next returns a new chain; the step itself is unchanged and reusable.
  const chained = parse.next(agent("writer"));
  assert.equal(chained.name, "writer");
  assert.deepEqual(Object.keys(parse), ["name", "options"]);

  const def = harness.toDefinition();
  assert.deepEqual(
    def.root.map((n) => n.id),
    ["step:parse-email", "agent:email-triage"],
  );
  const executor = new InProcessExecutor({
    agents: { "email-triage": ({ prompt }) => (prompt.startsWith("Crash") ? "bug_report" : "other") },
    steps: [parse],
  });
  const result = await new GraphRunner({ definition: def, executor }).run({ prompt: "Crash report\nIt crashes." });
  assert.equal(result.bag.subject, "Crash report");
  assert.equal(result.bag["email-triage"], "bug_report");
});

void test("next on the same parent runs siblings in parallel; chaining runs in sequence", () => {
  const h = new Harness("shape");
  h.next(agent("a"));
  h.next(agent("b"));
  const parallel = h.toDefinition().root;
  assert.equal(parallel.length, 1);
  assert.equal(parallel[0]?.kind, "parallel");

  const s = new Harness("seq");
  s.next(agent("a")).next(agent("b"));
  assert.deepEqual(
    s.toDefinition().root.map((n) => n.kind),
    ["agent", "agent"],
  );
});
