// ListApprovals' pages (approvals/approval-pages.ts) on a SQLite store: at
// most a page's worth, a page token that goes on after the last, limits
// refused naming what to do, and each job and agent version read once per
// page however many of its calls the page holds (a flooded queue read them
// once per row).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { listApprovalsPage, MAX_APPROVALS_PAGE } from "../src/approvals/approval-pages.js";
import type { JobStore } from "../src/store/job-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { job, permission } from "./job-store-suite.js";

async function withStore(fn: (store: SqliteJobStore) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-approval-pages-"));
  const store = new SqliteJobStore({ file: path.join(dir, "orchestrator.db") });
  try {
    await fn(store);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The store, counting the reads of jobs and agent versions. */
function counted(store: JobStore): { store: JobStore; reads: { jobs: string[]; agents: string[] } } {
  const reads = { jobs: [] as string[], agents: [] as string[] };
  const wrapped = Object.create(store) as JobStore;
  wrapped.getJob = (id) => {
    reads.jobs.push(id);
    return store.getJob(id);
  };
  wrapped.getAgentVersion = (name, version) => {
    reads.agents.push(`${name}@${version}`);
    return store.getAgentVersion(name, version);
  };
  return { store: wrapped, reads };
}

void test("a flooded queue is read a page at a time, each job and agent version once a page", () =>
  withStore(async (store) => {
    await store.createJob(job("flood"));
    await store.createJob(job("legit"));
    const flood = Array.from({ length: 40 }, (_, i) =>
      permission("flood", `f${i}`, { requestedAt: new Date(1000 + i) }),
    );
    await store.append({ jobId: "flood", events: [], permissions: flood });
    await store.append({
      jobId: "legit",
      events: [],
      permissions: [permission("legit", "l1", { requestedAt: new Date(1020) })],
    });
    const { store: reading, reads } = counted(store);
    const first = await listApprovalsPage(reading, { includeAnswered: false, limit: 25, pageToken: "" });
    assert.equal(first.rows.length, 25);
    assert.deepEqual(reads.jobs.sort(), ["flood", "legit"], "each job read once, not once per call");
    assert.deepEqual(reads.agents, ["fixer@1"], "the agent version both jobs pin, read once");
    assert.ok(first.rows.some((r) => r.permission.jobId === "legit" && r.job?.id === "legit"));
    assert.ok(first.nextPageToken);
    const second = await listApprovalsPage(store, {
      includeAnswered: false,
      limit: 25,
      pageToken: first.nextPageToken,
    });
    assert.equal(second.rows.length, 16);
    assert.equal(second.nextPageToken, "", "the last page");
    const all = [...first.rows, ...second.rows].map((r) => `${r.permission.jobId}/${r.permission.id}`);
    assert.equal(new Set(all).size, 41, "no call twice, none missed");

    const byDefault = await listApprovalsPage(store, { includeAnswered: false, limit: 0, pageToken: "" });
    assert.equal(byDefault.rows.length, 41);
    assert.equal(byDefault.nextPageToken, "");
  }));

void test("a page larger than the most it holds, or a page token it never gave, is refused saying what to do", () =>
  withStore(async (store) => {
    await assert.rejects(
      listApprovalsPage(store, { includeAnswered: false, limit: MAX_APPROVALS_PAGE + 1, pageToken: "" }),
      { message: "limit 501 is more than a page holds (500); ask for at most 500 and page on with next_page_token" },
    );
    await assert.rejects(listApprovalsPage(store, { includeAnswered: false, limit: 10, pageToken: "job_x/nope" }), {
      message: "page_token is not one ListApprovals gave: list again without it for the first page",
    });
  }));
