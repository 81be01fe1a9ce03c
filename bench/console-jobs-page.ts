// The web console in Debian's Chromium against the real stack (the four
// services as child processes, a scripted model in this process):
//  1. The jobs page with --jobs (10,000) jobs stored: from navigation to the
//     first page's rows on screen, and from choosing a state in the filter to
//     the filtered rows; against the same page with 3 jobs stored, and
//     against the ListJobs call the page makes, from this process (the first
//     page, and the last one through its page token).
//     Goal: interactive in under 1 s.
//  2. A job's event reaching the open job page: a tool call waits for a
//     person; the answer's event is stored with its time, and the page shows
//     "allowed by" (a MutationObserver in the page notes when); against the
//     same event reaching a WatchJob client in this process.
//     Goal: under 200 ms.
// Reports medians of --rounds; asserts nothing.
//   node --import tsx bench/console-jobs-page.ts [--jobs 10000] [--rounds 5]
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { startScriptedModel, type ScriptedRequest } from "@oz0/harness/testing";
import { chromium, type Page } from "playwright-core";
import { clientsFor } from "../services/orchestrator/src/cli/connection.js";
import { openJobStore } from "../services/orchestrator/src/cluster/postgres-cluster.js";
import { startEmbeddedStack, type EmbeddedStack } from "../services/orchestrator/src/dev/embedded-stack.js";
import { newJobRecord, type JobStateName } from "../services/orchestrator/src/store/job-store.js";
import { benchOptions } from "./bench-options.js";
import { median, MIN_ROUNDS, startReport } from "./bench-report.js";

const { jobs: JOBS, rounds: ROUNDS } = benchOptions({
  jobs: { type: "number", default: 10_000 },
  rounds: { type: "number", default: 5 },
});
const CHROMIUM = process.env.OZ0_CHROMIUM ?? "/usr/bin/chromium";

const ms = (x: number): string => `${x.toFixed(1)} ms`;

const model = await startScriptedModel({
  isSideCall: () => false,
  turns: (request: ScriptedRequest) => {
    const assistantTurns = ((request.body?.messages as { role: string }[] | undefined) ?? []).filter(
      (m) => m.role === "assistant",
    ).length;
    return assistantTurns === 0
      ? { toolCalls: [{ name: "run_command", input: { command: "true" } }] }
      : { text: "done" };
  },
});

/** A stack on a fresh data directory holding `count` ended jobs (written to its store before it starts). */
async function stackWith(count: number): Promise<{ stack: EmbeddedStack; home: string }> {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-bench-console-"));
  const providers = path.join(home, "providers.json");
  writeFileSync(providers, JSON.stringify({ providers: [{ name: "anthropic", baseUrl: model.url }] }));
  const store = await openJobStore({ dataDir: home });
  const states: JobStateName[] = ["succeeded", "failed", "cancelled"];
  const start = Date.now() - count * 1_000;
  for (let i = 0; i < count; i++) {
    const created = new Date(start + i * 1_000);
    const job = newJobRecord(
      {
        id: `job_bench${String(i).padStart(15, "0")}`,
        agentName: i % 3 === 0 ? "reviewer" : "bench",
        agentVersion: 1,
        input: `stored job ${i}: fix the failing test in module ${i % 97}`,
        state: states[i % states.length]!,
        sessionId: "",
        attachments: [],
        servedTools: "",
        startedBy: "owner",
        startedAt: created,
      },
      created,
    );
    job.finishedAt = new Date(created.getTime() + 800);
    await store.createJob(job);
  }
  await store.close();
  const stack = await startEmbeddedStack({ home, env: { "llm-proxy": { OZ0_PROVIDERS_FILE: providers } } });
  return { stack, home };
}

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-dev-shm-usage"] });

/** A page logged in through a one-time link, noting (in the page's own clock) when jobs rows and decisions appear. */
async function consolePage(stack: EmbeddedStack): Promise<Page> {
  const api = clientsFor(stack.urls.orchestrator, stack.ownerToken);
  const { code } = await api.login.createLoginCode({});
  const page = await browser.newPage();
  await page.addInitScript(() => {
    // In the page (this file is type-checked without the DOM's types).
    type Node = { getAttribute(name: string): string | null; textContent: string | null };
    const w = globalThis as unknown as {
      __marks: Record<string, number>;
      document: { querySelectorAll(selector: string): ArrayLike<Node>; querySelector(selector: string): Node | null };
      MutationObserver: new (callback: () => void) => { observe(target: unknown, options: object): void };
      performance: { now(): number };
    };
    w.__marks = {};
    // The rows shown, as one string of their ids: a change of it is the list's answer to a filter.
    let shown = "";
    new w.MutationObserver(() => {
      const rows = w.document.querySelectorAll("tr[data-job]");
      if (rows.length > 0 && w.__marks.rows === undefined) w.__marks.rows = w.performance.now();
      const ids = Array.from(rows, (r) => r.getAttribute("data-job")).join();
      if (ids !== shown) {
        shown = ids;
        w.__marks.rowsChanged = w.performance.now();
      }
      if (
        w.__marks.decision === undefined &&
        w.document.querySelector('[data-testid="decision"]')?.textContent?.includes("allowed by")
      )
        w.__marks.decision = Date.now();
    }).observe(w.document, { childList: true, subtree: true, characterData: true });
  });
  await page.goto(`${stack.urls.orchestrator}/#/login?code=${encodeURIComponent(code)}`);
  await page.getByTestId("principal").waitFor();
  return page;
}

const marks = (page: Page): Promise<Record<string, number>> =>
  page.evaluate(() => (globalThis as unknown as { __marks: Record<string, number> }).__marks);

/** Navigation to rows on screen, and a state filter's answer, in ms. */
async function jobsPage(page: Page, url: string): Promise<{ load: number; filter: number }> {
  await page.goto("about:blank");
  await page.goto(`${url}/#/jobs`);
  await page.locator("tr[data-job]").first().waitFor();
  const load = (await marks(page)).rows!;
  const before = await page.evaluate(() => performance.now());
  await page.getByLabel("State").selectOption("failed");
  await page.locator("tr[data-job] .state-failed").first().waitFor();
  await page.waitForFunction(() => {
    const states = (
      globalThis as unknown as { document: { querySelectorAll(s: string): ArrayLike<{ textContent: string | null }> } }
    ).document.querySelectorAll("tr[data-job] [data-testid=job-state]");
    return Array.from(states).every((e) => e.textContent === "failed");
  });
  const filter = (await marks(page)).rowsChanged! - before;
  return { load, filter };
}

async function measureJobsPage(
  count: number,
): Promise<{ load: number; filter: number; rpc: number; lastPageRpc: number }> {
  const { stack, home } = await stackWith(count);
  try {
    const api = clientsFor(stack.urls.orchestrator, stack.ownerToken);
    const page = await consolePage(stack);
    await jobsPage(page, stack.urls.orchestrator);
    const loads: number[] = [];
    const filters: number[] = [];
    const rpcs: number[] = [];
    const lastPageRpcs: number[] = [];
    // The token of the last page: the job just before its 50 (the oldest 50 of them all).
    const lastToken = count > 50 ? `job_bench${String(50).padStart(15, "0")}` : "";
    for (let i = 0; i < ROUNDS; i++) {
      const { load, filter } = await jobsPage(page, stack.urls.orchestrator);
      loads.push(load);
      filters.push(filter);
      let t = performance.now();
      await api.jobs.listJobs({ limit: 50 });
      rpcs.push(performance.now() - t);
      t = performance.now();
      await api.jobs.listJobs({ limit: 50, pageToken: lastToken });
      lastPageRpcs.push(performance.now() - t);
    }
    await page.close();
    return { load: median(loads), filter: median(filters), rpc: median(rpcs), lastPageRpc: median(lastPageRpcs) };
  } finally {
    await stack.close();
    rmSync(home, { recursive: true, force: true });
  }
}

function writePlugin(home: string): void {
  const plugin = path.join(home, "plugin-src");
  mkdirSync(path.join(plugin, "agents"), { recursive: true });
  writeFileSync(
    path.join(plugin, "oz0-plugin.yaml"),
    'name: bench\nversion: 0.1.0\nharnesses:\n  - name: fake\n    command: ["oz0-fake-harness"]\n    permissions: true\n    tools: [run_command]\nagents: [agents/bench.yaml]\n',
  );
  writeFileSync(path.join(plugin, "instructions.md"), "Run the command, then answer.\n");
  writeFileSync(
    path.join(plugin, "agents", "bench.yaml"),
    "name: bench\nruntime: harness:fake\nmodel: { primary: anthropic/bench-model }\ninstructions: instructions.md\nlimits: { max_steps: 5 }\nharness:\n  tools: [run_command]\n  requires_approval: [run_command]\n",
  );
}

/** How long the decision event took from being stored to the open page, and to a WatchJob client here. */
async function measureEventLatency(): Promise<{ page: number[]; watch: number[] }> {
  const { stack, home } = await stackWith(0);
  const page: number[] = [];
  const watch: number[] = [];
  try {
    writePlugin(home);
    const api = clientsFor(stack.urls.orchestrator, stack.ownerToken);
    await api.plugins.installPlugin({ source: path.join(home, "plugin-src") });
    const browserPage = await consolePage(stack);
    for (let i = -1; i < ROUNDS; i++) {
      const { job } = await api.jobs.runAgent({ agent: "bench", input: `latency ${i}` });
      const jobId = job!.id;
      await browserPage.goto("about:blank");
      await browserPage.goto(`${stack.urls.orchestrator}/#/jobs/${jobId}`);
      await browserPage.getByTestId("pending").waitFor();
      // A WatchJob client here, following the same job from now on, to its end.
      const { job: now } = await api.jobs.getJob({ jobId });
      let seen: { at: number; stored: number } | undefined;
      const following = (async () => {
        for await (const { event } of api.jobs.watchJob({ jobId, afterSeq: now!.lastSeq })) {
          if (!seen && event?.event.case === "permissionDecision" && !event.event.value.pending)
            seen = { at: Date.now(), stored: timestampDate(event.time!).getTime() };
        }
      })();
      await new Promise((r) => setTimeout(r, 100));
      const { approvals } = await api.jobs.listApprovals({ jobId });
      await api.jobs.answerPermission({ jobId, callId: approvals[0]!.callId, allow: true });
      await browserPage.getByTestId("decision").filter({ hasText: "allowed by" }).waitFor();
      await following;
      const shown = (await marks(browserPage)).decision!;
      if (!seen) throw new Error("the job ended without a decision");
      if (i >= 0) {
        page.push(shown - seen.stored);
        watch.push(seen.at - seen.stored);
      }
    }
    await browserPage.close();
    return { page, watch };
  } finally {
    await stack.close();
    rmSync(home, { recursive: true, force: true });
  }
}

const report = startReport("console-jobs-page");
try {
  // Three jobs: one in each ended state, so the filter has something to show.
  const empty = await measureJobsPage(3);
  const full = await measureJobsPage(JOBS);
  console.log(`jobs page, medians of ${ROUNDS}:`);
  console.log(
    `  3 jobs stored:       rows on screen ${ms(empty.load)} after navigation; state filter answered in ${ms(empty.filter)}; ListJobs from Node ${ms(empty.rpc)}`,
  );
  console.log(
    `  ${JOBS} jobs stored: rows on screen ${ms(full.load)} after navigation; state filter answered in ${ms(full.filter)}; ListJobs from Node ${ms(full.rpc)}, its last page ${ms(full.lastPageRpc)}`,
  );
  if (ROUNDS >= MIN_ROUNDS)
    console.log(
      `  ratio to 3 jobs: load ${(full.load / empty.load).toFixed(2)}x, filter ${(full.filter / empty.filter).toFixed(2)}x (goal: interactive under 1000 ms)`,
    );
  const latency = await measureEventLatency();
  console.log(
    `an event, stored → on the open job page: median ${ms(median(latency.page))} (max ${ms(Math.max(...latency.page))}); stored → a WatchJob client in Node: median ${ms(median(latency.watch))} (goal: under 200 ms)`,
  );
} finally {
  await browser.close();
  await model.close();
  report.end();
}
