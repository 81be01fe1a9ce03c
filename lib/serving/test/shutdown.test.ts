// A service's shutdown ends its process by letting the event loop empty, not
// by process.exit(), whose teardown can hang for good (nodejs/node#54918); a
// handle the shutdown left open is named, and the process exits anyway.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { SHUTDOWN_LINGER_MS } from "@oz0/serving";

const serving = fileURLToPath(new URL("../dist/index.js", import.meta.url));

/** A service in miniature serving on a TCP port; its shutdown closes the server unless `leak`. */
async function stopService(leak: boolean): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const script = `
    import net from "node:net";
    const { createLogger, onShutdownSignal } = await import(${JSON.stringify(serving)});
    // Seen only if the process ends through process.exit().
    const nodeExit = process.reallyExit;
    process.reallyExit = (code) => { process.stdout.write("process.exit\\n"); nodeExit.call(process, code); };
    const logger = createLogger({ name: "shutdown-test", level: "info" });
    const server = net.createServer().listen(0, "127.0.0.1");
    await new Promise((resolve) => server.once("listening", resolve));
    onShutdownSignal(logger, async () => {
      ${leak ? "" : "await new Promise((resolve) => server.close(resolve));"}
    });
    process.stdout.write("ready\\n");`;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  while (!stdout.includes("ready")) await once(child.stdout, "data");
  const exited = once(child, "exit") as Promise<[number | null]>;
  child.kill("SIGTERM");
  const [code] = await exited;
  return { code, stdout, stderr };
}

void test("a finished shutdown ends the process as a script ends, never through process.exit()", async () => {
  const { code, stdout, stderr } = await stopService(false);
  assert.equal(code, 0, stderr);
  assert.equal(stdout, "ready\n");
  assert.doesNotMatch(stderr, /exiting anyway/);
});

void test("a handle the shutdown left open is named, and the process exits anyway", async () => {
  const { code, stdout, stderr } = await stopService(true);
  assert.equal(code, 0, stderr);
  assert.equal(stdout, "ready\nprocess.exit\n");
  const warnings = stderr
    .split("\n")
    .filter((line) => line.includes("exiting anyway"))
    .map((line) => JSON.parse(line) as { open: string[]; msg: string });
  assert.equal(warnings.length, 1, stderr);
  assert.equal(warnings[0]!.msg, `still running ${SHUTDOWN_LINGER_MS} ms after shutting down: exiting anyway`);
  // Beside the process's own stdio pipes, which hold nothing.
  assert.ok(warnings[0]!.open.includes("TCPServerWrap"), JSON.stringify(warnings[0]));
});
