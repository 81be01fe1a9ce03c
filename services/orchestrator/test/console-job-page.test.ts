// A job's page in the console, in a real browser against the real stack: the
// shipment example shows its two harness operations as "Harness ·
// operation_key" rows under one "2 parallel" rail, live (one completes while
// the other runs, through one transcript stream the page never reads again
// beside), and a row opens a modal
// with what is public about it; the elapsed timeline and usage are drawn; a
// person edits a call's input in the page and approves it, and the patch
// artifact is rendered as a diff beside the decision that says so; the agents
// page shows every version and the diff between two; the page keeps up after
// the orchestrator restarts. Every page passes axe; screenshots go to
// services/orchestrator/.screenshots/.
import assert from "node:assert/strict";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import type { Browser } from "playwright-core";
import {
  assertAccessible,
  consoleClients,
  GUARDED_INSTRUCTIONS,
  launchBrowser,
  openConsole,
  screenshot,
  writeGuardedPlugin,
} from "./support/console-browser.js";
import { eventually, repoRoot, startTestStack, type TestStack } from "./support/test-stack.js";
import { toolResults } from "./support/tool-results.js";

const shipments = path.join(repoRoot, "examples", "plugins", "shipments");
const documents = path.join(shipments, "documents");

let t: TestStack;
let browser: Browser;
const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-console-job-"));

function systemOf(request: ScriptedRequest): string {
  const system = request.body?.system as unknown;
  return typeof system === "string" ? system : JSON.stringify(system ?? "");
}

// Each scratch loop's last turn waits for the other's, so the two operations
// overlap for certain (as in harness-operations-shipment.test.ts).
let extractReady!: () => void;
let verifyReady!: () => void;
const extractAtLastTurn = new Promise<void>((r) => (extractReady = r));
const verifyAtLastTurn = new Promise<void>((r) => (verifyReady = r));
// extract_shipment's answer waits for the test, so the page sees it running and then completing.
let releaseExtract!: () => void;
const extractMayAnswer = new Promise<void>((r) => (releaseExtract = r));

async function pick({
  input,
  turn,
  request,
}: {
  input: string;
  turn: number;
  request: ScriptedRequest;
}): Promise<ScriptedTurn> {
  const system = systemOf(request);
  if (system.includes(GUARDED_INSTRUCTIONS)) {
    if (turn > 0) return { text: `done: ${toolResults(request)}` };
    return { toolCalls: [{ name: "run_command", input: { command: `echo ${input}` } }] };
  }
  if (system.includes("## Harness operation: extract_shipment")) {
    if (turn === 0) return { toolCalls: [{ name: "read_file", input: { path: "booking-4831.txt" } }] };
    extractReady();
    await verifyAtLastTurn;
    await extractMayAnswer;
    return {
      text: JSON.stringify({
        shipmentReference: "SHP-4831",
        pickupCountry: "DE",
        deliveryCountry: "FR",
        sourceFiles: ["booking-4831.txt"],
      }),
    };
  }
  if (system.includes("## Harness operation: verify_shipment")) {
    if (turn === 0) return { toolCalls: [{ name: "read_file", input: { path: "email-4831.txt" } }] };
    verifyReady();
    await extractAtLastTurn;
    return { text: JSON.stringify({ valid: true, issues: [] }) };
  }
  if (turn === 0) {
    return {
      toolCalls: [
        { name: "extract_shipment", input: { task: "Extract order 4831 and cite the filenames used." } },
        {
          name: "verify_shipment",
          input: { task: "Candidate: SHP-4831 from DE to FR. Check it against every source." },
        },
      ],
    };
  }
  return { text: "Shipment SHP-4831 from DE to FR is verified." };
}

const owner = () => consoleClients(t.url, t.stack.ownerToken);

before(async () => {
  const repo = await writeGuardedPlugin(path.join(scratch, "guarded"));
  t = await startTestStack({
    pick: pick as unknown as Parameters<typeof startTestStack>[0]["pick"],
    // The orchestrator traces its jobs (to its own log), so each job has a trace id to link.
    orchestratorEnv: { OTEL_TRACES_EXPORTER: "console", OTEL_METRICS_EXPORTER: "none", OTEL_LOGS_EXPORTER: "none" },
  });
  await owner().plugins.installPlugin({ source: repo });
  await owner().plugins.installPlugin({ source: shipments });
  browser = await launchBrowser();
});

after(async () => {
  releaseExtract();
  await browser?.close();
  await t?.close();
  rmSync(scratch, { recursive: true, force: true });
});

void test("the shipment example: two operation rows under one '2 parallel' rail; a row opens its modal; timeline and usage", async () => {
  const { job } = await owner().jobs.runAgent({
    agent: "shipment-orchestrator",
    input: "Take order 4831",
    attachments: ["booking-4831.txt", "email-4831.txt", "customers.csv"].map((f) => path.join(documents, f)),
  });
  const jobId = job!.id;
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  // The transcript's RPCs the page makes: it follows one stream, and never reads the transcript again.
  const transcriptCalls: string[] = [];
  page.on("request", (request) => {
    const method = /\/oz0\.orchestrator\.v1\.JobService\/(\w*Transcript)$/.exec(request.url())?.[1];
    if (method) transcriptCalls.push(method);
  });
  await page.goto(`${t.url}/#/jobs/${jobId}`);

  // Live: verify_shipment completes while extract_shipment, held by the test, still runs; then it completes too.
  const group = page.locator("li.row-parallel");
  const status = (key: string) => group.locator("li", { hasText: `Harness · ${key}` }).locator(".status");
  await status("verify_shipment").filter({ hasText: "completed" }).waitFor();
  await status("extract_shipment").filter({ hasText: "running" }).waitFor();
  assert.equal(await page.getByTestId("job-state").textContent(), "running");
  releaseExtract();
  await status("extract_shipment").filter({ hasText: "completed" }).waitFor();
  await page.getByTestId("job-state").filter({ hasText: "succeeded" }).waitFor();
  assert.deepEqual(transcriptCalls, ["WatchJobTranscript"], "one transcript stream, and no transcript read again");

  await group.filter({ hasText: "2 parallel" }).waitFor();
  assert.equal(await group.count(), 1, "one parallel group");
  const rows = group.getByTestId("operation");
  await eventually(async () => ((await rows.count()) === 2 ? true : undefined));
  assert.deepEqual((await rows.allTextContents()).sort(), ["Harness · extract_shipment", "Harness · verify_shipment"]);
  assert.match((await group.getAttribute("class")) ?? "", /rail-\d/, "the group has a coloured rail");

  await page.getByTestId("timeline").waitFor();
  assert.ok((await page.locator(".timeline .lane").count()) >= 3, "the job lane and one lane per operation");
  assert.match((await page.getByTestId("usage").textContent()) ?? "", /model calls/);
  assert.match((await page.getByTestId("agent-version").textContent()) ?? "", /shipment-orchestrator v\d+/);
  await assertAccessible(page, "job (shipment)");
  await screenshot(page, "job-shipment");

  await rows.filter({ hasText: "extract_shipment" }).click();
  const modal = page.getByTestId("operation-modal");
  await modal.waitFor();
  assert.equal(
    await page.getByRole("dialog", { name: "Harness · extract_shipment" }).count(),
    1,
    "the modal is a named dialog",
  );
  assert.equal(await modal.getByTestId("operation-status").textContent(), "completed");
  assert.equal(await modal.getByTestId("validation").textContent(), "valid");
  assert.match(
    (await modal.getByTestId("task-chars").textContent()) ?? "",
    new RegExp(`^${"Extract order 4831 and cite the filenames used.".length} characters`),
  );
  assert.deepEqual(
    await modal
      .getByTestId("steps")
      .locator("li")
      .allTextContents()
      .then((l) => l.map((s) => s.replace(/^\+\d+\.\d+ s /, "").replace(/ ·.*$/, ""))),
    [
      "model Requested read_file",
      "tool read_file booking-4831.txt",
      "model Returned the structured result for validation",
    ],
  );
  assert.match((await modal.textContent()) ?? "", /1 of 2, by start time|2 of 2, by start time/);
  assert.doesNotMatch(
    (await modal.textContent()) ?? "",
    /Extract order 4831 and cite/,
    "the task itself is not in the modal (the events service never has it)",
  );
  await assertAccessible(page, "operation modal");
  await screenshot(page, "job-operation-modal");
  await page.keyboard.press("Escape");
  await modal.waitFor({ state: "detached" });

  // The pinned version's page: its operations, read-only.
  await page.getByTestId("agent-version").click();
  await page.getByTestId("operations").getByText("extract_shipment").waitFor();
  await page.getByTestId("skills").getByText("skills/shipment-intake").waitFor();
  await assertAccessible(page, "agent");
  await page.close();
});

void test("a job's words read in their own direction: a right-to-left paragraph from the right edge, a left-to-right one from the left", async () => {
  const input = "Summarise this note:\nשלום עולם, זו הערה קצרה בעברית";
  const { job } = await owner().jobs.runAgent({ agent: "guarded", input });
  const jobId = job!.id;
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.goto(`${t.url}/#/jobs/${jobId}`);
  const shown = page.getByTestId("job-input");
  await shown.waitFor();
  const edges = await shown.evaluate((pre) => {
    // The page's own objects, named as far as this test uses them (the tests compile without the DOM's types).
    const page = globalThis as unknown as {
      getComputedStyle(
        element: unknown,
      ): Record<"borderLeftWidth" | "paddingLeft" | "borderRightWidth" | "paddingRight", string>;
      document: {
        createRange(): {
          setStart(node: unknown, offset: number): void;
          setEnd(node: unknown, offset: number): void;
          getBoundingClientRect(): { left: number; right: number };
        };
      };
    };
    const text = pre.firstChild as unknown as { data: string };
    const style = page.getComputedStyle(pre);
    const box = pre.getBoundingClientRect();
    const left = box.left + parseFloat(style.borderLeftWidth) + parseFloat(style.paddingLeft);
    const right = box.right - parseFloat(style.borderRightWidth) - parseFloat(style.paddingRight);
    // No function declared in here: the test runner's transform would name it with a helper the page lacks.
    const feed = text.data.indexOf("\n");
    const [english, hebrew] = [
      [0, feed],
      [feed + 1, text.data.length],
    ].map(([start, end]) => {
      const range = page.document.createRange();
      range.setStart(text, start!);
      range.setEnd(text, end!);
      const r = range.getBoundingClientRect();
      return { fromLeft: r.left - left, fromRight: right - r.right };
    });
    return { english: english!, hebrew: hebrew! };
  });
  assert.ok(edges.english.fromLeft < 2 && edges.english.fromRight > 50, JSON.stringify(edges));
  assert.ok(edges.hebrew.fromRight < 2 && edges.hebrew.fromLeft > 50, JSON.stringify(edges));
  await page.close();
  await owner().jobs.cancelJob({ jobId, reason: "done looking" });
});

void test("a person edits a call's input in the page and approves it; the decision says so, and the patch artifact is a diff", async () => {
  const { job } = await owner().jobs.runAgent({ agent: "guarded", input: "first > notes.txt" });
  const jobId = job!.id;
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.goto(`${t.url}/#/jobs/${jobId}`);
  await page.getByTestId("pending").waitFor();
  // The approver edits the input in the page and approves the edited call.
  const card = page.locator("article.approval");
  await card.getByRole("button", { name: "Edit input…" }).click();
  await card.getByLabel("Input to run instead (JSON)").fill('{ "command": "echo changed > notes.txt" }');
  await assertAccessible(page, "approval (editing the input)");
  await card.getByRole("button", { name: "Approve with this input" }).click();
  await page.getByTestId("job-state").filter({ hasText: "succeeded" }).waitFor();
  assert.match((await page.getByTestId("decision").first().textContent()) ?? "", /allowed by owner \(input changed\)/);
  const diff = page.getByTestId("diff");
  await diff.waitFor();
  assert.match((await diff.textContent()) ?? "", /notes\.txt/);
  assert.equal(
    await diff.locator(".diff-add", { hasText: "+changed" }).count(),
    1,
    "the added line is marked as added",
  );

  // The trace id links to the viewer this browser is told of; only an http(s) URL is taken.
  const traceId = await page.getByTestId("trace-id").textContent();
  assert.match(traceId ?? "", /^[0-9a-f]{32}$/);
  await page.getByText("link to a trace viewer").click();
  const traceUrl = page.getByLabel("Trace URL (this browser only)");
  await traceUrl.fill("javascript:alert({traceId})");
  await page.getByRole("button", { name: "Save" }).click();
  await page.getByRole("alert").filter({ hasText: "An http(s) URL" }).waitFor();
  await traceUrl.fill("https://traces.example/trace/{traceId}?from=oz0");
  await page.getByRole("button", { name: "Save" }).click();
  assert.equal(
    await page.getByTestId("trace-link").getAttribute("href"),
    `https://traces.example/trace/${traceId}?from=oz0`,
  );
  await assertAccessible(page, "job (patch)");
  await screenshot(page, "job-patch");
  await page.close();
});

void test("the agents page: every agent; every version of one, and the diff between two", async (ctx) => {
  const copy = mkdtempSync(path.join(os.tmpdir(), "oz0-shipments-console-"));
  ctx.after(() => rmSync(copy, { recursive: true, force: true }));
  cpSync(shipments, copy, { recursive: true });
  const file = path.join(copy, "agents", "shipment-orchestrator.yaml");
  writeFileSync(file, readFileSync(file, "utf8").replace("timeout_ms: 60000", "timeout_ms: 45000"));
  // A plugin's author writes its definitions: an override in the instructions (what the model is told) must not
  // make the new version read as another where it is reviewed. 4 lines differ: the timeout's (removed, added)
  // and the two the instructions gain (a blank one, then this).
  const prompt = path.join(copy, "prompts", "orchestrator.md");
  writeFileSync(prompt, `${readFileSync(prompt, "utf8")}\nKeep\u202e every file \u202cof the customer.\n`);
  const installed = await owner().plugins.installPlugin({ source: copy });
  const latest = installed.published.find((p) => p.name === "shipment-orchestrator")?.version;
  assert.ok(latest && latest > 1, "a new version");

  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.getByRole("link", { name: "Agents" }).click();
  await page.locator('tr[data-agent="shipment-orchestrator"]').waitFor();
  // It sets no budget and this orchestrator has no default: said where an operator audits agents.
  await page.locator('tr[data-agent="shipment-orchestrator"]').getByText("none: spends without limit").waitFor();
  await assertAccessible(page, "agents");
  await screenshot(page, "agents");

  await page.locator('tr[data-agent="shipment-orchestrator"]').getByRole("link").click();
  await page.getByRole("heading", { name: `Agent shipment-orchestrator v${latest}` }).waitFor();
  assert.equal(await page.getByRole("navigation", { name: "Versions" }).getByRole("link").count(), latest);
  const diff = page.getByTestId("version-diff");
  await diff.waitFor();
  assert.equal(await diff.locator(".diff-del", { hasText: "60000" }).count(), 1);
  assert.equal(await diff.locator(".diff-add", { hasText: "45000" }).count(), 1);
  assert.equal(await diff.locator(".diff-add", { hasText: "Keep\\u202e every file \\u202cof" }).count(), 1);
  const shown = await page.locator("main").innerText();
  assert.ok(!shown.includes("\u202e"), `the override is shown, not obeyed: ${JSON.stringify(shown)}`);
  assert.match(
    (await page.getByTestId("diff-summary").textContent()) ?? "",
    new RegExp(`v${latest - 1} → v${latest}: 4 lines differ`),
  );
  await assertAccessible(page, "agent versions");
  await screenshot(page, "agent-versions");

  // An older version is shown as it was published.
  await page
    .getByRole("navigation", { name: "Versions" })
    .getByRole("link", { name: `v${latest - 1}` })
    .click();
  await page.getByRole("heading", { name: `Agent shipment-orchestrator v${latest - 1}` }).waitFor();
  assert.match((await page.getByTestId("definition").textContent()) ?? "", /60000/);
  await page.close();
});

void test("the page keeps up after the orchestrator restarts: the stream resumes from the last event, the session holds, nothing shows twice", async () => {
  const { job } = await owner().jobs.runAgent({ agent: "guarded", input: "after-restart" });
  const jobId = job!.id;
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.goto(`${t.url}/#/jobs/${jobId}`);
  await page.getByTestId("pending").waitFor();
  await page.getByTestId("stream").filter({ hasText: "live" }).waitFor();

  await t.restartOrchestrator();
  await page.locator('[data-testid="stream"]:not([data-reconnects="0"])').waitFor();
  await page
    .getByTestId("stream")
    .filter({ hasText: /^live$/ })
    .waitFor();
  const [approval] = await eventually(async () => {
    const { approvals } = await owner().jobs.listApprovals({ jobId });
    return approvals.length > 0 ? approvals : undefined;
  });
  await owner().jobs.answerPermission({ jobId, callId: approval!.callId, allow: true });
  await page.getByTestId("job-state").filter({ hasText: "succeeded" }).waitFor();
  assert.match((await page.getByTestId("decision").first().textContent()) ?? "", /allowed by owner/);
  assert.match((await page.getByTestId("result").textContent()) ?? "", /after-restart/);
  assert.equal(await page.locator("li.row-tool").count(), 1, "the call is shown once");
  assert.equal(
    await page.locator("li.row-state", { hasText: "succeeded" }).count(),
    1,
    "the last state change is shown once",
  );
  // A read that failed while the orchestrator was away says so until it is read again, which the page does by
  // itself: no error stays.
  const alerts = page.getByRole("alert");
  await alerts
    .first()
    .waitFor({ state: "detached", timeout: 10_000 })
    .catch(async () => assert.deepEqual(await alerts.allTextContents(), [], "no error left on the page"));
  await screenshot(page, "job-after-restart");
  await page.close();
});

// A job's address is anybody's to write into a link: its id was shown as written (a right-to-left override reordering
// the heading and the orchestrator's "not found" that quotes it), and the page asked for it again for ever, saying
// "reconnecting…".
void test("a link to a job that is not there says so once, with the id's controls shown, not obeyed", async () => {
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  const reads: string[] = [];
  page.on("request", (request) => {
    if (/\/(GetJob|WatchJob)$/.test(request.url())) reads.push(request.url());
  });
  const id = "job_\u202egnp.txt";
  await page.goto(`${t.url}/#/jobs/${encodeURIComponent(id)}`);
  const alert = page.getByRole("alert");
  await alert.waitFor();
  assert.match((await alert.textContent()) ?? "", /^job job_\\u202egnp\.txt not found/);
  assert.equal(await page.locator("#job-title").textContent(), "Job job_\\u202egnp.txt");
  const shown = await page.locator("main").innerText();
  assert.ok(!shown.includes("\u202e"), `the override is shown, not obeyed: ${JSON.stringify(shown)}`);
  // The first retry would come within a second (retry-delay.ts): none does.
  await page.waitForTimeout(2_000);
  assert.deepEqual(
    reads.map((url) => url.split("/").at(-1)),
    ["GetJob"],
    "the job was asked for once",
  );
  await page.close();
});
