// The one line oz0 prints when a command fails: it says what happened and what to do, and the advice fits
// how the orchestrator was found (an operator under `oz0 dev` never set OZ0_URL, so is not told to unset it).
import assert from "node:assert/strict";
import { test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { describeError } from "../src/cli/cli-error.js";

const refused = new ConnectError("connect ECONNREFUSED 127.0.0.1:7700", Code.Unavailable);

void test("an orchestrator `oz0 dev` runs that refuses a connection may be restarting; OZ0_URL is not mentioned", () => {
  const text = describeError(refused, { target: "http://127.0.0.1:7700", mode: "dev" });
  assert.match(text, /^could not reach the orchestrator at http:\/\/127\.0\.0\.1:7700 \(connection refused\): /);
  assert.match(text, /may be restarting/);
  assert.doesNotMatch(text, /OZ0_URL/);
  assert.doesNotMatch(text, /start it with/);
});

void test("an orchestrator named by OZ0_URL that refuses a connection: the advice names OZ0_URL", () => {
  const text = describeError(refused, { target: "http://10.0.0.5:7700", mode: "url" });
  assert.match(text, /unset OZ0_URL/);
});

void test("before a connection is made (no mode), OZ0_URL is not mentioned", () => {
  const text = describeError(refused, { target: "the orchestrator" });
  assert.doesNotMatch(text, /OZ0_URL/);
  assert.match(text, /may be restarting/);
});
