// The web console in a real browser (Debian's Chromium, driven by
// playwright-core) against the real stack: the orchestrator serves the built
// page at `/` beside its RPCs; a one-time login link opens it; a job waiting
// for approval shows in the queue, is approved in the page and finishes; a
// viewer sees the queue without the buttons, the API refuses the viewer's
// answer, and an answer given elsewhere leaves the viewer's queue. Every page
// passes axe with no serious violation, and a screenshot of each is written to
// services/orchestrator/.screenshots/ (gitignored).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { ApprovalState, JobService, JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { LoginService } from "@oz0/proto/oz0/orchestrator/v1/login_pb";
import { newCredential } from "@oz0/serving";
import type { Browser, Page } from "playwright-core";
import {
  assertAccessible,
  consoleClients,
  echoTheInput,
  launchBrowser,
  openConsole as open,
  screenshot,
  writeGuardedPlugin,
  writeViewerAuth,
} from "./support/console-browser.js";
import { eventually, startTestStack, type TestStack } from "./support/test-stack.js";

let t: TestStack;
let browser: Browser;
const viewerToken = newCredential();
const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-console-"));

/** The many agent's calls, all asked at once: more than the queue's first page holds. */
const MANY_CALLS = 104;

const clients = (token: string) => consoleClients(t.url, token);
const openConsole = (token: string): Promise<Page> => open(browser, t.url, token);

async function startJob(input: string): Promise<string> {
  const { job } = await clients(t.stack.ownerToken).jobs.runAgent({ agent: "guarded", input });
  return job!.id;
}

before(async () => {
  const auth = writeViewerAuth(path.join(scratch, "auth.json"), "vera", viewerToken);
  // Beside guarded: the same agent whose calls wait for a person 8 s at most.
  const repo = await writeGuardedPlugin(path.join(scratch, "repo"), {
    withDeadline: { name: "brief", timeout: "8s" },
    withHookInput: { name: "forced", command: "echo HOOK-CHOSEN-COMMAND-RAN" },
    withParallelCalls: { name: "many", calls: MANY_CALLS },
  });
  t = await startTestStack({
    pick: echoTheInput,
    // Room for the many agent's calls: more than a page of the queue (100), all waiting at once.
    orchestratorEnv: { OZ0_AUTH_CONFIG: auth, OZ0_MAX_WAITING_APPROVALS: String(MANY_CALLS) },
  });
  await clients(t.stack.ownerToken).plugins.installPlugin({ source: repo });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await t?.close();
  rmSync(scratch, { recursive: true, force: true });
});

void test("the orchestrator serves the console at / beside its RPCs: types, caching, SPA fallback, 404 for RPC-shaped paths", async () => {
  const index = await fetch(`${t.url}/`);
  assert.equal(index.status, 200);
  assert.equal(index.headers.get("content-type"), "text/html; charset=utf-8");
  assert.equal(index.headers.get("cache-control"), "no-cache");
  assert.match(index.headers.get("content-security-policy") ?? "", /script-src 'self'/);
  assert.match(index.headers.get("content-security-policy") ?? "", /frame-ancestors 'none'/);
  const html = await index.text();
  const script = /src="(\/assets\/[^"]+\.js)"/.exec(html)?.[1];
  assert.ok(script, html);
  const asset = await fetch(`${t.url}${script}`);
  assert.equal(asset.headers.get("content-type"), "text/javascript; charset=utf-8");
  assert.equal(asset.headers.get("cache-control"), "public, max-age=31536000, immutable");
  assert.equal(await (await fetch(`${t.url}/jobs/some-job`)).text(), html, "an app path gets index.html");
  assert.equal((await fetch(`${t.url}/assets/missing.js`)).status, 404);
  assert.equal(
    (await fetch(`${t.url}/../../etc/passwd`)).status,
    200,
    "a path outside the folder is the app, never the file",
  );
  assert.equal((await fetch(`${t.url}/oz0.orchestrator.v1.JobService/NoSuchMethod`)).status, 404);
  // No OIDC issuer for the console here: the page offers none, and talks to nothing but this origin.
  assert.deepEqual(await (await fetch(`${t.url}/console-config.json`)).json(), {});
  assert.match(index.headers.get("content-security-policy") ?? "", /connect-src 'self';/);
  assert.equal((await fetch(`${t.url}/`, { method: "POST" })).status, 404);
  // The RPCs still answer, and still want a credential.
  const anonymous = createClient(JobService, createConnectTransport({ baseUrl: t.url, httpVersion: "1.1" }));
  await assert.rejects(anonymous.listJobs({}), (e: unknown) => ConnectError.from(e).code === Code.Unauthenticated);
  assert.ok(Array.isArray((await clients(t.stack.ownerToken).jobs.listJobs({})).jobs));
});

void test("a login code opens one session, once; the session is the person who asked, and logging out ends it", async () => {
  const { login } = clients(viewerToken);
  const { code } = await login.createLoginCode({});
  const anonymous = createClient(LoginService, createConnectTransport({ baseUrl: t.url, httpVersion: "1.1" }));
  const session = await anonymous.redeemLoginCode({ code });
  assert.equal(session.principal?.id, "vera");
  assert.deepEqual(session.principal?.roles, ["viewer"]);
  assert.equal(session.principal?.via, "console");
  await assert.rejects(
    anonymous.redeemLoginCode({ code }),
    (e: unknown) =>
      ConnectError.from(e).code === Code.Unauthenticated && /used already/.test(ConnectError.from(e).rawMessage),
  );
  const asSession = clients(session.sessionToken);
  assert.equal((await asSession.login.whoAmI({})).id, "vera");
  await asSession.login.logout({});
  await assert.rejects(asSession.login.whoAmI({}), (e: unknown) => ConnectError.from(e).code === Code.Unauthenticated);
  // The page says so when a link was used already.
  const page = await browser.newPage();
  await page.goto(`${t.url}/#/login?code=${encodeURIComponent(code)}`);
  await page.getByRole("alert").filter({ hasText: "used already" }).waitFor();
  await assertAccessible(page, "login");
  await screenshot(page, "login-used-link");
  await page.close();
});

void test("a login link opened while someone is logged in asks first: staying keeps them, and using it ends their session", async () => {
  const page = await openConsole(t.stack.ownerToken);
  const sessionToken = () =>
    page.evaluate(() => {
      const storage = (globalThis as unknown as { localStorage: { getItem(key: string): string | null } }).localStorage;
      return (JSON.parse(storage.getItem("oz0.console.session") ?? "{}") as { token?: string }).token ?? "";
    });
  const ownerSession = await sessionToken();
  const link = async () =>
    `${t.url}/#/login?code=${encodeURIComponent((await clients(viewerToken).login.createLoginCode({})).code)}`;
  // A link a viewer sent: the owner is asked, and stays.
  await page.goto(await link());
  await page.getByTestId("login-link-confirm").filter({ hasText: "You are logged in as owner" }).waitFor();
  assert.doesNotMatch(page.url(), /code=/, "the code is gone from the address bar while it asks");
  await assertAccessible(page, "login link over a session");
  await page.getByRole("button", { name: "Stay logged in as owner" }).click();
  await page.getByTestId("principal").filter({ hasText: "owner" }).waitFor();
  assert.equal(await sessionToken(), ownerSession);
  // Chosen: the link's person, and the owner's session ends at the server, not only in this browser.
  await page.goto(await link());
  await page.getByRole("button", { name: "Log in with the link" }).click();
  await page.getByTestId("principal").filter({ hasText: "vera" }).waitFor();
  await assert.rejects(
    clients(ownerSession).login.whoAmI({}),
    (e: unknown) => ConnectError.from(e).code === Code.Unauthenticated,
  );
  await page.close();
});

void test("a who-am-I read that fails (the orchestrator away) says so, is tried again, and its error does not stay", async () => {
  const page = await openConsole(t.stack.ownerToken);
  // The next page asks who is logged in again: that read fails twice, as while the orchestrator restarts.
  let failed = 0;
  await page.route("**/oz0.orchestrator.v1.LoginService/WhoAmI", async (route) => {
    if (failed < 2) {
      failed++;
      await route.abort("connectionrefused");
    } else await route.continue();
  });
  await page.getByRole("link", { name: "Agents" }).click();
  await page.getByRole("alert").waitFor();
  await page.getByRole("alert").waitFor({ state: "detached" });
  assert.equal(failed, 2);
  assert.equal(await page.getByTestId("principal").textContent(), "owner");
  await page.close();
});

void test("a job waiting for approval is in the queue, is approved in the page, and finishes", async () => {
  // With an override in the command: the card shows it as an escape, so the command cannot read reversed.
  const jobId = await startJob("approve-me \u202e~/ fr- mr");
  const page = await openConsole(t.stack.ownerToken);
  await page.getByRole("link", { name: "Approvals" }).click();
  const card = page.locator("article.approval", { hasText: jobId });
  await card.waitFor();
  assert.match((await card.textContent()) ?? "", /run_command/);
  const input = (await card.locator("pre").textContent()) ?? "";
  assert.ok(input.includes(String.raw`echo approve-me \u202e~/ fr- mr`), input);
  assert.ok(!input.includes("\u202e"), "the override is not obeyed");
  await assertAccessible(page, "approvals");
  await screenshot(page, "approvals");
  await card.getByRole("button", { name: "Approve" }).click();
  await card.waitFor({ state: "detached" });

  await page.goto(`${t.url}/#/jobs/${jobId}`);
  await page.getByTestId("job-state").filter({ hasText: "succeeded" }).waitFor();
  assert.match((await page.getByTestId("decision").first().textContent()) ?? "", /allowed by owner/);
  assert.match(
    (await page.getByTestId("result").textContent()) ?? "",
    /^done: .*approve-me/s,
    "the model saw the command's output",
  );
  await assertAccessible(page, "job");
  await screenshot(page, "job");

  await page.getByRole("link", { name: "Jobs" }).click();
  await page.locator(`tr[data-job="${jobId}"]`).getByText("succeeded").waitFor();
  await assertAccessible(page, "jobs");
  await screenshot(page, "jobs");
  await page.close();
});

/** Tells the page its tab was put behind another (or brought back), as the browser does when the person switches tabs. */
async function setTabShown(page: Page, shown: boolean): Promise<void> {
  // A script's text: the test's compiler names functions it defines with a helper the page has not.
  await page.evaluate(`
    Object.defineProperty(document, "visibilityState", { configurable: true, get() { return "${shown ? "visible" : "hidden"}"; } });
    document.dispatchEvent(new Event("visibilitychange"));
  `);
}

void test("tabs not shown let go of their streams: with three job pages open a fourth tab still opens, and each resumes when shown", async () => {
  const jobIds = [await startJob("tab-one"), await startJob("tab-two"), await startJob("tab-three")];
  // One browser profile: its tabs share the six connections a browser opens to one origin over plain HTTP.
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  try {
    const { code } = await clients(t.stack.ownerToken).login.createLoginCode({});
    const tabs: Page[] = [];
    for (const jobId of jobIds) {
      // The person opens each in a new tab, which puts the last one behind it.
      for (const behind of tabs) await setTabShown(behind, false);
      const tab = await context.newPage();
      tab.on("pageerror", (error) => assert.fail(`the page threw: ${error.message}`));
      await tab.goto(tabs.length === 0 ? `${t.url}/#/login?code=${code}` : `${t.url}/`);
      await tab.getByTestId("principal").waitFor();
      await tab.goto(`${t.url}/#/jobs/${jobId}`);
      await tab.locator("article.approval").waitFor();
      await tab.getByTestId("stream").filter({ hasText: "live" }).waitFor();
      tabs.push(tab);
    }
    // Two streams each (the job's, its transcript's) held all six connections: a fourth tab never loaded (nor did
    // the third's waiting calls, nor an Approve in any of them).
    await setTabShown(tabs[2]!, false);
    const fourth = await context.newPage();
    await fourth.goto(`${t.url}/#/approvals`, { timeout: 15_000 });
    const card = fourth.locator("article.approval", { hasText: jobIds[0]! });
    await card.getByRole("button", { name: "Approve" }).click();
    await card.waitFor({ state: "detached" });
    await fourth.close();
    // Shown again, the first tab's job page follows its job from where it was: the call approved, the job done.
    await setTabShown(tabs[0]!, true);
    await tabs[0]!.getByTestId("job-state").filter({ hasText: "succeeded" }).waitFor();
    assert.equal(await tabs[0]!.getByTestId("decision").filter({ hasText: "allowed by owner" }).count(), 1);
    assert.equal(await tabs[0]!.locator(".row-text").count(), 1, "the model's answer once, not again on resuming");
  } finally {
    await context.close();
  }
  for (const jobId of jobIds.slice(1)) await clients(t.stack.ownerToken).jobs.cancelJob({ jobId, reason: "test over" });
});

void test("two jobs' calls with the same call id are two cards, each named by its own title", async () => {
  // A harness picks its ids: the fake harness numbers its permission requests, so both jobs ask as perm-1.
  const jobIds = [await startJob("same-call-id one"), await startJob("same-call-id two")];
  const page = await openConsole(t.stack.ownerToken);
  await page.getByRole("link", { name: "Approvals" }).click();
  for (const jobId of jobIds) await page.locator("article.approval", { hasText: jobId }).waitFor();
  // The card's heading was found by an id made of the call id: both cards were named by the first one's heading.
  const duplicated = await page.evaluate(`(() => {
    const ids = [...document.querySelectorAll("[id]")].map((e) => e.id);
    return ids.filter((id, i) => ids.indexOf(id) !== i);
  })()`);
  assert.deepEqual(duplicated, [], "no id twice on the page");
  const namedByAnother = await page.evaluate(`[...document.querySelectorAll("article.approval")].filter(
    (card) => !card.querySelector("h2#" + CSS.escape(card.getAttribute("aria-labelledby")))
  ).length`);
  assert.equal(namedByAnother, 0, "each card is named by its own heading");
  await assertAccessible(page, "approvals (same call ids)");
  await page.close();
  for (const jobId of jobIds) await clients(t.stack.ownerToken).jobs.cancelJob({ jobId, reason: "test over" });
});

void test("cancelling a job in its page asks first, with a reason; keeping it running changes nothing", async () => {
  const jobId = await startJob("cancel-me");
  const page = await openConsole(t.stack.ownerToken);
  await page.goto(`${t.url}/#/jobs/${jobId}`);
  await page.locator("article.approval").waitFor();
  await page.getByRole("button", { name: "Cancel job…" }).click();
  const question = page.getByRole("form", { name: "Cancel this job" });
  await question.getByText("this cannot be undone").waitFor();
  await assertAccessible(page, "job (cancel asked)");
  // A stray click stops nothing: the job waits on.
  await question.getByRole("button", { name: "Keep it running" }).click();
  await question.waitFor({ state: "detached" });
  const kept = (await clients(t.stack.ownerToken).jobs.getJob({ jobId })).job;
  assert.equal(kept?.state, JobState.WAITING, `still waiting for its approval: ${kept?.error}`);
  await page.getByRole("button", { name: "Cancel job…" }).click();
  await question.getByLabel("Reason").fill("wrong branch");
  await question.getByRole("button", { name: "Cancel job" }).click();
  await page.getByTestId("job-state").filter({ hasText: "cancelled" }).waitFor();
  const { job } = await clients(t.stack.ownerToken).jobs.getJob({ jobId });
  assert.match(job?.error ?? "", /wrong branch/);
  await page
    .getByText(/wrong branch/)
    .first()
    .waitFor();
  assert.equal(await page.getByRole("button", { name: "Cancel job…" }).count(), 0, "an ended job offers no cancel");
  await page.close();
});

void test("the usage page sums every job's model calls per agent over a window, for a viewer too", async () => {
  const jobId = await startJob("usage-me");
  // Its first model call is metered before its tool call waits for a person.
  await eventually(async () =>
    (await clients(t.stack.ownerToken).jobs.listApprovals({ jobId })).approvals.length > 0 ? true : undefined,
  );
  const page = await openConsole(viewerToken);
  await page.getByRole("link", { name: "Usage" }).click();
  const table = page.getByTestId("usage-summary");
  await table.waitFor();
  const until = new Date();
  const { usage } = await clients(t.stack.ownerToken).jobs.summarizeUsage({
    since: timestampFromDate(new Date(until.getTime() - 86_400_000)),
    until: timestampFromDate(until),
  });
  const guarded = usage?.agents.find((a) => a.agent === "guarded")?.usage;
  assert.ok(guarded && guarded.calls > 0n, "the guarded agent's calls are metered");
  const cells = async (agent: string): Promise<string[]> =>
    (await page.locator(`tr[data-agent="${agent}"] td`).allTextContents()).map((c) => c.trim());
  // Every figure as the API gives it: calls, failed, tokens in and out, cost.
  const figures = (u: typeof guarded | undefined): string[] => [
    ...[u?.calls, u?.failedCalls, u?.inputTokens, u?.outputTokens].map((n) => Number(n ?? 0n).toLocaleString("en-US")),
    `$${(u?.costUsd ?? 0).toFixed(4)}`,
  ];
  assert.deepEqual(await cells("guarded"), figures(guarded));
  assert.deepEqual(await cells(""), figures(usage?.total), "the sum row");
  assert.equal(await page.locator('a[aria-current="page"]', { hasText: "Last 24 hours" }).count(), 1);
  await assertAccessible(page, "usage");
  await screenshot(page, "usage");
  // Another window is a link of its own; an agent's name leads to its jobs.
  await page.getByRole("link", { name: "Last hour" }).click();
  await page.waitForURL(/#\/usage\?window=1h$/);
  await page.locator('a[aria-current="page"]', { hasText: "Last hour" }).waitFor();
  await table.locator('tr[data-agent="guarded"] a').click();
  await page.waitForURL(/#\/jobs\?agent=guarded$/);
  await page.close();
  // Its call waits no longer: the queue's tests count every call waiting.
  await clients(t.stack.ownerToken).jobs.cancelJob({ jobId, reason: "the usage page was read" });
});

void test("a card shows the input a hook chose, which runs, with the harness's beside it; Edit starts from the hook's", async () => {
  const { job } = await clients(t.stack.ownerToken).jobs.runAgent({ agent: "forced", input: "MODEL-SHOWN-COMMAND" });
  const jobId = job!.id;
  const page = await openConsole(t.stack.ownerToken);
  await page.getByRole("link", { name: "Approvals" }).click();
  const card = page.locator("article.approval", { hasText: jobId });
  await card.waitFor();
  assert.match((await card.getByLabel("Input", { exact: true }).textContent()) ?? "", /HOOK-CHOSEN-COMMAND-RAN/);
  const changed = (await card.getByTestId("input-changed").textContent()) ?? "";
  assert.match(changed, /Input changed by hook force-command \(agent forced\)/);
  assert.match((await card.getByLabel("Input the harness asked for").textContent()) ?? "", /MODEL-SHOWN-COMMAND/);
  await assertAccessible(page, "approvals (input changed by a hook)");
  await card.getByRole("button", { name: "Edit input…" }).click();
  const edited = await card.getByRole("textbox", { name: "Input to run instead (JSON)" }).inputValue();
  assert.match(edited, /HOOK-CHOSEN-COMMAND-RAN/, "Edit starts from the input that runs");
  await card.getByRole("button", { name: "Approve with this input" }).click();
  await card.waitFor({ state: "detached" });
  await page.goto(`${t.url}/#/jobs/${jobId}`);
  await page.getByTestId("job-state").filter({ hasText: "succeeded" }).waitFor();
  assert.match((await page.getByTestId("result").textContent()) ?? "", /HOOK-CHOSEN-COMMAND-RAN/);
  await page.close();
});

void test("a viewer sees the queue without the buttons, the API refuses the viewer's answer, and an answer given elsewhere leaves the queue", async () => {
  const jobId = await startJob("viewer-looks");
  const page = await openConsole(viewerToken);
  assert.equal(await page.getByTestId("principal").textContent(), "vera");
  await page.goto(`${t.url}/#/approvals`);
  const card = page.locator("article.approval", { hasText: jobId });
  await card.waitFor();
  assert.equal(await card.getByRole("button").count(), 0, "no Approve or Deny for a viewer");
  await card.getByText("needs the approver role").waitFor();
  await assertAccessible(page, "approvals (viewer)");
  await screenshot(page, "approvals-viewer");

  // The page's own session, used directly: the API refuses it anyway.
  const token = await page.evaluate(() => {
    const storage = (globalThis as unknown as { localStorage: { getItem(key: string): string | null } }).localStorage;
    return (JSON.parse(storage.getItem("oz0.console.session") ?? "{}") as { token?: string }).token;
  });
  assert.ok(token);
  const [approval] = await eventually(async () => {
    const { approvals } = await clients(t.stack.ownerToken).jobs.listApprovals({ jobId });
    return approvals.length > 0 ? approvals : undefined;
  });
  await assert.rejects(
    clients(token).jobs.answerPermission({ jobId, callId: approval!.callId, allow: true }),
    (e: unknown) => ConnectError.from(e).code === Code.PermissionDenied,
  );

  // The job's own page shows the waiting call to the viewer without buttons too.
  const queue = page.url();
  await page.goto(`${t.url}/#/jobs/${jobId}`);
  const onJob = page.locator("article.approval");
  await onJob.getByText("needs the approver role").waitFor();
  assert.equal(await onJob.getByRole("button").count(), 0, "no Approve, Deny or Edit on the job page for a viewer");
  assert.equal(await page.getByRole("button", { name: "Cancel job" }).count(), 0, "no Cancel for a viewer");
  await assertAccessible(page, "job (viewer)");
  await page.goto(queue);
  await card.waitFor();

  // The owner denies it elsewhere (as `oz0 deny` does); the viewer's queue lets it go.
  await clients(t.stack.ownerToken).jobs.answerPermission({
    jobId,
    callId: approval!.callId,
    allow: false,
    reason: "not today",
  });
  await card.waitFor({ state: "detached" });
  await page.goto(`${t.url}/#/jobs/${jobId}`);
  await page.getByTestId("decision").filter({ hasText: "denied by owner: not today" }).waitFor();
  await page.close();
});

void test("a call whose deadline passes leaves the queue at once, though the page reads the queue on no timer", async () => {
  // The page is open before the job starts: the call's 8 s are then the page's to see it in, not also the
  // browser's start on a loaded machine.
  const page = await openConsole(t.stack.ownerToken);
  await page.getByRole("link", { name: "Approvals" }).click();
  await page.getByRole("heading", { name: "Approvals" }).waitFor();
  await page.getByText("Loading…").waitFor({ state: "detached" });
  const { job } = await clients(t.stack.ownerToken).jobs.runAgent({ agent: "brief", input: "deadline" });
  const jobId = job!.id;
  const card = page.locator("article.approval", { hasText: jobId });
  await card.waitFor();
  // Nobody answers: at the deadline the runtime does, which WatchJobs carries, and the queue is read again.
  await card.waitFor({ state: "detached" });
  const { approvals } = await clients(t.stack.ownerToken).jobs.listApprovals({ jobId, includeAnswered: true });
  assert.equal(approvals.length, 1);
  assert.equal(ApprovalState[approvals[0]!.state], "TIMED_OUT");
  await page.close();
});

void test("a job with more calls waiting than a page shows three, the rest on asking, and the next page on Show more", async () => {
  const { job } = await clients(t.stack.ownerToken).jobs.runAgent({ agent: "many", input: "ask them all" });
  const jobId = job!.id;
  await eventually(async () => {
    const { approvals } = await clients(t.stack.ownerToken).jobs.listApprovals({ jobId, limit: 500 });
    return approvals.length === MANY_CALLS ? approvals : undefined;
  });
  const page = await openConsole(t.stack.ownerToken);
  await page.getByRole("link", { name: "Approvals" }).click();
  const group = page.getByRole("region", { name: `Calls of job ${jobId}` });
  await group.waitFor();
  const cards = group.locator("article.approval");
  // The first page holds 100 of the 104: the count says so, and the job shows its first three.
  assert.equal(await group.getByTestId("job-waiting-count").textContent(), "at least 100 calls wait");
  assert.equal(await cards.count(), 3);
  assert.match((await cards.first().textContent()) ?? "", /echo 1\b/, "oldest first");
  await group.getByRole("button", { name: "Show the other 97 calls of this job" }).click();
  await cards.nth(99).waitFor();
  assert.equal(await cards.count(), 100);
  await assertAccessible(page, "approvals (a job with many calls)");
  await page.getByRole("button", { name: "Show more" }).click();
  await group
    .getByTestId("job-waiting-count")
    .filter({ hasText: /^104 calls wait$/ })
    .waitFor();
  assert.equal(await cards.count(), MANY_CALLS, "the job stays expanded");
  assert.equal(await page.getByRole("button", { name: "Show more" }).count(), 0, "nothing more waits");
  await page.close();
  // Cancelled: its calls leave the queue, as the other tests expect an empty one.
  await clients(t.stack.ownerToken).jobs.cancelJob({ jobId });
  await eventually(async () => {
    const { approvals } = await clients(t.stack.ownerToken).jobs.listApprovals({ jobId });
    return approvals.length === 0 ? true : undefined;
  });
});
