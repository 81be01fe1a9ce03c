// The console's jobs page in a real browser against the real stack: 120 jobs
// written to the orchestrator's store beside the running orchestrator, then
// paged on the server (50 at a time, older and newer), filtered there by
// state, agent and text (a job id, or words of its input), the filters kept
// in the address; and a real job's state changes while the page is open.
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import type { Browser, Page } from "playwright-core";
import { openJobStore } from "../src/cluster/postgres-cluster.js";
import { newJobRecord, type JobRecord } from "../src/store/job-store.js";
import {
  assertAccessible,
  consoleClients,
  launchBrowser,
  openConsole,
  screenshot,
  writeGuardedPlugin,
} from "./support/console-browser.js";
import { eventually, startTestStack, type TestStack } from "./support/test-stack.js";

const STORED = 120;
let t: TestStack;
let browser: Browser;

function pick({ input, turn }: { input: string; turn: number; request: ScriptedRequest }): ScriptedTurn {
  if (turn > 0) return { text: "done" };
  return { toolCalls: [{ name: "run_command", input: { command: `echo ${input}` } }] };
}

const owner = () => consoleClients(t.url, t.stack.ownerToken);

/** Stored job `i` of STORED: agent alpha or beta, succeeded or failed, about apples or pears; newest last. */
function storedJob(i: number): JobRecord {
  const created = new Date(Date.now() - (STORED - i) * 60_000);
  const job = {
    id: `job_stored${String(i).padStart(10, "0")}`,
    agentName: i % 2 === 0 ? "alpha" : "beta",
    agentVersion: 1,
    input: `task ${i} about ${i % 3 === 0 ? "Pears" : "apples"}`,
  };
  const state = i % 4 === 0 ? "failed" : "succeeded";
  return {
    ...newJobRecord(
      { ...job, state, sessionId: "", attachments: [], servedTools: "", startedBy: "owner", startedAt: created },
      created,
    ),
    finishedAt: new Date(created.getTime() + 1_000),
  };
}

before(async () => {
  t = await startTestStack({ pick });
  const repo = await writeGuardedPlugin(path.join(t.home, "guarded-plugin"));
  await owner().plugins.installPlugin({ source: repo });
  // Beside the running orchestrator, on its SQLite file (WAL: both may write).
  const store = await openJobStore({ dataDir: t.home });
  for (let i = 0; i < STORED; i++) await store.createJob(storedJob(i));
  await store.close();
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await t?.close();
});

async function shownIds(page: Page): Promise<string[]> {
  return page.locator("tr[data-job]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-job") ?? ""));
}

void test("jobs are paged on the server, newest first, older and newer", async () => {
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.locator("tr[data-job]").first().waitFor();
  const first = await shownIds(page);
  assert.equal(first.length, 50);
  assert.equal(first[0], storedJob(STORED - 1).id, "newest first");
  await assertAccessible(page, "jobs");
  await screenshot(page, "jobs-page-1");

  await page.getByRole("button", { name: "Older →" }).click();
  await page.getByTestId("page-number").filter({ hasText: "page 2" }).waitFor();
  await eventually(async () => ((await shownIds(page))[0] === storedJob(STORED - 51).id ? true : undefined));
  assert.deepEqual(
    await shownIds(page),
    Array.from({ length: 50 }, (_, k) => storedJob(STORED - 51 - k).id),
  );
  await page.getByRole("button", { name: "Older →" }).click();
  await page.getByTestId("page-number").filter({ hasText: "page 3" }).waitFor();
  await eventually(async () => ((await shownIds(page)).length === STORED - 100 ? true : undefined));
  assert.ok(await page.getByRole("button", { name: "Older →" }).isDisabled(), "the last page");
  await page.getByRole("button", { name: "← Newer" }).click();
  await page.getByTestId("page-number").filter({ hasText: "page 2" }).waitFor();
  await page.close();

  // The API's side: the token is the last job of a page; one it never gave is refused.
  const firstPage = await owner().jobs.listJobs({ limit: 50 });
  assert.equal(firstPage.nextPageToken, firstPage.jobs[49]!.id);
  const last = await owner().jobs.listJobs({ limit: 50, pageToken: storedJob(STORED - 101).id });
  assert.equal(last.jobs.length, STORED - 101 + 1 - 1);
  assert.equal(last.nextPageToken, "", "no page after the last");
  await assert.rejects(
    owner().jobs.listJobs({ pageToken: "job_nosuch" }),
    (e: unknown) =>
      ConnectError.from(e).code === Code.InvalidArgument && /page_token/.test(ConnectError.from(e).rawMessage),
  );
});

void test("filters by state, agent and text run on the server and stay in the address", async () => {
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.goto(`${t.url}/#/jobs?state=failed&agent=alpha`);
  await page.locator("tr[data-job]").first().waitFor();
  const failedAlpha = Array.from({ length: STORED }, (_, i) => storedJob(i)).filter(
    (j) => j.state === "failed" && j.agentName === "alpha",
  );
  await eventually(async () => ((await shownIds(page)).length === failedAlpha.length ? true : undefined));
  assert.deepEqual(
    await shownIds(page),
    failedAlpha.reverse().map((j) => j.id),
  );

  await page.getByLabel("Text").fill("pears");
  await page.waitForURL(/text=pears/);
  const pears = Array.from({ length: STORED }, (_, i) => storedJob(i)).filter(
    (j) => j.state === "failed" && j.agentName === "alpha" && /pears/i.test(j.input),
  );
  await eventually(async () => ((await shownIds(page)).length === pears.length ? true : undefined));
  assert.deepEqual(
    await shownIds(page),
    pears.reverse().map((j) => j.id),
    "any case, within the other filters",
  );
  await assertAccessible(page, "jobs (filtered)");
  await screenshot(page, "jobs-filtered");

  // A job id finds that job.
  await page.goto(`${t.url}/#/jobs?text=${storedJob(7).id}`);
  await eventually(async () => ((await shownIds(page)).join() === storedJob(7).id ? true : undefined));
  await page.goto(`${t.url}/#/jobs?text=no-such-words`);
  await page.getByTestId("no-jobs").filter({ hasText: "No jobs match" }).waitFor();
  await page.close();
});

void test("a filter changed through the address starts again at the newest jobs, its text box showing it", async () => {
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.goto(`${t.url}/#/jobs?state=succeeded`);
  await page.locator("tr[data-job]").first().waitFor();
  await page.getByRole("button", { name: "Older →" }).click();
  await page.getByTestId("page-number").filter({ hasText: "page 2" }).waitFor();
  // The page's own Jobs link: every job, from the newest, not the second page of another filter.
  await page.getByRole("navigation", { name: "Pages", exact: true }).getByRole("link", { name: "Jobs" }).click();
  await page.waitForURL(/#\/jobs$/);
  await page.getByTestId("page-number").filter({ hasText: "page 1" }).waitFor({ timeout: 5_000 });
  await eventually(async () => ((await shownIds(page))[0] === storedJob(STORED - 1).id ? true : undefined));

  await page.goto(`${t.url}/#/jobs?text=pears`);
  await eventually(async () => ((await page.getByLabel("Text").inputValue()) === "pears" ? true : undefined));
  await page.goto(`${t.url}/#/jobs`);
  await eventually(async () => ((await page.getByLabel("Text").inputValue()) === "" ? true : undefined));
  await page.close();
});

void test("a job's state changes while the jobs page is open", async () => {
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.locator("tr[data-job]").first().waitFor();
  const { job } = await owner().jobs.runAgent({ agent: "guarded", input: "watched" });
  const row = page.locator(`tr[data-job="${job!.id}"]`);
  await row.getByText("waiting").waitFor();
  const [approval] = await eventually(async () => {
    const { approvals } = await owner().jobs.listApprovals({ jobId: job!.id });
    return approvals.length > 0 ? approvals : undefined;
  });
  await owner().jobs.answerPermission({ jobId: job!.id, callId: approval!.callId, allow: true });
  await row.getByText("succeeded").waitFor();
  await page.close();
});

void test("a page holds at most 500 jobs: the API refuses more, naming next_page_token, and oz0 jobs list --limit pages on", async () => {
  await assert.rejects(
    owner().jobs.listJobs({ limit: 2 ** 31 - 1 }),
    (e: unknown) =>
      ConnectError.from(e).code === Code.InvalidArgument &&
      /more than a page holds \(500\); .*next_page_token/.test(ConnectError.from(e).rawMessage),
  );
  const store = await openJobStore({ dataDir: t.home });
  for (let i = 0; i < 510; i++)
    await store.createJob({ ...storedJob(i), id: `job_bulk${String(i).padStart(10, "0")}`, agentName: "bulk" });
  await store.close();
  const listed = async (limit: number): Promise<string[]> => {
    const { code, stdout, stderr } = await t.cli(["jobs", "list", "--agent", "bulk", "--json", "--limit", `${limit}`]);
    assert.equal(code, 0, stderr);
    return stdout.trim().split("\n");
  };
  assert.equal((await listed(600)).length, 510, "two pages, all of them");
  const some = await listed(505);
  assert.equal(some.length, 505);
  assert.equal(new Set(some).size, 505, "no job twice across the pages");
});
