// The console's OIDC log-in in a real browser (Debian's Chromium through
// playwright-core) against a real OpenID Provider on loopback (panva's
// oidc-provider, its development log-in and consent pages) and the real
// stack, configured with the console README's example auth config: an
// approver logs in with the issuer (authorization code, PKCE, state, nonce),
// lands on the jobs page and approves a job; a viewer sees no Approve and the
// API refuses the viewer's ID token; an answer whose state was tampered with
// is refused, saying so; an expired ID token is renewed with the refresh
// token, and one that cannot be renewed sends the person through the issuer
// again, back to the same page; Log out revokes the refresh token at the
// issuer, ends the issuer's session and makes the API refuse the ID token; the
// one-time link keeps working beside it.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { parsePeopleConfig } from "@oz0/serving";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import type { Browser, BrowserContext, Page } from "playwright-core";
import {
  assertAccessible,
  consoleClients,
  launchBrowser,
  openConsole,
  screenshot,
  writeGuardedPlugin,
} from "./support/console-browser.js";
import { listenTestOpenIdProvider, type TestOpenIdProvider } from "./support/openid-provider.js";
import { eventually, repoRoot, startTestStack, type TestStack } from "./support/test-stack.js";
import { toolResults } from "./support/tool-results.js";

let t: TestStack;
let browser: Browser;
let provider: TestOpenIdProvider;
const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-console-oidc-"));

/** The console README's example auth config, with this test's issuer in place of login.example.com. */
function readmeAuthConfig(issuer: string): string {
  const readme = readFileSync(path.join(repoRoot, "console", "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("### With your OIDC issuer"));
  const block = /```yaml\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(block?.includes("https://login.example.com/"), "the README's OIDC section has its auth config");
  return block!.replace("https://login.example.com/", issuer);
}

function pick({ input, turn, request }: { input: string; turn: number; request: ScriptedRequest }): ScriptedTurn {
  if (turn > 0) return { text: `done: ${toolResults(request)}` };
  return { toolCalls: [{ name: "run_command", input: { command: `echo ${input}` } }] };
}

const clients = (token: string) => consoleClients(t.url, token);

async function startJob(input: string): Promise<string> {
  const { job } = await clients(t.stack.ownerToken).jobs.runAgent({ agent: "guarded", input });
  return job!.id;
}

interface Stored {
  token?: string;
  expiresAt?: number;
  via?: string;
  refreshToken?: string;
}

async function storedSession(page: Page): Promise<Stored> {
  return page.evaluate(() => {
    const storage = (globalThis as unknown as { localStorage: { getItem(key: string): string | null } }).localStorage;
    return JSON.parse(storage.getItem("oz0.console.session") ?? "{}") as Stored;
  });
}

function claimsOf(jwt: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(jwt.split(".")[1]!, "base64url").toString("utf8")) as Record<string, unknown>;
}

/** A page of a browser context of its own (its own cookies at the issuer), at the console's login page. */
async function freshPage(): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.on("pageerror", (error) => assert.fail(`the page threw: ${error.message}`));
  await page.goto(`${t.url}/`);
  return { context, page };
}

/** From the console's login page through the issuer's log-in and consent pages, as `user`. */
async function logInAtIssuer(page: Page, user: string): Promise<void> {
  const issuerHost = new URL(provider.issuer).host;
  await page.getByRole("button", { name: `Log in with ${issuerHost}` }).click();
  await page.waitForURL((url) => url.href.startsWith(`${provider.issuer}/`));
  await page.locator('input[name="login"]').fill(user);
  await page.locator('input[name="password"]').fill("any password: the development pages check none");
  await page.getByRole("button", { name: "Sign-in" }).click();
  // offline_access (the README's consoleScopes) is asked with prompt=consent: the issuer's consent page.
  await page.getByRole("button", { name: "Continue" }).click();
}

async function loggedInAs(page: Page, user: string): Promise<void> {
  await page
    .getByTestId("principal")
    .filter({ hasText: user })
    .waitFor()
    .catch(async (error: unknown) => {
      throw new Error(
        `the console did not log in as ${user}; the page says: ${(await page.locator("body").innerText()).slice(0, 500)}`,
        { cause: error },
      );
    });
}

/**
 * Expires the ID token the console keeps (dropping its refresh token too, when
 * asked), then opens `route`. The console is not running while the session
 * changes: a renewal it started then, cut off by the reload, would rotate the
 * refresh token at the issuer without the page keeping the new one.
 */
async function expireAndOpen(
  page: Page,
  how: "expired" | "expired-without-refresh-token",
  route: string,
): Promise<void> {
  await page.goto(`${t.url}/console-config.json`);
  await page.evaluate((change) => {
    const storage = (
      globalThis as unknown as {
        localStorage: { getItem(key: string): string | null; setItem(key: string, value: string): void };
      }
    ).localStorage;
    const session = JSON.parse(storage.getItem("oz0.console.session")!) as { expiresAt: number; refreshToken?: string };
    session.expiresAt = 0;
    if (change === "expired-without-refresh-token") delete session.refreshToken;
    storage.setItem("oz0.console.session", JSON.stringify(session));
  }, how);
  await page.goto(`${t.url}/${route}`);
}

/** What the issuer's token endpoint answers to a refresh-token grant with `refreshToken`, as the console would ask. */
async function refreshAtIssuer(refreshToken: string): Promise<{ status: number; error?: string }> {
  const discovery = (await (await fetch(`${provider.issuer}/.well-known/openid-configuration`)).json()) as {
    token_endpoint: string;
  };
  const res = await fetch(discovery.token_endpoint, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: refreshToken, client_id: "oz0-console" }),
  });
  const body = (await res.json()) as { error?: string };
  return { status: res.status, ...(body.error ? { error: body.error } : {}) };
}

before(async () => {
  provider = await listenTestOpenIdProvider();
  const auth = path.join(scratch, "auth.yaml");
  writeFileSync(auth, readmeAuthConfig(provider.issuer));
  const repo = await writeGuardedPlugin(path.join(scratch, "repo"));
  t = await startTestStack({ pick, orchestratorEnv: { OZ0_AUTH_CONFIG: auth } });
  const config = parsePeopleConfig(readFileSync(auth, "utf8"), "the README's auth config");
  provider.start({
    clientId: config.oidc!.consoleClientId!,
    redirectUri: `${t.url}/login/callback`,
    postLogoutRedirectUri: `${t.url}/login/logged-out`,
    accounts: { ada: ["developers"], vic: ["staff"] },
  });
  await clients(t.stack.ownerToken).plugins.installPlugin({ source: repo });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await t?.close();
  await provider?.close();
  rmSync(scratch, { recursive: true, force: true });
});

void test("the orchestrator tells the page how to log in, and lets the page reach the issuer and nothing else", async () => {
  const config = await fetch(`${t.url}/console-config.json`);
  assert.equal(config.status, 200);
  assert.deepEqual(await config.json(), {
    oidc: { issuer: provider.issuer, clientId: "oz0-console", scopes: ["openid", "offline_access"] },
  });
  const csp = (await fetch(`${t.url}/`)).headers.get("content-security-policy") ?? "";
  assert.match(csp, new RegExp(`connect-src 'self' ${provider.issuer};`));
});

void test("an approver logs in with the issuer, lands on the jobs page as that person, and approves a job", async () => {
  const jobId = await startJob("oidc-approve");
  const { context, page } = await freshPage();
  await page.getByRole("button", { name: /^Log in with / }).waitFor();
  await assertAccessible(page, "login (OIDC)");
  await screenshot(page, "login-oidc");
  await logInAtIssuer(page, "ada");
  await loggedInAs(page, "ada");
  assert.equal(page.url(), `${t.url}/#/jobs`, "back on the jobs page, with no code or state left in the address");
  await page.locator(`tr[data-job="${jobId}"]`).waitFor();
  await screenshot(page, "jobs-oidc");

  // The page holds the issuer's ID token, for the console's client, and the issuer's refresh token.
  const stored = await storedSession(page);
  assert.equal(stored.via, "oidc");
  assert.ok(stored.refreshToken, "offline_access gave a refresh token");
  const claims = claimsOf(stored.token!);
  assert.equal(claims.iss, provider.issuer);
  assert.equal(claims.aud, "oz0-console");
  assert.equal(claims.sub, "ada");
  assert.equal(typeof claims.nonce, "string");
  const who = await clients(stored.token!).login.whoAmI({});
  assert.deepEqual({ id: who.id, via: who.via }, { id: "ada", via: "oidc" });
  assert.deepEqual(who.roles, ["approver", "operator", "viewer"]);

  await page.getByRole("link", { name: "Approvals" }).click();
  const card = page.locator("article.approval", { hasText: jobId });
  await card.getByRole("button", { name: "Approve" }).click();
  await card.waitFor({ state: "detached" });
  await page.goto(`${t.url}/#/jobs/${jobId}`);
  await page.getByTestId("job-state").filter({ hasText: "succeeded" }).waitFor();
  assert.match((await page.getByTestId("decision").first().textContent()) ?? "", /allowed by ada/);
  await context.close();
});

void test("a viewer logged in with the issuer sees no Approve, and the API refuses the viewer's ID token", async () => {
  const jobId = await startJob("oidc-viewer");
  const { context, page } = await freshPage();
  await logInAtIssuer(page, "vic");
  await loggedInAs(page, "vic");
  assert.match((await page.locator(".roles").textContent()) ?? "", /^\(viewer\)$/);
  await page.getByRole("link", { name: "Approvals" }).click();
  const card = page.locator("article.approval", { hasText: jobId });
  await card.getByText("needs the approver role").waitFor();
  assert.equal(await card.getByRole("button").count(), 0, "no Approve or Deny for a viewer");
  await assertAccessible(page, "approvals (OIDC viewer)");
  await screenshot(page, "approvals-oidc-viewer");

  const { token } = await storedSession(page);
  const [approval] = await eventually(async () => {
    const { approvals } = await clients(t.stack.ownerToken).jobs.listApprovals({ jobId });
    return approvals.length > 0 ? approvals : undefined;
  });
  await assert.rejects(
    clients(token!).jobs.answerPermission({ jobId, callId: approval!.callId, allow: true }),
    (e: unknown) =>
      ConnectError.from(e).code === Code.PermissionDenied &&
      /open only to people with the approver role; vic may not call it/.test(ConnectError.from(e).rawMessage),
  );
  await clients(t.stack.ownerToken).jobs.answerPermission({
    jobId,
    callId: approval!.callId,
    allow: false,
    reason: "x",
  });
  await context.close();
});

void test("an answer whose state was tampered with is refused, saying so, and logs nobody in", async () => {
  const { context, page } = await freshPage();
  // The consent page's answer redirects to the issuer's resume step, whose redirect carries the code and the state
  // to the console in its fragment. The browser follows both here, and the state is changed on its way.
  let tampered = false;
  await page.route(
    (url) => url.href.startsWith(`${provider.issuer}/interaction/`),
    async (route) => {
      // Only the consent page's answer (the log-in page's is left alone).
      if (!/(^|&)prompt=consent(&|$)/.test(route.request().postData() ?? "")) return route.continue();
      const submitted = await route.fetch({ maxRedirects: 0 });
      const resume = submitted.headers()["location"];
      if (!resume) return route.fulfill({ response: submitted });
      const resumed = await page.context().request.get(new URL(resume, provider.issuer).href, { maxRedirects: 0 });
      const location = resumed.headers()["location"] ?? "";
      if (!location.startsWith(`${t.url}/login/callback#`)) return route.fulfill({ response: submitted });
      const answer = new URL(location);
      const params = new URLSearchParams(answer.hash.slice(1));
      assert.ok(params.get("code") && params.get("state"), location);
      params.set("state", `${params.get("state")}-forged`);
      answer.hash = params.toString();
      tampered = true;
      return route.fulfill({ status: 303, headers: { location: answer.href } });
    },
  );
  await logInAtIssuer(page, "ada");
  const alert = page.getByRole("alert");
  await alert.filter({ hasText: "its state differs" }).waitFor();
  assert.ok(tampered, "the answer went through the tampering route");
  assert.match(
    (await alert.textContent()) ?? "",
    /the log-in answer does not match the log-in this tab started \(its state differs\), so it was refused: log in again/,
  );
  assert.equal(page.url(), `${t.url}/#/login`, "the answer is gone from the address bar");
  assert.deepEqual(await storedSession(page), {}, "nobody is logged in");
  assert.equal(await page.getByTestId("principal").count(), 0);
  await page.getByRole("button", { name: /^Log in with / }).waitFor();
  await assertAccessible(page, "login refused (OIDC)");
  await screenshot(page, "login-oidc-refused");
  await context.close();
});

void test("an expired ID token is renewed with the refresh token, and the page carries on as the same person", async () => {
  const { context, page } = await freshPage();
  await logInAtIssuer(page, "ada");
  await loggedInAs(page, "ada");
  const before = await storedSession(page);
  await expireAndOpen(page, "expired", "#/jobs");
  await loggedInAs(page, "ada");
  const after = await storedSession(page);
  // The expiry went from 0 to the new ID token's (the token itself may be the same bytes when renewed within its
  // second: RS256 is deterministic), and the issuer rotated the refresh token, as it does for a public client.
  assert.ok(after.expiresAt! > Date.now(), "the ID token was renewed");
  assert.notEqual(after.refreshToken, before.refreshToken, "the refresh token was used (and rotated)");
  assert.equal(claimsOf(after.token!).sub, "ada");
  await context.close();
});

void test("an ID token that expired with no refresh token sends the person through the issuer again, back to the page they were on", async () => {
  const { context, page } = await freshPage();
  await logInAtIssuer(page, "ada");
  await loggedInAs(page, "ada");
  await page.getByRole("link", { name: "Approvals" }).click();
  await page.getByRole("heading", { name: "Approvals" }).waitFor();
  await expireAndOpen(page, "expired-without-refresh-token", "#/approvals");
  // The issuer's session is alive: it asks no password, only the consent offline_access needs.
  await page.waitForURL((url) => url.href.startsWith(`${provider.issuer}/interaction/`));
  await page.getByRole("button", { name: "Continue" }).waitFor();
  assert.equal(await page.locator('input[name="password"]').count(), 0, "the issuer's session logs the person in");
  await page.getByRole("button", { name: "Continue" }).click();
  await loggedInAs(page, "ada");
  assert.equal(page.url(), `${t.url}/#/approvals`, "back on the page the person was on");
  const renewed = await storedSession(page);
  assert.ok(renewed.expiresAt! > Date.now(), "a new ID token");
  assert.ok(renewed.refreshToken, "and a new refresh token");
  await context.close();
});

void test("Log out revokes the refresh token at the issuer and ends the issuer's session, so the next log-in asks for the password", async () => {
  const { context, page } = await freshPage();
  await logInAtIssuer(page, "ada");
  await loggedInAs(page, "ada");
  const { refreshToken, token: idToken } = await storedSession(page);
  assert.ok(refreshToken);
  assert.ok(idToken);
  const revocations: string[] = [];
  const urls: string[] = [];
  page.on("request", (request) => {
    urls.push(request.url());
    if (request.method() === "POST" && request.url().startsWith(`${provider.issuer}/token/revocation`))
      revocations.push(request.postData() ?? "");
  });

  await page.getByRole("button", { name: "Log out" }).click();
  // RP-initiated logout: the issuer's page asks to confirm, then sends the browser back to the console's login page.
  await page.waitForURL((url) => url.href.startsWith(`${provider.issuer}/session/end`));
  await page.getByRole("button", { name: "Yes, sign me out" }).click();
  await page.waitForURL(`${t.url}/#/login`);
  await page.getByRole("status").filter({ hasText: "Logged out, at the issuer too." }).waitFor();
  assert.deepEqual(await storedSession(page), {}, "the page forgot the ID token and the refresh token");
  assert.equal(revocations.length, 1, "the page asked the issuer to revoke the refresh token once");
  assert.match(revocations[0]!, /token_type_hint=refresh_token/);
  // The end-session address carries the ID token (id_token_hint), so the browser's history and the issuer's access
  // log hold it after Log out: the API refuses it from then on, though it has not expired.
  assert.ok(urls.some((url) => url.includes(idToken)));
  await assert.rejects(
    clients(idToken).login.whoAmI({}),
    (e: unknown) =>
      ConnectError.from(e).code === Code.Unauthenticated && /logged out/.test(ConnectError.from(e).rawMessage),
  );
  await assertAccessible(page, "logged out (OIDC)");
  await screenshot(page, "login-oidc-logged-out");

  // An offline_access grant outlives the issuer's session (oidc-provider keeps it): only the revocation ends it.
  assert.deepEqual(
    await refreshAtIssuer(refreshToken),
    { status: 400, error: "invalid_grant" },
    "the issuer refuses it",
  );

  // The issuer's session ended: logging in asks for the password again.
  await page.getByRole("button", { name: /^Log in with / }).click();
  await page.locator('input[name="password"], button:has-text("Continue")').first().waitFor();
  assert.equal(await page.locator('input[name="password"]').count(), 1, "the issuer asks for the password again");
  await context.close();
});

// Ending the issuer's session puts the ID token in an address (id_token_hint), which the browser's history and the
// issuer's access log keep: the page did so even when the orchestrator was never told of the log-out, and still
// accepted that token (attacker review).
void test("Log out that cannot reach the orchestrator leaves the issuer's session open rather than put a valid ID token in an address", async () => {
  const { context, page } = await freshPage();
  await logInAtIssuer(page, "ada");
  await loggedInAs(page, "ada");
  const { token: idToken } = await storedSession(page);
  assert.ok(idToken);
  const urls: string[] = [];
  page.on("request", (request) => urls.push(request.url()));
  await page.route("**/oz0.orchestrator.v1.LoginService/Logout", (route) => route.abort());

  await page.getByRole("button", { name: "Log out" }).click();
  await page.getByRole("status").filter({ hasText: "The orchestrator could not be told" }).waitFor();
  assert.equal(page.url(), `${t.url}/#/login`, "the page stayed");
  assert.deepEqual(await storedSession(page), {}, "the page forgot the tokens");
  assert.ok(!urls.some((url) => url.includes(idToken)), "no address carried the ID token");
  await context.close();
});

void test("the one-time link of oz0 dev still logs in beside the issuer", async () => {
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  assert.equal(await page.getByTestId("principal").textContent(), "owner");
  await page.close();
});
