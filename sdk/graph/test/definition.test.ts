// Definitions: the YAML form parses to what the fluent API produces, the
// schema names bad fields, and publish-time validation names every problem.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import {
  Graph,
  GraphRunner,
  GraphValidationError,
  Harness,
  Step,
  agent,
  assertValidDefinition,
  definitionHash,
  definitionToYaml,
  graphDefinitionSchema,
  InProcessExecutor,
  parseDefinition,
  parseDefinitionYaml,
  renderGraph,
  toMermaid,
  validateDefinition,
  type GraphDefinition,
} from "../src/index.js";

class ParseEmail extends Step {
  public constructor() {
    super("parse-email", { module: "@acme/email-steps", exportName: "ParseEmail" });
  }

  public run(): void {}
}

function codes(value: unknown, options = {}): string[] {
  const result = validateDefinition(value, options);
  return result.ok ? [] : result.problems.map((p) => `${p.code} ${p.path}`);
}

function harnessWith(build: (h: Harness) => void): GraphDefinition {
  const h = new Harness("h");
  build(h);
  return h.toDefinition();
}

void test("the YAML form of the triage harness parses to the same definition as the TypeScript one", () => {
  const inbox = new Harness("inbox", { managerAgent: "supervisor", version: "3" });
  const writer = agent("writer");
  inbox.next(new ParseEmail()).choice(agent("email-triage")).when("bug_report", writer).otherwise(writer);
  const fromTs = inbox.toDefinition();

  const yaml = `
format: oz0.graph/v1
kind: harness
name: inbox
id: harness:inbox
version: "3"
managerAgent: supervisor
root:
  - kind: step
    id: step:parse-email
    step: parse-email
    module: "@acme/email-steps"
    export: ParseEmail
  - kind: choice
    id: choice:email-triage
    evaluator: { kind: agent, id: agent:email-triage, agent: email-triage }
    key: choice
    arms:
      - label: bug_report
        flow: [{ kind: agent, id: agent:writer, agent: writer }]
    otherwise: [{ kind: agent, id: agent:writer, agent: writer }]
`;
  const fromYaml = parseDefinitionYaml(yaml);
  assert.deepEqual(fromYaml, fromTs);
  assert.equal(definitionHash(fromYaml), definitionHash(fromTs));
  // Round trip through our own YAML writer too.
  assert.deepEqual(parseDefinitionYaml(definitionToYaml(fromTs)), fromTs);
  assertValidDefinition(fromYaml, {
    knownAgents: ["writer", "email-triage", "supervisor"],
    knownSteps: ["parse-email"],
  });
});

void test("the schema names the offending field", () => {
  assert.throws(
    () =>
      parseDefinitionYaml(
        "format: oz0.graph/v1\nkind: harness\nname: x\nid: harness:x\nroot:\n  - kind: agent\n    id: agent:a\n    agnt: a\n",
      ),
    (e: unknown) =>
      e instanceof GraphValidationError &&
      e.problems.some((p) => p.path === "/root/0" && p.message.includes('"agent"')) &&
      e.problems.some((p) => p.path === "/root/0" && p.message.includes('"agnt"')),
  );
  assert.throws(
    () =>
      parseDefinitionYaml(
        "format: oz0.graph/v1\nkind: harness\nname: x\nid: harness:x\nroot:\n  - kind: loop\n    id: loop:a\n    body: []\n    maxIterations: two\n",
      ),
    (e: unknown) => e instanceof GraphValidationError && e.problems.some((p) => p.path === "/root/0/maxIterations"),
  );
  assert.throws(
    () =>
      parseDefinitionYaml(
        "format: oz0.graph/v1\nkind: harness\nname: x\nid: harness:x\nsecretKeys: [apiKey, apiKey]\nroot:\n  - kind: agent\n    id: agent:a\n    agent: a\n",
      ),
    (e: unknown) => e instanceof GraphValidationError && e.problems.some((p) => p.path === "/secretKeys"),
  );
  assert.throws(
    () => parseDefinitionYaml("root: [unclosed"),
    (e: unknown) => e instanceof GraphValidationError && e.problems[0]?.code === "YAML_SYNTAX",
  );
});

void test("a loop without until or maxIterations, or with n < 1, is refused", () => {
  const body = new Graph("implement").next(agent("coder"));
  assert.deepEqual(codes(harnessWith((h) => h.loop(body).maxIterations(3))), ["LOOP_MISSING_UNTIL /root/0/until"]);
  assert.deepEqual(codes(harnessWith((h) => h.loop(body).until(agent("reviewer")))), [
    "LOOP_MISSING_MAX_ITERATIONS /root/0/maxIterations",
  ]);
  assert.deepEqual(codes(harnessWith((h) => h.loop(body).until(agent("reviewer")).maxIterations(0))), [
    "LOOP_MAX_ITERATIONS_INVALID /root/0/maxIterations",
  ]);
  const result = validateDefinition(harnessWith((h) => h.loop(body)));
  assert.equal(result.ok, false);
  assert.match(result.ok ? "" : (result.problems[0]?.message ?? ""), /add \.until\(step\)/);
});

void test("a choice without arms is refused, and so is a label no arm can reach", () => {
  assert.deepEqual(codes(harnessWith((h) => h.choice(agent("triage")).otherwise(agent("writer")))), [
    "CHOICE_NO_ARMS /root/0/arms",
  ]);
  assert.deepEqual(codes(harnessWith((h) => h.choiceKey("route").when("a", agent("x")).when("a", agent("y")))), [
    "CHOICE_DUPLICATE_LABEL /root/0/arms/1/label",
  ]);
});

void test("unknown agents (including the manager) and unknown custom steps are named", () => {
  const def = new Harness("h", { managerAgent: "boss" });
  def.next(new ParseEmail()).next(agent("writer"));
  assert.deepEqual(codes(def.toDefinition(), { knownAgents: ["boss"], knownSteps: [] }), [
    "UNKNOWN_STEP /root/0/step",
    "UNKNOWN_AGENT /root/1/agent",
  ]);
  assert.deepEqual(codes(def.toDefinition(), { knownAgents: ["writer"], knownSteps: ["parse-email"] }), [
    "UNKNOWN_AGENT /managerAgent",
  ]);
});

void test("a cycle outside a loop is refused, from TypeScript and from YAML", () => {
  const a = new Graph("a");
  const b = new Graph("b");
  a.next(agent("x")).next(b);
  b.next(a);
  const h = new Harness("h");
  h.next(a);
  const problems = codes(h.toDefinition());
  assert.deepEqual(problems, ["GRAPH_CYCLE /graphs/b/0/graph"]);
  const self = new Harness("self");
  self.next(agent("x")).next(self);
  assert.deepEqual(codes(self.toDefinition()), ["GRAPH_CYCLE /root/1/graph"]);
  const yaml = parseDefinitionYaml(`
format: oz0.graph/v1
kind: harness
name: h
id: harness:h
root: [{ kind: graph, id: "graph:p", graph: p }]
graphs:
  p: [{ kind: graph, id: "graph:q", graph: q }]
  q: [{ kind: graph, id: "graph:p", graph: p }]
`);
  assert.deepEqual(codes(yaml), ["GRAPH_CYCLE /graphs/q/0/graph"]);
  assert.deepEqual(codes({ ...yaml, graphs: {} }), ["UNKNOWN_GRAPH /root/0/graph"]);
});

void test("duplicate node ids are refused where both can run, allowed across arms of one choice", () => {
  assert.deepEqual(codes(harnessWith((h) => h.next(agent("writer")).next(agent("editor")).next(agent("writer")))), [
    "DUPLICATE_NODE_ID /root/2",
  ]);
  assert.deepEqual(
    codes(harnessWith((h) => h.next(agent("writer")).next(agent("writer", { id: "agent:writer-final" })))),
    [],
  );
  const writer = agent("writer");
  assert.deepEqual(
    codes(harnessWith((h) => h.choiceKey("k").when("a", writer).when("b", writer).otherwise(writer))),
    [],
  );
  // The same subgraph in two parallel branches: its steps would be indistinguishable.
  const g = new Graph("g").next(agent("x"));
  assert.deepEqual(codes(harnessWith((h) => h.parallel(g, g))), [
    "DUPLICATE_NODE_ID /root/0/branches/1/0 → /graphs/g/0",
  ]);
});

void test("duplicate node ids among thousands of places: across arms of nested choices allowed, anywhere both run refused, in one walk each", () => {
  const leaf = (agentName = "w") => ({ kind: "agent", id: `agent:${agentName}`, agent: agentName });
  // Binary choices 12 deep: 4,096 places of one agent, no two of which run in one run.
  const nested = (depth: number, at = 1): unknown[] =>
    depth === 0
      ? [leaf()]
      : [
          {
            kind: "choice",
            id: `choice-key:k${at}`,
            key: `k${at}`,
            arms: [
              { label: "a", flow: nested(depth - 1, at * 2) },
              { label: "b", flow: nested(depth - 1, at * 2 + 1) },
            ],
          },
        ];
  const definition = (root: unknown[]) => ({
    format: "oz0.graph/v1",
    kind: "harness",
    name: "h",
    id: "harness:h",
    root,
  });
  assert.deepEqual(codes(definition(nested(12))), []);
  // One more after the choices runs with whichever arm ran: refused once, naming the first place.
  const after = validateDefinition(definition([...nested(12), leaf()]));
  assert.deepEqual(
    after.problems.map((p) => [p.code, p.path]),
    [["DUPLICATE_NODE_ID", "/root/1"]],
  );
  assert.match(after.problems[0]!.message, new RegExp(`also used at /root/0${"/arms/0/flow/0".repeat(12)} and both`));
  const choice = (id: string, ...arms: unknown[][]) => ({
    kind: "choice",
    id: `choice-key:${id}`,
    key: id,
    arms: arms.map((flow, i) => ({ label: `l${i}`, flow })),
  });
  // Two choices one after the other both run: an arm of each names the agent.
  assert.deepEqual(codes(definition([choice("c1", [leaf()], [leaf("z")]), choice("c2", [leaf()], [leaf("z")])])), [
    "DUPLICATE_NODE_ID /root/1/arms/0/flow/0",
    "DUPLICATE_NODE_ID /root/1/arms/1/flow/0",
  ]);
  // In one arm, and again in a choice nested in that arm: both run.
  assert.deepEqual(codes(definition([choice("c", [leaf(), choice("d", [leaf()], [leaf("z")])], [leaf("y")])])), [
    "DUPLICATE_NODE_ID /root/0/arms/0/flow/1/arms/0/flow/0",
  ]);
});

void test("a builder cannot name two different subgraphs the same", () => {
  const h = new Harness("h");
  h.parallel(new Graph("dup").next(agent("a")), new Graph("dup").next(agent("b")));
  assert.throws(() => h.toDefinition(), { code: "INVALID_DECLARATION" });
});

void test("renderGraph and toMermaid draw the research/draft join with stable ids", () => {
  const h = new Harness("Article Flow");
  h.parallel(
    new Graph("research").next(agent("search")).next(agent("summarize")),
    new Graph("draft").next(agent("drafter")),
  ).next(agent("editor"));
  const def = h.toDefinition();
  assert.equal(def.id, "harness:article-flow");
  assert.equal(
    renderGraph(def),
    [
      "harness:article-flow",
      "├─ parallel:research+draft  (branches run at the same time, then join; a failure cancels the others)",
      "│  ├─ branch 1",
      "│  │  └─ graph:research",
      "│  │     ├─ agent:search",
      "│  │     └─ agent:summarize",
      "│  └─ branch 2",
      "│     └─ graph:draft",
      "│        └─ agent:drafter",
      "└─ agent:editor",
      "",
    ].join("\n"),
  );
  const mermaid = toMermaid(def);
  assert.match(mermaid, /^flowchart TD\n/);
  for (const id of [
    "harness:article-flow",
    "agent:search",
    "agent:summarize",
    "agent:drafter",
    "agent:editor",
    "graph:research",
  ]) {
    assert.ok(mermaid.includes(`"${id}"`), `${id} is drawn`);
  }
  // search → summarize, both branch ends → join → editor
  assert.equal((mermaid.match(/-->/g) ?? []).length, 8);
});

void test("loops draw their again/break edges", () => {
  const code = new Graph("code");
  code
    .loop(new Graph("implement").next(agent("coder")))
    .until(agent("reviewer"))
    .maxIterations(5);
  const mermaid = toMermaid(code.toDefinition());
  assert.match(mermaid, /-->\|"again \(max 5\)"\|/);
  assert.match(mermaid, /-->\|"break"\|/);
  assert.match(renderGraph(code.toDefinition()), /loop:implement {2}\(at most 5 iterations\)/);
});

void test("the published schema file is the schema the package checks against", () => {
  const file = JSON.parse(
    readFileSync(new URL("../schema/graph-definition.v1.json", import.meta.url), "utf8"),
  ) as unknown;
  assert.deepEqual(file, JSON.parse(JSON.stringify(graphDefinitionSchema)));
});

void test("a custom step is referenced by name and module, and loaded from that module when run", async () => {
  const def = parseDefinitionYaml(`
format: oz0.graph/v1
kind: harness
name: by-module
id: harness:by-module
root:
  - { kind: step, id: step:parse-email, step: parse-email, module: ./fixtures/email-steps.ts, export: ParseEmail }
`);
  const executor = new InProcessExecutor({ baseUrl: import.meta.url });
  const result = await new GraphRunner({ definition: def, executor }).run({ prompt: "Subject line\nbody" });
  assert.equal(result.status, "succeeded");
  assert.equal(result.bag.subject, "Subject line");
  const missing = await new GraphRunner({
    definition: {
      ...def,
      root: [{ kind: "step", id: "step:x", step: "x", module: "./fixtures/email-steps.ts", export: "Nope" }],
    },
    executor,
  }).run({ prompt: "p" });
  assert.match(missing.error?.message ?? "", /has no step class exported as "Nope"/);
});

void test("every seed example survives TypeScript → YAML → definition unchanged", () => {
  const writer = agent("writer");
  const inbox = new Harness("inbox");
  inbox.choice(agent("email-triage")).when("bug_report", writer).when("feature_request", writer).otherwise(writer);
  const article = new Harness("article");
  article
    .parallel(
      new Graph("research").next(agent("search")).next(agent("summarize")),
      new Graph("draft").next(agent("drafter")),
    )
    .next(agent("editor"));
  const code = new Graph("code");
  code
    .loop(new Graph("implement").next(agent("coder")))
    .until(agent("reviewer"))
    .maxIterations(5);
  const parse = new Harness("parse");
  parse.next(new ParseEmail()).next(agent("email-triage"));
  for (const def of [inbox, article, code, parse].map((g) => g.toDefinition())) {
    assert.deepEqual(parseDefinitionYaml(definitionToYaml(def)), def);
    assert.equal(validateDefinition(def).ok, true, def.name);
  }
});

void test("a subgraph named like an Object.prototype member is unknown, not a crash", () => {
  for (const name of ["constructor", "toString", "hasOwnProperty"]) {
    const def = {
      format: "oz0.graph/v1",
      kind: "harness",
      name: "h",
      id: "harness:h",
      root: [{ kind: "graph", id: "graph:x", graph: name }],
    };
    assert.deepEqual(codes(def), ["UNKNOWN_GRAPH /root/0/graph"], name);
    assert.deepEqual(codes({ ...def, graphs: { other: [{ kind: "agent", id: "agent:a", agent: "a" }] } }), [
      "UNKNOWN_GRAPH /root/0/graph",
    ]);
  }
});

void test("maxParallelBranches and maxConcurrentSteps bound what a run starts at once, subgraphs and nesting counted", () => {
  const def: GraphDefinition = {
    format: "oz0.graph/v1",
    kind: "harness",
    name: "wide",
    id: "harness:wide",
    root: [
      {
        kind: "parallel",
        id: "parallel:outer",
        branches: [
          [{ kind: "graph", id: "graph:three", graph: "three" }],
          [{ kind: "agent", id: "agent:a", agent: "a" }],
        ],
      },
    ],
    graphs: {
      three: [
        {
          kind: "parallel",
          id: "parallel:three",
          branches: ["b", "c", "d"].map((n) => [{ kind: "agent" as const, id: `agent:${n}`, agent: n }]),
        },
      ],
    },
  };
  const problems = (options: Parameters<typeof validateDefinition>[1]): string[] => {
    const result = validateDefinition(def, options);
    return result.ok ? [] : result.problems.map((p) => `${p.code} ${p.path}`);
  };
  assert.deepEqual(problems({}), [], "no limits unless asked for");
  assert.deepEqual(problems({ maxParallelBranches: 3, maxConcurrentSteps: 4 }), []);
  assert.deepEqual(problems({ maxParallelBranches: 2 }), ["PARALLEL_TOO_MANY_BRANCHES /graphs/three/0/branches"]);
  // The outer node runs the subgraph's three beside its own agent; the subgraph alone stays within the limit.
  assert.deepEqual(problems({ maxConcurrentSteps: 3 }), ["TOO_MANY_CONCURRENT_STEPS /root/0"]);
});

void test("a definition nested past the depth limit is refused naming the limit, however it is written", () => {
  const nested = (depth: number): string => {
    let node = `{"kind":"agent","id":"agent:a","agent":"a"}`;
    for (let i = 0; i < depth; i++) node = `{"kind":"parallel","id":"parallel:${i}","branches":[[${node}]]}`;
    return `{"format":"oz0.graph/v1","kind":"harness","name":"d","id":"harness:d","root":[${node}]}`;
  };
  const block = (depth: number): string => {
    const lines = ["format: oz0.graph/v1", "kind: harness", "name: d", "id: harness:d", "root:"];
    let indent = "  ";
    for (let i = 0; i < depth; i++) {
      lines.push(`${indent}- kind: parallel`, `${indent}  id: parallel:${i}`, `${indent}  branches:`, `${indent}    -`);
      indent += "      ";
    }
    lines.push(`${indent}- { kind: agent, id: "agent:a", agent: a }`);
    return lines.join("\n");
  };
  const tooDeep = (e: unknown): boolean => {
    assert.ok(e instanceof GraphValidationError, String(e));
    assert.equal(e.problems.length, 1);
    assert.equal(e.problems[0]?.code, "DEFINITION_TOO_DEEP");
    assert.match(
      e.problems[0]?.message ?? "",
      /nested more than 100 levels deep; a definition may nest at most 100 levels of mappings and lists/,
    );
    return true;
  };
  // 32 parallels inside each other are 99 levels (three each, and the document's own); 33 are too many.
  assert.equal(parseDefinitionYaml(nested(32)).root.length, 1);
  assert.equal(parseDefinitionYaml(block(32)).root.length, 1);
  assert.throws(() => parseDefinitionYaml(nested(33)), tooDeep);
  assert.throws(() => parseDefinitionYaml(block(33)), tooDeep);
  // Deep enough to overflow the YAML parser's stack, or the schema checker's.
  assert.throws(() => parseDefinitionYaml(nested(500)), tooDeep);
  assert.throws(() => parseDefinitionYaml(block(500)), tooDeep);
  assert.throws(() => parseDefinition(JSON.parse(nested(2000))), tooDeep);
  const result = validateDefinition(JSON.parse(nested(2000)));
  assert.equal(result.ok ? "" : result.problems[0]?.code, "DEFINITION_TOO_DEEP");
});

void test("subgraph references are bounded: nested too deep or expanding to too many steps is refused, at once", () => {
  const harnessOf = (graphs: Record<string, GraphDefinition["root"]>): GraphDefinition => ({
    format: "oz0.graph/v1",
    kind: "harness",
    name: "refs",
    id: "harness:refs",
    root: [{ kind: "graph", id: "graph:g0", graph: "g0" }],
    graphs,
  });
  const codes = (def: GraphDefinition): string[] => {
    const result = validateDefinition(def);
    return result.ok ? [] : result.problems.map((p) => `${p.code} ${p.path}`);
  };
  const leaf: GraphDefinition["root"] = [{ kind: "agent", id: "agent:a", agent: "a" }];
  // A chain of references: 32 inside each other are fine, 5,000 overflowed the validator's stack.
  const chain = (n: number): Record<string, GraphDefinition["root"]> =>
    Object.fromEntries(
      Array.from({ length: n }, (_, i) => [
        `g${i}`,
        i + 1 < n ? [{ kind: "graph" as const, id: `graph:g${i + 1}`, graph: `g${i + 1}` }] : leaf,
      ]),
    );
  assert.deepEqual(codes(harnessOf(chain(32))), []);
  assert.deepEqual(codes(harnessOf(chain(33))), ["SUBGRAPHS_TOO_DEEP /graphs/g31/0"]);
  assert.match(
    (validateDefinition(harnessOf(chain(5000))) as { problems: { message: string }[] }).problems[0]?.message ?? "",
    /subgraph references nest more than 32 deep \(refs → g0 → g1 → .* → g32\); a graph may reference subgraphs at most 32 deep/,
  );
  // A subgraph measured first from near the top is as deep when reached again through a longer chain.
  const late = harnessOf(chain(40));
  late.root = [
    { kind: "graph", id: "graph:g8", graph: "g8" },
    { kind: "graph", id: "graph:g0", graph: "g0" },
  ];
  assert.deepEqual(codes(late), ["SUBGRAPHS_TOO_DEEP /graphs/g7/0"]);
  // Doubling through parallel branches down to an empty flow: no step at all, 2^30 nodes still.
  const empty: Record<string, GraphDefinition["root"]> = Object.fromEntries(
    Array.from({ length: 30 }, (_, i) => {
      const next = { kind: "graph" as const, id: `graph:g${i + 1}`, graph: `g${i + 1}` };
      return [`g${i}`, [{ kind: "parallel" as const, id: `parallel:p${i}`, branches: [[next], [next]] }]];
    }),
  );
  empty.g30 = [];
  assert.deepEqual(codes(harnessOf(empty)), ["GRAPH_TOO_LARGE /root"]);
  // Each subgraph refers to the next in both arms of a choice (only one runs, so the ids are fine): 2^30 steps.
  const doubling: Record<string, GraphDefinition["root"]> = Object.fromEntries(
    Array.from({ length: 30 }, (_, i) => {
      const next = { kind: "graph" as const, id: `graph:g${i + 1}`, graph: `g${i + 1}` };
      return [
        `g${i}`,
        [
          {
            kind: "choice" as const,
            id: `choice:c${i}`,
            key: "k",
            arms: [
              { label: "a", flow: [next] },
              { label: "b", flow: [next] },
            ],
          },
        ],
      ];
    }),
  );
  doubling.g30 = leaf;
  const result = validateDefinition(harnessOf(doubling));
  assert.deepEqual(result.ok ? [] : result.problems.map((p) => `${p.code} ${p.path}`), ["GRAPH_TOO_LARGE /root"]);
  assert.match(
    result.ok ? "" : (result.problems[0]?.message ?? ""),
    /with its subgraph references expanded, this graph has more than 10000 nodes; a graph may have at most 10000/,
  );
});
