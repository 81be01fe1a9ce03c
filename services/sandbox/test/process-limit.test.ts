// A fork bomb in one session must not take the node's process table: each
// session may run OZ0_SESSION_MAX_PROCESSES processes and threads at once,
// counted apart from every other session's, where the isolation mode gives
// the kernel a user to count them by.
import assert from "node:assert/strict";
import http from "node:http";
import type net from "node:net";
import { after, before, describe, it } from "node:test";
import type { Client } from "@connectrpc/connect";
import type { SandboxService, RunSessionResponse } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { findSetpriv } from "../src/parent-death-launcher.js";
import { chooseSessionProcessLimit, ownProcessLimit, runsAsInitialRoot } from "../src/session-process-limit.js";
import {
  runToEnd,
  scenarioStart,
  SessionStream,
  startTestSandbox,
  startUnprivilegedSandbox,
  type TestSandbox,
  unprivilegedSandboxSkip,
} from "./sandbox-test-kit.js";

const LIMIT = 40;

const asRoot = process.getuid?.() === 0;
const rootWithSetpriv = !asRoot
  ? "running the sandbox as the user mode does, or as another user, needs root"
  : findSetpriv() === undefined
    ? "needs setpriv"
    : false;

function textOf(message: RunSessionResponse): string | undefined {
  return message.message.case === "event" && message.message.value.event.case === "text"
    ? message.message.value.event.value.text
    : undefined;
}

/** What the harness's forker said: how many processes it had at once. */
async function processesStarted(stream: SessionStream): Promise<{ started: number; line: string }> {
  const said = await stream.waitFor((m) => textOf(m)?.startsWith("started ") === true, "the forker's count");
  const line = textOf(said)!;
  return { started: Number(/^started (\d+) of/.exec(line)![1]), line };
}

/** A session with an LLM endpoint reaches it: the in-sandbox forwarder runs first, under the limit too. */
async function assertModelReached(client: Client<typeof SandboxService>): Promise<void> {
  const model = http.createServer((_request, response) => response.end("hello from the model"));
  await new Promise<void>((resolve) => model.listen(0, "127.0.0.1", resolve));
  try {
    const anthropicBaseUrl = `http://127.0.0.1:${(model.address() as net.AddressInfo).port}/anthropic`;
    const session = await runToEnd(
      client,
      scenarioStart({ mode: "llm" }, {}, { llm: { anthropicBaseUrl, token: "tok" } }),
    );
    assert.equal(session.exited().result?.text, "200 hello from the model");
  } finally {
    model.close();
  }
}

/**
 * One session holds as many processes as it can get (far more than the
 * limit, if nothing stopped it); meanwhile another session starts all it
 * wants, and a session after both runs as usual.
 */
async function assertLimitedApart(client: Client<typeof SandboxService>): Promise<void> {
  const bomb = new SessionStream(client, {
    message: { case: "start", value: scenarioStart({ mode: "processes", count: 500, hold: true }) },
  });
  const held = await processesStarted(bomb);
  // The harness (node, its threads) and the forker count too: fewer than the limit are left for the children.
  assert.ok(held.started < LIMIT, `a session held ${held.line}, past its limit of ${LIMIT}`);
  assert.ok(held.started > 0, held.line);
  assert.match(held.line, /Resource temporarily unavailable/);

  const neighbour = await runToEnd(client, scenarioStart({ mode: "processes", count: 20 }));
  assert.ok(
    neighbour.texts().includes("started 20 of 20"),
    `a session beside one at its limit could not start its processes: ${neighbour.texts().join("; ")}`,
  );

  bomb.send({ message: { case: "cancel", value: { reason: "the test is done" } } });
  await bomb.finished;
  const later = await runToEnd(client, scenarioStart({ mode: "complete" }));
  assert.notEqual(later.exited().result, undefined, "the next session did not run to its end");
}

void describe("which isolation modes can limit a session's processes", () => {
  const common = {
    max: LIMIT,
    prlimitPath: "/usr/bin/prlimit",
    kernel: "6.1.0-28-amd64",
    own: { soft: Infinity, hard: Infinity },
    maxSessions: 16,
  };
  void it("limits them under bubblewrap as an unprivileged user or under uids of their own, and in the user mode", () => {
    assert.equal(chooseSessionProcessLimit({ ...common, isolation: "bwrap", initialRoot: false }).limit?.max, LIMIT);
    assert.equal(chooseSessionProcessLimit({ ...common, isolation: "user", initialRoot: true }).limit?.max, LIMIT);
    // A root sandbox's bubblewrap sessions under uids of their own count by uid, as the user mode's, on any kernel.
    const own = { ...common, isolation: "bwrap" as const, initialRoot: true, sessionUids: true, kernel: "4.18.0" };
    assert.equal(chooseSessionProcessLimit(own).limit?.max, LIMIT);
    // Nor do they count against the sandbox's own limit.
    assert.equal(chooseSessionProcessLimit({ ...own, own: { soft: 100, hard: 100 } }).warning, undefined);
  });
  void it("says why nothing limits them elsewhere", () => {
    const reason = (options: Partial<Parameters<typeof chooseSessionProcessLimit>[0]>): string => {
      const choice = chooseSessionProcessLimit({ ...common, isolation: "bwrap", initialRoot: false, ...options });
      assert.equal(choice.limit, undefined);
      return choice.reason;
    };
    assert.match(reason({ initialRoot: true }), /runs as root.*unprivileged user/);
    assert.match(reason({ isolation: "none" }), /sandbox's own user/);
    assert.match(reason({ max: 0 }), /OZ0_SESSION_MAX_PROCESSES=0/);
    assert.match(reason({ prlimitPath: undefined }), /prlimit \(util-linux\) not found/);
    // Before 5.14 the kernel counted a uid's processes across namespaces: every session's together.
    assert.match(
      reason({ kernel: "5.10.0-32-amd64" }),
      /Linux 5\.10\.0-32-amd64 counts .* across every user namespace/,
    );
    assert.equal(
      chooseSessionProcessLimit({ ...common, isolation: "bwrap", initialRoot: false, kernel: "5.14.0" }).limit?.max,
      LIMIT,
    );
    // The user mode counts by uid, a session's own on any kernel.
    assert.equal(
      chooseSessionProcessLimit({ ...common, isolation: "user", initialRoot: true, kernel: "4.18.0" }).limit?.max,
      LIMIT,
    );
  });
  void it("keeps to the sandbox's own limits, and warns when sessions at theirs would leave it none", () => {
    const lowered = chooseSessionProcessLimit({
      ...common,
      isolation: "bwrap",
      initialRoot: false,
      own: { soft: 30, hard: 30 },
    });
    assert.equal(lowered.limit?.max, 30);
    assert.match(lowered.reason ?? "", /lowered from 40 to the sandbox's own hard limit/);
    assert.match(
      lowered.warning ?? "",
      /ulimit -u, 30\) is below OZ0_SESSION_MAX_PROCESSES \(30\) x OZ0_MAX_SESSIONS \(16\)/,
    );
    const roomy = chooseSessionProcessLimit({
      ...common,
      isolation: "bwrap",
      initialRoot: false,
      own: { soft: LIMIT * 16 + 256, hard: Infinity },
    });
    assert.equal(roomy.warning, undefined);
    // In the user mode the sessions' processes are other uids', not counted against the sandbox's own limit.
    const apart = chooseSessionProcessLimit({
      ...common,
      isolation: "user",
      initialRoot: true,
      own: { soft: 30, hard: 30 },
    });
    assert.equal(apart.limit?.max, 30);
    assert.equal(apart.warning, undefined);
  });
  void it("reads the sandbox's own limit and whether it is the initial namespace's root", () => {
    assert.deepEqual(
      ownProcessLimit(
        "Max cpu time              unlimited            unlimited            seconds\nMax processes             96369                unlimited            processes\n",
      ),
      { soft: 96369, hard: Infinity },
    );
    if (asRoot) {
      assert.equal(runsAsInitialRoot("         0          0 4294967295\n"), true);
      // Root of a namespace nested in another: its map covers part of the parent's ids only.
      assert.equal(runsAsInitialRoot("         0          0      65536\n"), false);
      assert.equal(runsAsInitialRoot("         0     100000      65536\n"), false);
    } else assert.equal(runsAsInitialRoot("         0          0 4294967295\n"), false);
  });
});

void describe("a session's processes in the user mode", { skip: rootWithSetpriv }, () => {
  let t: TestSandbox;
  before(async () => {
    t = await startTestSandbox({ isolation: "user", maxSessionProcesses: LIMIT });
  });
  after(() => t.close());

  void it("stop at the limit, counted apart from another session's", async () => {
    assert.equal(t.sandbox.processLimit.limit?.max, LIMIT);
    await assertLimitedApart(t.client);
  });
});

void describe("a session's processes under bubblewrap", () => {
  if (asRoot) {
    // Each session under a uid of its own (bubblewrap-launcher.ts): root's own processes the kernel never limits.
    void describe("with the sandbox running as root", { skip: rootWithSetpriv }, () => {
      let t: TestSandbox;
      before(async () => {
        assert.equal(runsAsInitialRoot(), true);
        t = await startTestSandbox({ isolation: "bwrap", maxSessionProcesses: LIMIT });
      });
      after(() => t.close());

      void it("stop at the limit, counted apart from another session's", async () => {
        assert.notEqual(t.sandbox.sessionUids, undefined, "sessions run under uids of their own");
        assert.equal(t.sandbox.processLimit.limit?.max, LIMIT);
        await assertLimitedApart(t.client);
      });

      void it("runs a session with an LLM endpoint, the in-sandbox forwarder first, under it", async () => {
        await assertModelReached(t.client);
      });
    });

    // As the Kubernetes manifests run it: the sandbox as an unprivileged user.
    void describe("with the sandbox running as an unprivileged user", { skip: unprivilegedSandboxSkip() }, () => {
      let sandbox: Awaited<ReturnType<typeof startUnprivilegedSandbox>>;
      let client: Client<typeof SandboxService>;
      let lines: string[];
      before(async () => {
        sandbox = await startUnprivilegedSandbox({
          OZ0_ISOLATION: "bwrap",
          OZ0_SESSION_MAX_PROCESSES: String(LIMIT),
          OZ0_CANCEL_GRACE_MS: "2000",
        });
        ({ client, lines } = sandbox);
      });
      after(() => sandbox.close());

      void it("stop at the limit, counted apart from another session's", async () => {
        const startup = lines.map((line) => JSON.parse(line) as Record<string, unknown>).find((l) => l.isolation);
        assert.equal(startup?.sessionProcesses, LIMIT, `the start-up line: ${JSON.stringify(startup)}`);
        await assertLimitedApart(client);
      });

      void it("runs a session with an LLM endpoint, the in-sandbox forwarder first, under it", async () => {
        await assertModelReached(client);
      });

      // The namespace's init was forked before the limit was set, and a session can ptrace it and fork from it.
      void it("holds for bwrap's init in the namespace too", async () => {
        const probe = await runToEnd(
          client,
          scenarioStart({ mode: "probe", read: ["/proc/1/limits", "/proc/self/limits"] }),
        );
        const reads = (JSON.parse(probe.texts()[0]!) as { reads: Record<string, string> }).reads;
        for (const file of ["/proc/1/limits", "/proc/self/limits"])
          assert.match(
            reads[file]!,
            new RegExp(`^Max processes\\s+${LIMIT}\\s+${LIMIT}\\s`, "m"),
            `${file}: ${reads[file]}`,
          );
      });
    });
  } else {
    void it("stop at the limit, counted apart from another session's", async () => {
      const t = await startTestSandbox({ isolation: "bwrap", maxSessionProcesses: LIMIT });
      try {
        assert.equal(t.sandbox.processLimit.limit?.max, LIMIT);
        await assertLimitedApart(t.client);
      } finally {
        await t.close();
      }
    });
  }
});
