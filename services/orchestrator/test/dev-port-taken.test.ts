// oz0 dev on a port another program holds says what to do, for the port it
// is: the orchestrator's is oz0 dev's --port (7700 unless given), which no
// ports.json holds, so deleting that file, the advice for the other
// services' ports, changed nothing (newcomer review: a second oz0 dev of
// another OZ0_HOME on 7700).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { devPortsFile, startDevStack } from "../src/dev/dev-stack.js";

const homes: string[] = [];
let blocker: net.Server;
let taken: number;

before(async () => {
  blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
  taken = (blocker.address() as net.AddressInfo).port;
});

after(async () => {
  await new Promise((resolve) => blocker.close(resolve));
  for (const home of homes) rmSync(home, { recursive: true, force: true });
});

function freshHome(): string {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-dev-port-taken-"));
  homes.push(home);
  return home;
}

void test("the orchestrator's port taken: give oz0 dev another --port", async () => {
  await assert.rejects(
    startDevStack({ home: freshHome(), orchestratorPort: taken, notify: () => undefined }),
    new RegExp(`^Error: the orchestrator's port ${taken} is taken by another program .*oz0 dev --port N$`),
  );
});

void test("another service's recorded port taken: delete ports.json, and oz0 dev chooses new ones", async () => {
  const home = freshHome();
  writeFileSync(devPortsFile(home), JSON.stringify({ sandbox: taken }));
  await assert.rejects(
    startDevStack({ home, orchestratorPort: 0, notify: () => undefined }),
    (error: Error) =>
      error.message.startsWith(`the sandbox service's port ${taken} is taken by another program`) &&
      error.message.includes(devPortsFile(home)),
  );
});
