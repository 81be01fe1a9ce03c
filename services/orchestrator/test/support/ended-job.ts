// Runs an agent detached and waits for its job to end, through the CLI as a
// person would: for tests that look at how a job ended, not at its stream.
import assert from "node:assert/strict";
import { eventually } from "./eventually.js";
import type { TestStack } from "./test-stack.js";

export interface EndedJob {
  state: string;
  error?: string;
  resultText?: string;
}

/** Starts `agent` on `input` (`oz0 run --detach`) and waits until the job succeeded or failed. */
export async function runToEnd(t: TestStack, agent: string, input: string): Promise<EndedJob> {
  const run = await t.cli(["run", agent, input, "--detach"]);
  const jobId = /job_\w+/.exec(run.stdout + run.stderr)?.[0];
  assert.ok(jobId, `${run.stdout}\n${run.stderr}`);
  return eventually(async () => {
    const shown = JSON.parse((await t.cli(["jobs", "show", jobId, "--json"])).stdout) as EndedJob;
    return shown.state === "JOB_STATE_SUCCEEDED" || shown.state === "JOB_STATE_FAILED" ? shown : undefined;
  });
}
