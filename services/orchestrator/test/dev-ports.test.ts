// The ports `oz0 dev` keeps for its services: chosen below the kernel's ephemeral range, and a port recorded in it
// (by a version that let the kernel choose) named on the terminal with what to do: while its service is down, a
// process binding port 0 (all a user-mode sandbox session may bind) could be handed it.
import assert from "node:assert/strict";
import { type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { ephemeralRangeStart } from "@oz0/serving";
import { devServicePids, startDevProcess } from "./support/dev-process.js";

const home = mkdtempSync(path.join(os.tmpdir(), "oz0-dev-ports-"));
const env = { ...process.env, OZ0_HOME: home, OZ0_URL: "", OZ0_TOKEN: "", OZ0_LOG_LEVEL: "info" };
const children = new Set<ChildProcess>();

after(() => {
  for (const child of children) child.kill("SIGKILL");
  try {
    for (const pid of Object.values(devServicePids(home))) process.kill(pid, "SIGKILL");
  } catch {
    // no record, or gone already
  }
  rmSync(home, { recursive: true, force: true });
});

void test("oz0 dev names a recorded port in the ephemeral range, and chooses the others below it", async () => {
  // A free port of the kernel's choosing, as ports.json recorded them before.
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const old = (server.address() as net.AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  writeFileSync(path.join(home, "ports.json"), JSON.stringify({ events: old }));
  const script = path.join(home, "script.json");
  writeFileSync(script, JSON.stringify([{ text: "hello" }]));

  const dev = await startDevProcess({ env, modelScript: script, children });
  const rangeStart = ephemeralRangeStart();
  assert.ok(old >= rangeStart, `the kernel chose ${old}, below its range's start ${rangeStart}`);
  assert.match(
    dev.stderr(),
    new RegExp(
      `the events service's port ${old} \\(.*ports\\.json\\) is in the kernel's ephemeral range \\(from ${rangeStart}\\): .*delete .*ports\\.json`,
    ),
  );
  const ports = JSON.parse(readFileSync(path.join(home, "ports.json"), "utf8")) as Record<string, number>;
  assert.equal(ports.events, old, "a recorded port is kept: stored jobs expect the service there");
  for (const name of ["llm-proxy", "sandbox", "orchestrator"])
    assert.ok(ports[name]! >= 10_000 && ports[name]! < rangeStart, `${name}: ${ports[name]}`);
  dev.child.kill("SIGINT");
  await new Promise((resolve) => dev.child.once("exit", resolve));
});
