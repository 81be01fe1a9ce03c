// Without bubblewrap, everything a session starts ends with it, also a
// grandchild that left the harness's process group (setsid) and holds its
// stdout: by each mechanism of the `none` mode that works here, and by the
// uid in the `user` mode. Checked the moment `exited` arrives, no waiting.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { CONTAINMENT_MECHANISMS, containmentUnavailable, describeProcess } from "@oz0/harness/host";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { findSetpriv } from "../src/parent-death-launcher.js";
import {
  recordingLogger,
  runToEnd,
  scenarioStart,
  SessionStream,
  startTestSandbox,
  type LogLine,
  type TestSandbox,
} from "./sandbox-test-kit.js";

/** Gone, or a zombie waiting for init to reap it (a killed orphan). */
const processGone = (pid: number): boolean => describeProcess(pid) === undefined;

const userSkip =
  process.getuid?.() !== 0
    ? "the user isolation mode needs root"
    : findSetpriv() === undefined
      ? "the user isolation mode needs setpriv"
      : false;
const setups = [
  ...CONTAINMENT_MECHANISMS.map((mechanism) => ({
    isolation: "none" as const,
    containment: mechanism,
    skip: containmentUnavailable(mechanism) ?? false,
  })),
  { isolation: "user" as const, containment: "uid" as const, skip: userSkip },
];

for (const { isolation, containment, skip } of setups) {
  void describe(
    `a session's processes end with it (isolation ${isolation}, containment ${containment})`,
    { skip },
    () => {
      let t: TestSandbox;
      let log: LogLine[];
      // The best-effort search finds a process only by the environment it inherited: there the grandchild keeps it.
      const keepEnvironment = containment === "environment";
      before(async () => {
        const { logger, lines } = recordingLogger();
        log = lines;
        t = await startTestSandbox({ isolation, ...(isolation === "none" ? { containment } : {}), logger });
      });
      after(async () => {
        await t.close();
      });

      void it("names its containment in the start-up line", () => {
        assert.equal(t.sandbox.containment, containment);
        const line = log.find((l) => l.fields.isolation === isolation);
        assert.equal(line?.fields.containment, containment, JSON.stringify(line));
      });

      void it("kills the grandchild a harness left in a session of its own when the harness exits", async () => {
        const stream = await runToEnd(t.client, scenarioStart({ mode: "escape", keepEnvironment }));
        const exited = stream.exited();
        assert.equal(exited.status, SessionStatus.COMPLETED, exited.errorMessage);
        const grandchild = Number(exited.result?.text);
        assert.ok(grandchild > 0);
        assert.ok(processGone(grandchild), `grandchild ${grandchild} outlived its session`);
      });

      void it("kills it when the session is cancelled while the harness runs", async () => {
        const stream = new SessionStream(t.client, {
          message: { case: "start", value: scenarioStart({ mode: "escape-and-wait", keepEnvironment }) },
        });
        const said = await stream.waitFor(
          (m) => m.message.case === "event" && m.message.value.event.case === "text",
          "the grandchild's pid",
        );
        const text =
          said.message.case === "event" && said.message.value.event.case === "text"
            ? said.message.value.event.value.text
            : "";
        const grandchild = Number(/^grandchild (\d+)$/.exec(text)?.[1]);
        assert.ok(grandchild > 0 && !processGone(grandchild), text);
        await t.client.cancelSession({ sessionId: stream.sessionId, reason: "the test is done with it" });
        await stream.finished;
        assert.equal(stream.exited().status, SessionStatus.CANCELLED);
        assert.ok(processGone(grandchild), `grandchild ${grandchild} outlived its cancelled session`);
      });
    },
  );
}
