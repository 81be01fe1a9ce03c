// What the console's browser tests share: Debian's Chromium through
// playwright-core, a page logged in through a one-time link, axe-core run in
// the page, and screenshots written to services/orchestrator/.screenshots/
// (gitignored) so each page can be looked at.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { AgentService, JobService, PluginService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { LoginService } from "@oz0/proto/oz0/orchestrator/v1/login_pb";
import { bearerInterceptor, credentialDigest } from "@oz0/serving";
import { chromium, type Browser, type Page } from "playwright-core";
import { commitAll, fakeAgentYaml, packageDir, type TurnPicker } from "./test-stack.js";
import { toolResults } from "./tool-results.js";

export const CHROMIUM = process.env.OZ0_CHROMIUM ?? "/usr/bin/chromium";
export const screenshots = path.join(packageDir, ".screenshots");
const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

/** Chromium, after checking the console is built and Chromium is installed. */
export async function launchBrowser(): Promise<Browser> {
  assert.ok(
    existsSync(path.join(packageDir, "..", "..", "console", "dist", "index.html")),
    "the console is built (npm run build bundles console/dist)",
  );
  assert.ok(
    existsSync(CHROMIUM),
    `no Chromium at ${CHROMIUM}: tools/test-infra/bin/install-system-packages.sh installs Debian's chromium`,
  );
  mkdirSync(screenshots, { recursive: true });
  return chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-dev-shm-usage"] });
}

/** Connect-protocol clients over HTTP/1.1, as the browser calls, carrying `token`. */
export function consoleClients(url: string, token: string) {
  const transport = createConnectTransport({
    baseUrl: url,
    httpVersion: "1.1",
    interceptors: [bearerInterceptor(token)],
  });
  return {
    jobs: createClient(JobService, transport),
    login: createClient(LoginService, transport),
    plugins: createClient(PluginService, transport),
    agents: createClient(AgentService, transport),
  };
}

/** The page, logged in as whoever holds `token`, through a one-time link; it fails the test when the page throws. */
export async function openConsole(browser: Browser, url: string, token: string): Promise<Page> {
  const { code } = await consoleClients(url, token).login.createLoginCode({});
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("pageerror", (error) => assert.fail(`the page threw: ${error.message}`));
  await page.goto(`${url}/#/login?code=${encodeURIComponent(code)}`);
  await page
    .getByTestId("principal")
    .waitFor()
    .catch(async (error: unknown) => {
      // Say what the page showed instead (a login refused, a console not built…).
      throw new Error(
        `the console did not log in; the page says: ${(await page.locator("body").innerText()).slice(0, 500)}`,
        { cause: error },
      );
    });
  assert.doesNotMatch(page.url(), /code=/, "the code is gone from the address bar");
  return page;
}

/** axe-core in the page (evaluated, so the page's CSP needs no exception): no serious or critical violation. */
export async function assertAccessible(page: Page, name: string): Promise<void> {
  await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    // In the page: globalThis is its window, where axe-core put itself.
    const result = await (
      globalThis as unknown as {
        axe: {
          run(): Promise<{ violations: { id: string; impact: string; help: string; nodes: { target: unknown }[] }[] }>;
        };
      }
    ).axe.run();
    return result.violations.map((v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      nodes: v.nodes.map((n) => JSON.stringify(n.target)).slice(0, 3),
    }));
  });
  const serious = violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  assert.deepEqual(serious, [], `${name}: axe found serious violations`);
}

export async function screenshot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: path.join(screenshots, `${name}.png`), fullPage: true });
}

/** The guarded agent's scripted model: it runs `echo <the job's input>` (which waits for a person), then says what came of it. */
export const echoTheInput: TurnPicker = ({ input, turn, request }) =>
  turn > 0
    ? { text: `done: ${toolResults(request)}` }
    : { toolCalls: [{ name: "run_command", input: { command: `echo ${input}` } }] };

/** An OZ0_AUTH_CONFIG file at `file` in which `user`, holding `token`, is a viewer and nothing more. */
export function writeViewerAuth(file: string, user: string, token: string): string {
  writeFileSync(
    file,
    JSON.stringify({
      roles: { viewer: { users: [user] } },
      tokens: [{ user, sha256: credentialDigest(token) }],
    }),
  );
  return file;
}

/** What the guarded agent is told; a scripted model knows its requests by it. */
export const GUARDED_INSTRUCTIONS = "Run the command you are asked to run.";

/**
 * A plugin (a git repository at `repo`) with one agent, guarded, whose
 * run_command needs a person's approval; and, with `withDeadline`, the same
 * agent under that name whose calls wait for a person `timeout` at most.
 */
export async function writeGuardedPlugin(
  repo: string,
  options: {
    withDeadline?: { name: string; timeout: string };
    /** Also an agent like guarded whose rule hook allows every call with this command instead (set_input). */
    withHookInput?: { name: string; command: string };
    /** Also an agent whose harness asks about `calls` run_command calls at once (test/fixtures/hooks/parallel-harness.mjs). */
    withParallelCalls?: { name: string; calls: number };
  } = {},
): Promise<string> {
  for (const sub of ["agents", "prompts"]) mkdirSync(path.join(repo, sub), { recursive: true });
  writeFileSync(path.join(repo, "prompts", "p.md"), `${GUARDED_INSTRUCTIONS}\n`);
  const guarded = (name: string, extra?: string) =>
    fakeAgentYaml({
      name,
      instructions: "prompts/p.md",
      limits: { maxSteps: 5 },
      tools: ["run_command"],
      requiresApproval: ["run_command"],
      extra,
    });
  const agents = ["guarded"];
  writeFileSync(path.join(repo, "agents", "guarded.yaml"), guarded("guarded"));
  const deadline = options.withDeadline;
  if (deadline) {
    agents.push(deadline.name);
    writeFileSync(
      path.join(repo, "agents", `${deadline.name}.yaml`),
      guarded(deadline.name, `approvals:\n  timeout: ${deadline.timeout}\n`),
    );
  }
  const forced = options.withHookInput;
  if (forced) {
    agents.push(forced.name);
    writeFileSync(
      path.join(repo, "agents", `${forced.name}.yaml`),
      guarded(
        forced.name,
        `hooks:\n  - name: force-command\n    match: fake.run_command\n    decision: allow\n    set_input: { command: ${JSON.stringify(forced.command)} }\n`,
      ),
    );
  }
  const harnesses = [
    '  - name: fake\n    command: ["oz0-fake-harness"]\n    permissions: true\n    tools: [run_command]\n',
  ];
  const parallel = options.withParallelCalls;
  if (parallel) {
    agents.push(parallel.name);
    writeFileSync(
      path.join(repo, "agents", `${parallel.name}.yaml`),
      guarded(parallel.name).replace("runtime: harness:fake", "runtime: harness:parallel"),
    );
    const labels = Array.from({ length: parallel.calls }, (_, i) => String(i + 1));
    const command = ["node", path.join(packageDir, "test/fixtures/hooks/parallel-harness.mjs"), ...labels];
    harnesses.push(
      `  - name: parallel\n    command: ${JSON.stringify(command)}\n    permissions: true\n    tools: [run_command]\n`,
    );
  }
  writeFileSync(
    path.join(repo, "oz0-plugin.yaml"),
    `name: consoled\nversion: 0.1.0\nharnesses:\n${harnesses.join("")}agents:\n${agents.map((a) => `  - agents/${a}.yaml\n`).join("")}`,
  );
  await commitAll(repo, "plugin");
  return repo;
}
