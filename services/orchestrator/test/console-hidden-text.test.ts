// What is reviewed in the console and then runs must read as what runs, in a
// real browser against the real stack. A job's patch is read before it is
// applied: a model chooses its characters, and a character a page draws as
// nothing (a zero-width space in an identifier) or a right-to-left letter
// made a patch read as another (attacker review).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { Browser } from "playwright-core";
import {
  consoleClients,
  echoTheInput,
  launchBrowser,
  openConsole,
  writeGuardedPlugin,
} from "./support/console-browser.js";
import { eventually, startTestStack, type TestStack } from "./support/test-stack.js";

let t: TestStack;
let browser: Browser;
const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-console-hidden-"));
const owner = () => consoleClients(t.url, t.stack.ownerToken);

before(async () => {
  const repo = await writeGuardedPlugin(path.join(scratch, "repo"));
  t = await startTestStack({ pick: echoTheInput });
  await owner().plugins.installPlugin({ source: repo });
  browser = await launchBrowser();
});

after(async () => {
  await browser?.close();
  await t?.close();
  rmSync(scratch, { recursive: true, force: true });
});

void test("a patch's hidden characters are shown as escapes, and its lines read left to right whatever their letters", async () => {
  // `is_admin` with a zero-width space in it is another name that reads the same.
  const { job } = await owner().jobs.runAgent({
    agent: "guarded",
    input: "is\u200b_admin \u05d0 1 2 \u05d1 > notes.txt",
  });
  const jobId = job!.id;
  const callId = await eventually(
    async () => (await owner().jobs.listApprovals({ jobId })).approvals[0]?.callId,
    "the job's call waiting for a person",
  );
  await owner().jobs.answerPermission({ jobId, callId, allow: true });
  await eventually(
    async () => ((await owner().jobs.getJob({ jobId })).job?.state === JobState.SUCCEEDED ? true : undefined),
    "the job succeeding",
  );
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.goto(`${t.url}/#/jobs/${jobId}`);
  const added = page.getByTestId("diff").locator(".diff-add", { hasText: "_admin" });
  await added.waitFor();
  const text = (await added.textContent()) ?? "";
  assert.ok(text.includes("is\\u200b_admin"), `the zero-width space is shown as an escape: ${JSON.stringify(text)}`);
  assert.ok(!text.includes("\u200b"), `no character drawn as nothing is left: ${JSON.stringify(text)}`);
  // A right-to-left letter would carry the numbers and spaces between it and the next one into its own order.
  const bidi = await added.evaluate((e) => {
    // In the page: globalThis is its window (the tests are type-checked without the DOM's types).
    const { getComputedStyle } = globalThis as unknown as {
      getComputedStyle(e: unknown): { direction: string; unicodeBidi: string };
    };
    return [getComputedStyle(e).direction, getComputedStyle(e).unicodeBidi];
  });
  assert.deepEqual(bidi, ["ltr", "bidi-override"]);
  await page.close();
});
