// bwrap writes its --info-fd JSON in several writes: the child's pid first,
// then each namespace's id after reading it from /proc. Without a keeper (no
// perl on the node, or the launcher used on its own as
// bench/harness-session-overhead.ts does) that fd is a pipe to the sandbox,
// which must go on reading it once it has the init's pid: closing it there
// ended bwrap by SIGPIPE at its next write, and the session with it, whenever
// bwrap lost the race. A stand-in for bwrap here writes the pid, waits, then
// writes the rest, so it loses the race every time.
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { startHostSession } from "@oz0/harness/host";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { bubblewrapLauncher, DEFAULT_READ_ONLY_PATHS } from "../src/bubblewrap-launcher.js";

// bwrap's info as bwrap 0.8 writes it (strace), with a pause after the pid; then the command after "--", as bwrap runs it.
const FAKE_BWRAP = `#!/bin/sh
printf '{\\n    "child-pid": %s' "$$" >&3
sleep 0.3
printf ',\\n    "pid-namespace": 4026532406\\n}\\n' >&3
exec 3>&-
while [ "$1" != "--" ]; do shift; done
shift
exec "$@"
`;

// A whole harness: read the request, say started, end with a result.
const harness = `
  require("node:readline").createInterface({ input: process.stdin }).once("line", () => {
    console.log(JSON.stringify({ started: { protocolVersion: "PROTOCOL_VERSION_1", harnessName: "pipe" } }));
    console.log(JSON.stringify({ result: { stopReason: "STOP_REASON_COMPLETED", text: "done" } }));
    process.exit(0);
  });`;

void it("a bubblewrap session launched without a keeper runs to its result however bwrap writes its info", async (t) => {
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-bwrap-pipe-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const bwrapPath = path.join(root, "bwrap");
  writeFileSync(bwrapPath, FAKE_BWRAP);
  chmodSync(bwrapPath, 0o755);
  const sandboxRoot = path.join(root, "root");
  const [workDir, stateDir] = [path.join(sandboxRoot, "s1", "work"), path.join(sandboxRoot, "s1", "state")];
  for (const dir of [workDir, stateDir]) mkdirSync(dir, { recursive: true });
  const session = startHostSession({
    command: [process.execPath, "-e", harness],
    cwd: workDir,
    env: { PATH: "/usr/bin:/bin", HOME: stateDir },
    request: create(SessionRequestSchema, { protocolVersion: 1, jobId: "job-pipe", workingDir: workDir }),
    launcher: bubblewrapLauncher({
      bwrapPath,
      readOnlyPaths: DEFAULT_READ_ONLY_PATHS,
      pluginDir: "",
      writablePaths: [workDir, stateDir],
      hiddenPaths: [],
      sandboxRoot,
    }),
  });
  const outcome = await session.outcome;
  assert.equal(outcome.status, "completed", outcome.error?.message ?? "");
  assert.equal(outcome.result?.text, "done");
});
