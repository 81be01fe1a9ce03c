// Routes come from the address, which anyone can write (a link in a chat, a
// typo): one the page cannot decode still opens a page that says what is
// wrong, instead of none at all.
import assert from "node:assert/strict";
import { test } from "node:test";
import { href, parseRoute } from "../src/router.js";

void test("a route with a percent sign that is no escape opens as written, not a blank page", () => {
  // decodeURIComponent throws on these: the app's first render threw with it, and nothing was drawn.
  assert.deepEqual(parseRoute("#/jobs/job_%E0"), { page: "job", jobId: "job_%E0" });
  assert.deepEqual(parseRoute("#/agents/coder%/2"), { page: "agent", name: "coder%", version: 2 });
  assert.deepEqual(parseRoute("#/graphs/a%zz?run=job_1"), { page: "graph", name: "a%zz", run: "job_1" });
  // Well-formed escapes still decode, and a route's link reads back as the route.
  assert.deepEqual(parseRoute(href({ page: "job", jobId: "job_a/b c" })), { page: "job", jobId: "job_a/b c" });
});
