// `oz0 dev` adopts the services a killed `oz0 dev` left running, but only
// those started with the settings it would start them with: started again
// with another model script, it stops the LLM proxy that answers from the
// old one and starts it with the new (operator review: the old proxy went on
// answering from the old script while oz0 dev said it used the new one).
import assert from "node:assert/strict";
import { execFile, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { promisify } from "node:util";
import { devServicePids, startDevProcess } from "./support/dev-process.js";
import { cliMain, fakeAgentYaml, makePluginRepo } from "./support/test-stack.js";

const run = promisify(execFile);
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-dev-adopt-"));
const env = { ...process.env, OZ0_HOME: home, OZ0_URL: "", OZ0_TOKEN: "", OZ0_LOG_LEVEL: "info" };
const children = new Set<ChildProcess>();

function script(name: string, text: string): string {
  const file = path.join(home, `${name}.json`);
  writeFileSync(file, JSON.stringify([{ text }]));
  return file;
}

const startDev = (modelScript: string) => startDevProcess({ env, modelScript, children });
const servicePids = () => devServicePids(home);

const oz0 = async (...args: string[]): Promise<string> =>
  (await run(process.execPath, [cliMain, ...args], { env, cwd: home })).stdout;

after(() => {
  for (const child of children) child.kill("SIGKILL");
  try {
    for (const pid of Object.values(servicePids())) process.kill(pid, "SIGKILL");
  } catch {
    // no record, or gone already
  }
  rmSync(home, { recursive: true, force: true });
});

void test("oz0 dev started again with another model script restarts the LLM proxy it would adopt, and answers from the new script", async () => {
  const first = await startDev(script("a", "answered from script A"));
  const repo = await makePluginRepo({ agents: { plain: fakeAgentYaml({ name: "plain", tools: ["read_file"] }) } });
  await oz0("plugin", "install", repo);
  assert.match(await oz0("run", "plain", "hello"), /answered from script A/);
  const before = servicePids();
  first.child.kill("SIGKILL");
  await new Promise((resolve) => first.child.once("exit", resolve));

  const second = await startDev(script("b", "answered from script B"));
  const now = servicePids();
  assert.notEqual(now["llm-proxy"], before["llm-proxy"], "the proxy was started again");
  for (const name of ["events", "sandbox", "orchestrator"])
    assert.equal(now[name], before[name], `${name} was adopted`);
  assert.match(
    second.stderr(),
    /the llm-proxy service a previous oz0 dev left running \(pid \d+\) was started with other settings \(another model script, or provider keys\): stopping it, to start it with these/,
  );
  assert.match(await oz0("run", "plain", "hello"), /answered from script B/);
  second.child.kill("SIGINT");
  await new Promise((resolve) => second.child.once("exit", resolve));
});

void test("oz0 dev restarts the services an older oz0 dev left running without the orchestrator's credential for sandboxes", async () => {
  const first = await startDev(script("c", "answered from script C"));
  first.child.kill("SIGKILL");
  await new Promise((resolve) => first.child.once("exit", resolve));
  const before = servicePids();
  // The record as an oz0 dev from before that credential wrote it.
  const record = path.join(home, "credentials", "dev-stack.json");
  const kept = JSON.parse(readFileSync(record, "utf8")) as { credentials: Record<string, string> };
  delete kept.credentials["orchestrator-for-sandbox"];
  writeFileSync(record, JSON.stringify(kept), { mode: 0o600 });

  const second = await startDev(script("c", "answered from script C"));
  const now = servicePids();
  for (const name of ["events", "sandbox", "orchestrator", "llm-proxy"])
    assert.notEqual(now[name], before[name], `${name} was started again`);
  assert.match(
    second.stderr(),
    /the sandbox service a previous oz0 dev left running \(pid \d+\) has credentials of an older oz0 dev: stopping it, to start it with new ones/,
  );
  const saved = JSON.parse(readFileSync(record, "utf8")) as { credentials: Record<string, string> };
  assert.ok(saved.credentials["orchestrator-for-sandbox"], "the new record has the credential");
  assert.match(await oz0("run", "plain", "hello"), /answered from script C/);
  second.child.kill("SIGINT");
  await new Promise((resolve) => second.child.once("exit", resolve));
});
