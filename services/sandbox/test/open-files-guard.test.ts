// A session whose processes hold more descriptors than a session may (OZ0_SESSION_MAX_OPEN_FILES) is stopped, and
// the others run on (session-open-files-guard.ts): the node's table of open files is one for everyone, and past it
// every open(2) of every other process fails.
import assert from "node:assert/strict";
import { it } from "node:test";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { ptyShare } from "../src/session-open-files-guard.js";
import { isText, runToEnd, scenarioStart, SessionStream, startTestSandbox } from "./sandbox-test-kit.js";

// The user mode needs root; elsewhere the sessions run as the sandbox's user in both others.
const MODES = process.getuid?.() === 0 ? (["bwrap", "user", "none"] as const) : (["bwrap", "none"] as const);

const STOPPED =
  /^the session's processes held (\d+) open files \(descriptors\), above a session's limit of 2000 \(OZ0_SESSION_MAX_OPEN_FILES\); the session was stopped$/;

for (const isolation of MODES)
  // Bounded: without the guard the holders keep their 3,000 files and wait for ever.
  void it(
    `stops the session whose processes hold too many open files (${isolation}), and the others run on`,
    { timeout: 60_000 },
    async () => {
      const t = await startTestSandbox({ isolation, maxSessionOpenFiles: 2000, openFilesCheckMs: 50 });
      try {
        const idle = new SessionStream(t.client, {
          message: { case: "start", value: scenarioStart({ mode: "wait" }) },
        });
        await idle.waitFor(isText("ready"), "the idle session ready");
        // Below the limit, held across some twenty checks: it runs to its end.
        const within = await runToEnd(t.client, scenarioStart({ mode: "descriptors", count: 1000, holdMs: 1000 }));
        assert.equal(within.exited().status, SessionStatus.COMPLETED, within.exited().errorMessage);
        // Two processes, each below the limit, above it together.
        const holder = await runToEnd(t.client, scenarioStart({ mode: "descriptors", count: 1500, child: 1500 }));
        assert.ok(holder.texts().includes("opened 1500"), "the harness opened its 1,500");
        const exited = holder.exited();
        assert.equal(exited.status, SessionStatus.FAILED);
        assert.equal(exited.errorCode, "open_files_limit", exited.errorMessage);
        const held = Number(STOPPED.exec(exited.errorMessage)?.[1]);
        assert.ok(held > 2000 && held < 3100, `${exited.errorMessage}: the 3,000 they opened and their own few`);
        // The idle session held few: it still runs, and ends as asked.
        idle.send({ message: { case: "cancel", value: {} } });
        await idle.finished;
        assert.equal(idle.exited().status, SessionStatus.CANCELLED, idle.exited().errorMessage);
      } finally {
        await t.close();
      }
    },
  );

// Where sessions run under the process limit's prlimit (bubblewrap, the `user` mode): each process's own descriptor
// limit is the session's, not the sandbox's (a million in most containers).
for (const isolation of MODES.filter((mode) => mode !== "none"))
  void it(`gives no process of a session more descriptors than the session may hold (${isolation})`, async () => {
    const t = await startTestSandbox({ isolation, maxSessionOpenFiles: 2000, openFilesCheckMs: 50 });
    try {
      const greedy = await runToEnd(t.client, scenarioStart({ mode: "descriptors", count: 3000, holdMs: 100 }));
      // At its limit the process and the session's few other descriptors are above the session's: the guard may
      // stop it before it completes.
      const exited = greedy.exited();
      if (exited.status !== SessionStatus.COMPLETED)
        assert.equal(exited.errorCode, "open_files_limit", exited.errorMessage);
      const opened = Number(/^opened (\d+)$/.exec(greedy.texts().find((text) => text.startsWith("opened")) ?? "")?.[1]);
      assert.ok(opened > 1900 && opened < 2000, `refused past its limit of 2,000 (with its own few): opened ${opened}`);
    } finally {
      await t.close();
    }
  });

// A process whose first thread exited alone is a zombie leader: its own /proc entries show no descriptors, its other
// threads' do. Skipped, it hid them all (and under bubblewrap every process below it).
for (const isolation of MODES)
  // Bounded: without the count of a zombie leader's live threads the holders keep their files and wait for ever.
  void it(
    `counts the files a process holds after its first thread exited (${isolation})`,
    { timeout: 60_000 },
    async () => {
      const t = await startTestSandbox({ isolation, maxSessionOpenFiles: 2000, openFilesCheckMs: 50 });
      try {
        const holder = await runToEnd(
          t.client,
          scenarioStart({ mode: "descriptors", count: 1500, child: 1500, leaderExits: true }),
        );
        assert.ok(holder.texts().includes("opened 1500"), "the harness opened its 1,500");
        const exited = holder.exited();
        assert.equal(exited.errorCode, "open_files_limit", exited.errorMessage);
      } finally {
        await t.close();
      }
    },
  );

// Every devpts but the host's draws from one count of the node's (kernel.pty.max less kernel.pty.reserve): a session
// under bubblewrap took them all with a few thousand descriptors, far below its open files limit, and no other
// session, nor any container of the node, could open a pseudo-terminal until it ended (attacker review).
// The open files limit turned off (0) leaves the ptys counted.
const share = ptyShare(2);
for (const maxSessionOpenFiles of [undefined, 0])
  void it(
    `stops a session holding more than its share of the node's pseudo-terminals, and the next gets one (open files limit ${maxSessionOpenFiles ?? "default"})`,
    { timeout: 60_000, skip: share === undefined ? "the kernel does not say how many ptys it has" : false },
    async () => {
      const { lookAbove, perSession, total } = share!;
      const t = await startTestSandbox({
        isolation: "bwrap",
        maxSessions: 2,
        openFilesCheckMs: 50,
        ...(maxSessionOpenFiles !== undefined ? { maxSessionOpenFiles } : {}),
      });
      try {
        const count = lookAbove + Math.floor(perSession / 2);
        const hoarder = await runToEnd(t.client, scenarioStart({ mode: "ptys", count }));
        assert.deepEqual(hoarder.texts(), [`ptys ${count}`]);
        const exited = hoarder.exited();
        assert.equal(exited.status, SessionStatus.FAILED);
        assert.equal(exited.errorCode, "open_files_limit", exited.errorMessage);
        assert.match(
          exited.errorMessage,
          new RegExp(
            `^the session's processes held \\d+ pseudo-terminals \\(/dev/ptmx\\), above a session's share of ${perSession} while the node had \\d+ of its ${total} open \\(kernel\\.pty\\.max less kernel\\.pty\\.reserve, shared by every session and container of the node\\); the session was stopped$`,
          ),
        );
        const next = await runToEnd(t.client, scenarioStart({ mode: "ptys", count: 1, hold: false }));
        assert.deepEqual(next.texts(), ["ptys 1"]);
      } finally {
        await t.close();
      }
    },
  );
