// A job runner in the test's own process, against the test stack's LLM proxy
// and one sandbox node (the stack's, a relay to it, or a hostile one): for
// tests that reach into the runner (a store that fails, a runner closed as if
// its process died, clocks made short, a byte budget made small).
import { createLogger, stackTokenFor } from "@oz0/serving";
import { JobFeed } from "../../src/jobs/job-feed.js";
import { JobRunner, type JobRunnerOptions } from "../../src/jobs/job-runner.js";
import { HookStage } from "../../src/policy/hook-stage.js";
import { PermissionPolicy } from "../../src/policy/permission-policy.js";
import { LlmProxyClient } from "../../src/sessions/llm-proxy-client.js";
import { SandboxClient } from "../../src/sessions/sandbox-client.js";
import { StaticPlacement } from "../../src/sessions/sandbox-placement.js";
import { isTerminal, type JobRecord, type JobStore } from "../../src/store/job-store.js";
import { eventually, type TestStack } from "./test-stack.js";

export function inProcessJobRunner(
  options: {
    stack: TestStack;
    store: JobStore;
    home: string;
    /** The sandbox node's URL. */
    sandboxUrl: string;
    /** Names the runner's log lines. */
    name: string;
  } & Pick<JobRunnerOptions, "reattachWindowMs" | "overdueAfterMs" | "stopWaitMs" | "maxSessionBytes"> &
    Partial<Pick<JobRunnerOptions, "feed" | "placement">>,
): JobRunner {
  const { stack, store, home, sandboxUrl, name, feed, placement, ...settings } = options;
  return new JobRunner({
    store,
    feed: feed ?? new JobFeed(),
    placement:
      placement ??
      new StaticPlacement({
        runners: [
          new SandboxClient({
            url: sandboxUrl,
            token: stackTokenFor(stack.stack.credentials, "orchestrator", "sandbox"),
          }),
        ],
      }),
    tokens: new LlmProxyClient({ url: stack.stack.urls["llm-proxy"], token: stack.stack.credentials.orchestrator }),
    policy: new PermissionPolicy({ hooks: [new HookStage()] }),
    home,
    logger: createLogger({ name, level: "error" }),
    ...settings,
  });
}

/** The job once it ended. */
export function endedJob(store: JobStore, jobId: string): Promise<JobRecord> {
  return eventually(async () => {
    const current = await store.getJob(jobId);
    return current && isTerminal(current.state) ? current : undefined;
  }, `job ${jobId} ended`);
}
