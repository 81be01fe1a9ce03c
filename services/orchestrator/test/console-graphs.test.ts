// The console's graphs page in a real browser against the real stack, with
// the seed's graph examples (examples/plugins/support-graphs): a graph is
// drawn with its stable node ids; on a run, its nodes change state live (the
// editor step is held until the test lets it answer, so the page is seen
// with the steps before it completed and the editor running, then done),
// through one transcript stream and no transcript read again;
// a loop shows its iterations; a choice shows the arm taken, and the same
// agent in the arms not taken as not run. axe on each page; screenshots
// written.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, test } from "node:test";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import type { Browser } from "playwright-core";
import { assertAccessible, consoleClients, launchBrowser, openConsole, screenshot } from "./support/console-browser.js";
import { agentOf } from "./support/graph-agents.js";
import { repoRoot, startTestStack, type TestStack } from "./support/test-stack.js";

const plugin = path.join(repoRoot, "examples/plugins/support-graphs");

let t: TestStack;
let browser: Browser;
let releaseEditor!: () => void;
const editorMayAnswer = new Promise<void>((r) => (releaseEditor = r));

async function turn(agent: string, input: string): Promise<ScriptedTurn> {
  switch (agent) {
    case "editor":
      await editorMayAnswer;
      return { text: "final" };
    case "email-triage":
      return { text: input.includes("crash") ? "bug_report" : "other" };
    case "coder":
      return { text: input.includes("Feedback:") ? "patch with better names" : "patch" };
    case "reviewer":
      return { text: input.includes("better names") ? "break" : "again\nname the variable better" };
    default:
      return { text: `${agent} done` };
  }
}

const owner = () => consoleClients(t.url, t.stack.ownerToken);

before(async () => {
  const pick = ({ input, request }: { input: string; request: ScriptedRequest }): Promise<ScriptedTurn> =>
    turn(agentOf(request), input);
  t = await startTestStack({ pick: pick as unknown as Parameters<typeof startTestStack>[0]["pick"] });
  await owner().plugins.installPlugin({ source: plugin });
  browser = await launchBrowser();
});

after(async () => {
  releaseEditor();
  await browser?.close();
  await t?.close();
});

void test("a graph is drawn with its stable node ids, and a run's nodes change state live", async () => {
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.getByRole("link", { name: "Graphs" }).click();
  await page.locator('li[data-graph="article"]').getByRole("link").click();
  const graph = page.getByTestId("graph");
  for (const id of [
    "parallel:research+draft",
    "graph:research",
    "agent:search",
    "agent:summarize",
    "graph:draft",
    "agent:drafter",
    "agent:editor",
  ]) {
    await graph.locator(`li[data-node="${id}"]`).first().waitFor();
  }
  await assertAccessible(page, "graph");
  await screenshot(page, "graph");

  const { job } = await owner().jobs.runAgent({ agent: "article", input: "an article about tides" });
  const runId = job!.id;
  // The transcript's RPCs the page makes for the run: one stream, and no transcript read again.
  const transcriptCalls: string[] = [];
  page.on("request", (request) => {
    const method = /\/oz0\.orchestrator\.v1\.JobService\/(\w*Transcript)$/.exec(request.url())?.[1];
    if (method) transcriptCalls.push(method);
  });
  await page.goto(`${t.url}/#/graphs/article?run=${runId}`);
  const node = (id: string) => page.locator(`li[data-node="${id}"]`).first();
  await node("agent:editor").and(page.locator('[data-status="running"]')).waitFor();
  for (const id of ["agent:search", "agent:summarize", "agent:drafter", "parallel:research+draft"]) {
    assert.equal(await node(id).getAttribute("data-status"), "completed", `${id} completed before the editor started`);
  }
  assert.equal(await page.getByTestId("run-state").textContent(), "running");
  await assertAccessible(page, "graph run");
  await screenshot(page, "graph-run-live");

  releaseEditor();
  await node("agent:editor").and(page.locator('[data-status="completed"]')).waitFor();
  await page.getByTestId("run-state").filter({ hasText: "succeeded" }).waitFor();
  await screenshot(page, "graph-run-done");
  assert.deepEqual(transcriptCalls, ["WatchJobTranscript"], "the statuses came through one stream");

  // The run is a job too: its page links back to the graph view.
  await page.getByRole("link", { name: runId }).click();
  await page.getByTestId("job-state").filter({ hasText: "succeeded" }).waitFor();
  await page.getByTestId("usage").filter({ hasText: "model calls" }).waitFor();
  assert.match((await page.locator("table.usage").textContent()) ?? "", /agent:editor|editor/, "usage per step job");
  assert.equal(
    (await page.locator("li.row-text", { hasText: "finished" }).count()) >= 4,
    true,
    "each step line is a row of its own",
  );
  await assertAccessible(page, "job (graph run)");
  await screenshot(page, "job-graph-run");
  await page.getByRole("link", { name: "each node's status, live" }).click();
  await node("agent:editor").and(page.locator('[data-status="completed"]')).waitFor();
  await page.close();
});

void test("a loop shows its iterations on a run", async () => {
  const { job } = await owner().jobs.runAgent({ agent: "code", input: "add a function" });
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.goto(`${t.url}/#/graphs/code?run=${job!.id}`);
  await page.getByTestId("run-state").filter({ hasText: "succeeded" }).waitFor();
  const loop = page.locator('li[data-node="loop:implement"]').first();
  await loop.and(page.locator('[data-status="completed"]')).waitFor();
  await loop.locator(".node-head").getByText("iteration 2").waitFor();
  await page.locator('li[data-node="agent:reviewer"]').getByText("ran 2 times").waitFor();
  await assertAccessible(page, "graph run (loop)");
  await page.close();
});

void test("a choice shows the arm it took; the same agent in the other arms did not run", async () => {
  const { job } = await owner().jobs.runAgent({ agent: "inbox", input: "the app crashes on start" });
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.goto(`${t.url}/#/graphs/inbox?run=${job!.id}`);
  await page.getByTestId("run-state").filter({ hasText: "succeeded" }).waitFor();
  const arm = (label: string) => page.locator(`li[data-arm='${label}']`);
  await arm('when "bug_report"').and(page.locator('[data-taken="true"]')).waitFor();
  // The transcript may trail the run's end a little: wait for the step's last event.
  await arm('when "bug_report"').locator('li[data-node="agent:writer"][data-status="completed"]').waitFor();
  for (const label of ['when "feature_request"', "otherwise"]) {
    assert.equal(await arm(label).getAttribute("data-taken"), "false");
    assert.equal(
      await arm(label).locator('li[data-node="agent:writer"] [data-testid="node-state"]').textContent(),
      "not run",
    );
  }
  await page.locator('li[data-node="agent:email-triage"][data-status="completed"]').waitFor();
  await assertAccessible(page, "graph run (choice)");
  await screenshot(page, "graph-run-choice");
  await page.close();
});
