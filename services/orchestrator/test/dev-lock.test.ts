// One `oz0 dev` per data directory: two started at the same instant, exactly
// one runs and the other says which process holds the home; after the first
// stops, the next one starts.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { cliMain } from "./support/test-stack.js";

interface Dev {
  child: ChildProcess;
  /** Resolves "ready" when the stack is up, or with the exit code and stderr when it stopped first. */
  outcome: Promise<{ ready: true } | { ready: false; code: number | null; stderr: string }>;
}

function startDev(home: string): Dev {
  const child = spawn(process.execPath, [cliMain, "dev", "--port", "0"], {
    env: { ...process.env, OZ0_HOME: home, OZ0_URL: "", OZ0_LOG_LEVEL: "warn" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  const outcome = new Promise<{ ready: true } | { ready: false; code: number | null; stderr: string }>((resolve) => {
    child.stdout!.on("data", (d: Buffer) => {
      stdout += d.toString();
      if (stdout.includes("ready:")) resolve({ ready: true });
    });
    child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("exit", (code) => resolve({ ready: false, code, stderr }));
  });
  return { child, outcome };
}

async function stop(dev: Dev): Promise<void> {
  if (dev.child.exitCode !== null || dev.child.signalCode !== null) return;
  const exited = new Promise((resolve) => dev.child.once("exit", resolve));
  dev.child.kill("SIGINT");
  await exited;
}

void test("two oz0 dev started at once on one home: exactly one runs, the other names the holder; then the next may", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-dev-lock-"));
  const devs = [startDev(home), startDev(home)];
  try {
    const outcomes = await Promise.all(devs.map((d) => d.outcome));
    const ready = outcomes.filter((o) => o.ready);
    const refused = outcomes.filter((o): o is { ready: false; code: number | null; stderr: string } => !o.ready);
    assert.equal(ready.length, 1, JSON.stringify(outcomes));
    assert.equal(refused.length, 1);
    assert.equal(refused[0]!.code, 1);
    assert.match(
      refused[0]!.stderr,
      /another oz0 dev already runs on .* \((pid \d+|a process that is starting)\)|a dev stack already runs at http/,
    );
    await Promise.all(devs.map(stop));
    const next = startDev(home);
    devs.push(next);
    assert.deepEqual(await next.outcome, { ready: true }, "the home is free again once the first stopped");
  } finally {
    await Promise.all(devs.map(stop));
    rmSync(home, { recursive: true, force: true });
  }
});
