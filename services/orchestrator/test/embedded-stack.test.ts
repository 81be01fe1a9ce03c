// The embedded stack's service processes stop with whatever started them:
// a CLI (or a test) killed with SIGKILL gets no chance to stop them itself,
// so the kernel sends each one SIGTERM (setpriv --pdeathsig). An idle
// service would otherwise run on, holding its port, with nobody to stop it.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { eventually } from "./postgres-test-support.js";
import { ephemeralRangeStart } from "@oz0/serving";
import { startServiceProcess } from "../src/dev/embedded-stack.js";

/** Alive and not a zombie. */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

function serviceState(pid: number): string {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const fields = ["State", "PPid", "SigPnd", "ShdPnd", "SigBlk", "SigCgt"].map(
      (name) => new RegExp(`^${name}:.*$`, "m").exec(status)?.[0] ?? `${name}: ?`,
    );
    return `the service is ${fields.join(", ").replace(/\t/g, " ")}`;
  } catch {
    return "the service is gone";
  }
}

function logTail(file: string): string {
  try {
    return readFileSync(file, "utf8").split("\n").slice(-15).join("\n");
  } catch {
    return "(no log)";
  }
}

void test("a service process stops when the process that started it is killed", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-embedded-"));
  const logFile = path.join(dir, "events.log");
  // A parent that starts the events service (no broker: the local log only), says its pid, and waits.
  const parentScript = `
    import { startServiceProcess } from "@oz0/orchestrator";
    const p = await startServiceProcess({ name: "events", env: { OZ0_EVENTS_DATA: ${JSON.stringify(path.join(dir, "data"))} }, logFile: ${JSON.stringify(logFile)} });
    console.log(JSON.stringify({ pid: p.pid }));
    setInterval(() => {}, 1 << 30);
  `;
  const parent = spawn(process.execPath, ["--input-type=module", "-e", parentScript], {
    cwd: path.dirname(new URL(import.meta.url).pathname),
    stdio: ["ignore", "pipe", "inherit"],
  });
  let servicePid = -1;
  try {
    servicePid = await new Promise<number>((resolve, reject) => {
      createInterface({ input: parent.stdout! }).once("line", (line) =>
        resolve((JSON.parse(line) as { pid: number }).pid),
      );
      parent.once("exit", (code) => reject(new Error(`the parent exited (${code}) before starting the service`)));
    });
    assert.ok(alive(servicePid));
    parent.kill("SIGKILL");
    await eventually(async () => (alive(servicePid) ? undefined : true), "the service's exit").catch(
      (error: unknown) => {
        // What the service was doing (did the signal reach it, is it stuck shutting down), for whoever reads the failure.
        throw new Error(`${(error as Error).message}; ${serviceState(servicePid)}; its log ends:\n${logTail(logFile)}`);
      },
    );
  } finally {
    parent.kill("SIGKILL");
    if (servicePid > 0 && alive(servicePid)) process.kill(servicePid, "SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
});

void test("a service on any free port listens below the kernel's ephemeral range, out of a port-0 bind's reach", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-embedded-port-"));
  const service = await startServiceProcess({
    name: "events",
    env: { OZ0_EVENTS_DATA: path.join(dir, "data") },
    logFile: path.join(dir, "events.log"),
  });
  try {
    const port = Number(new URL(service.url).port);
    const rangeStart = ephemeralRangeStart();
    assert.ok(port >= 10_000 && port < rangeStart, `port ${port}, the range from ${rangeStart}`);
  } finally {
    await service.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
