// The services' logger writes stderr without blocking, and flushes it when the
// process exits. A reader that stopped reading (a log collector that hung, a
// parent that died while another process holds the pipe) must not keep a
// service from exiting: before, the exit flush retried the full pipe forever
// on the only thread, and no SIGTERM could end the process. A reader that is
// gone (the parent that piped stderr was killed) must not either: the exit
// flush then retried the broken pipe forever.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const serving = fileURLToPath(new URL("../dist/index.js", import.meta.url));

/**
 * A service in miniature: logs `lines` lines of 200 bytes, says "ready" on stdout, then waits for a signal (or
 * exits at once). `logOnShutdown`: its shutdown logs that many lines more, then it exits with them unwritten.
 */
function service(lines: number, then: "wait-for-signal" | "exit", logOnShutdown = 0): ReturnType<typeof spawn> {
  const script = `
    const { createLogger, onShutdownSignal } = await import(${JSON.stringify(serving)});
    const logger = createLogger({ name: "logger-test", level: "info" });
    // What a service serves from, closed by its shutdown.
    const work = setInterval(() => undefined, 1000);
    onShutdownSignal(logger, async () => {
      clearInterval(work);
      for (let i = 0; i < ${logOnShutdown}; i++) logger.info({ i }, "stopping");
    });
    for (let i = 0; i < ${lines}; i++) logger.info({ i, pad: "x".repeat(200) }, "line");
    process.stdout.write("ready\\n");
    ${then === "exit" ? "process.exit(0);" : ""}`;
  return spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "pipe"] });
}

void test("a service whose stderr reader stopped reading still exits on SIGTERM", { timeout: 60_000 }, async () => {
  // Far more than a pipe holds (64 KiB), and nobody reads it.
  const child = service(20_000, "wait-for-signal");
  child.stderr!.pause();
  const [chunk] = (await once(child.stdout!, "data")) as [Buffer];
  assert.equal(chunk.toString().trim(), "ready");
  const exited = once(child, "exit") as Promise<[number | null, NodeJS.Signals | null]>;
  child.kill("SIGTERM");
  const [code, signal] = await exited;
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, "exited on its own after the shutdown, not killed");
  child.stderr!.destroy();
});

void test("a service whose stderr reader is gone still exits on SIGTERM", { timeout: 60_000 }, async () => {
  const child = service(1, "wait-for-signal", 3);
  const [chunk] = (await once(child.stdout!, "data")) as [Buffer];
  assert.equal(chunk.toString().trim(), "ready");
  // Its parent died: the pipe's only reader is closed, so every write to it fails with EPIPE.
  child.stderr!.destroy();
  const exited = once(child, "exit") as Promise<[number | null, NodeJS.Signals | null]>;
  child.kill("SIGTERM");
  const [code, signal] = await exited;
  assert.deepEqual({ code, signal }, { code: 0, signal: null }, "exited on its own after the shutdown, not killed");
});

void test("a service whose stderr is read loses no line when it exits right after logging", async () => {
  const child = service(5_000, "exit");
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  const [code] = (await once(child, "exit")) as [number | null];
  if (!child.stderr!.readableEnded) await once(child.stderr!, "end");
  assert.equal(code, 0);
  const lines = stderr.split("\n").filter((l) => l.includes('"msg":"line"'));
  assert.equal(lines.length, 5_000, `every line flushed on exit; stderr ends: ${stderr.slice(-400)}`);
  assert.equal(JSON.parse(lines.at(-1)!).i, 4_999);
});
