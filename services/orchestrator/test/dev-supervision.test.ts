// `oz0 dev` survives any one failure. With one job waiting for approval and
// one in a model call, each service is killed in turn (SIGKILL), then `oz0
// dev` itself: the services come back on the same addresses, the next `oz0
// dev` adopts those still running, the approval is answered after it all,
// both jobs finish, a watcher that followed throughout saw each event once,
// and once the stack is stopped no process of it is left. The sandbox is one
// of the four: its sessions run on under their keepers (bubblewrap) and the
// restarted sandbox takes them over.
import assert from "node:assert/strict";
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { promisify } from "node:util";
import { devServicePids, startDevProcess, type DevProcess } from "./support/dev-process.js";
import { ephemeralRangeStart } from "@oz0/serving";
import { cliMain, eventually, fakeAgentYaml, makePluginRepo } from "./support/test-stack.js";

const run = promisify(execFile);

/** What both agents of this file share: they write the proof, with read_file and write_file. */
const PROOF_WRITER = { description: "Writes a proof.", tools: ["read_file", "write_file"] };

// Each session replays it: write a file, then a slow last answer (the model call a crash lands in).
// The third turn is for the call the sandbox's crash cuts: the proxy serves it (and meters it, as a
// provider bills an answer it sent) but the answer dies with the sandbox's forward, so the harness
// asks again, a new call the script answers with its next turn.
const SCRIPT = [
  {
    text: "Writing the proof.",
    toolCalls: [{ name: "write_file", input: { path: "proof.txt", content: "written\n" } }],
  },
  { text: "The proof is written.", delayMs: 6_000 },
  { text: "The proof is written." },
];

const home = mkdtempSync(path.join(os.tmpdir(), "oz0-dev-supervision-"));
const scriptFile = path.join(home, "..", `${path.basename(home)}-script.json`);
writeFileSync(scriptFile, JSON.stringify(SCRIPT));
const env = { ...process.env, OZ0_HOME: home, OZ0_URL: "", OZ0_TOKEN: "", OZ0_LOG_LEVEL: "info" };
const children = new Set<ChildProcess>();

type Dev = DevProcess;

/** `oz0 dev`, resolved once it says it is ready. */
const startDev = (): Promise<Dev> => startDevProcess({ env, modelScript: scriptFile, children });

async function oz0(...args: string[]): Promise<string> {
  const { stdout } = await run(process.execPath, [cliMain, ...args], { env, cwd: home });
  return stdout;
}

const servicePids = (): Record<string, number> => devServicePids(home);

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return !/^\S+ \(.*\) Z/s.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/** SIGKILL one service and wait until the supervisor has it running again, under a new pid. */
async function killService(dev: Dev, name: string): Promise<void> {
  const before = servicePids()[name]!;
  process.kill(before, "SIGKILL");
  await eventually(
    async () =>
      servicePids()[name] !== before && dev.stderr().includes(`the ${name} service is back`) ? true : undefined,
    `the ${name} service back under a new pid`,
  );
  // Each restart says so in one line (how it ended is known for a service this oz0 dev started, not for an adopted one), then that it is back.
  const lines = dev.stderr().split("\n");
  assert.ok(
    lines.some(
      (l) =>
        /^oz0: the \S+ service stopped \((killed by SIGKILL|it ended; it was adopted, so how is not known)\); starting it again/.test(
          l,
        ) && l.includes(name),
    ),
    dev.stderr(),
  );
}

interface Job {
  state: string;
  error?: string;
}

async function job(id: string): Promise<Job> {
  return JSON.parse(await oz0("jobs", "show", id, "--json")) as Job;
}

/** The job once it ended. */
async function finished(id: string): Promise<Job> {
  return eventually(async () => {
    const j = await job(id);
    return /SUCCEEDED|FAILED|CANCELLED/.test(j.state) ? j : undefined;
  }, `job ${id} ended`);
}

function jsonLines(text: string): unknown[] {
  return text
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as unknown);
}

after(() => {
  for (const child of children) child.kill("SIGKILL");
  // The services outlive a killed oz0 dev by design: a failed run must not leave them behind.
  try {
    for (const pid of Object.values(servicePids())) if (alive(pid)) process.kill(pid, "SIGKILL");
  } catch {
    // no record: nothing runs
  }
  rmSync(home, { recursive: true, force: true });
  rmSync(scriptFile, { force: true });
});

void test(
  "oz0 dev: each of the four services killed in turn, then oz0 dev itself; both jobs finish, the approval is answered after, each event is seen once",
  { timeout: 240_000 },
  async () => {
    const step = (what: string): void => void process.stderr.write(`# ${new Date().toISOString()} ${what}\n`);
    let dev = await startDev();
    step("dev ready");
    const firstPorts = readFileSync(path.join(home, "ports.json"), "utf8");
    // Below the kernel's ephemeral range: while a service is down, no process of the node binding port 0 (all a
    // user-mode session may bind) can be handed its port.
    const rangeStart = ephemeralRangeStart();
    for (const [name, port] of Object.entries(JSON.parse(firstPorts) as Record<string, number>))
      assert.ok(port >= 10_000 && port < rangeStart, `${name}'s port ${port} is not below ${rangeStart}`);
    const repo = await makePluginRepo({
      agents: {
        careful: fakeAgentYaml({ ...PROOF_WRITER, name: "careful", requiresApproval: ["write_file"] }),
        trusted: fakeAgentYaml({ ...PROOF_WRITER, name: "trusted" }),
      },
    });
    await oz0("plugin", "install", `file://${repo}`);

    const waiting = (await oz0("run", "careful", "Write the proof.", "--detach")).trim();
    const working = (await oz0("run", "trusted", "Write the proof.", "--detach")).trim();
    // A watcher that follows the waiting job through every crash, reconnecting by itself.
    const watcher = spawn(process.execPath, [cliMain, "jobs", "watch", waiting, "--json"], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.add(watcher);
    let watched = "";
    watcher.stdout!.on("data", (d: Buffer) => (watched += d.toString()));
    const watcherDone = new Promise<number | null>((resolve) => watcher.once("exit", resolve));

    step(`jobs ${waiting} ${working}`);
    const call = await eventually(async () => {
      const list = jsonLines(await oz0("approvals", "list", "--json")) as { jobId: string; callId: string }[];
      return list.find((p) => p.jobId === waiting)?.callId;
    });
    // The other job's first model call is metered: it runs its tool and then sits in its slow second call.
    await eventually(async () => {
      const usage = JSON.parse(await oz0("usage", working, "--json")) as { total?: { calls?: string | number } };
      return Number(usage.total?.calls ?? 0) >= 1 ? true : undefined;
    }, "the working job's first model call metered");

    step("approval waits; the other job is in its model call");
    for (const name of ["llm-proxy", "events", "orchestrator", "sandbox"]) {
      await killService(dev, name);
      step(`${name} killed and back`);
    }
    assert.equal(readFileSync(path.join(home, "ports.json"), "utf8"), firstPorts, "every service keeps its address");

    // oz0 dev itself: its services keep running, and the next oz0 dev adopts them.
    const pidsBefore = servicePids();
    dev.child.kill("SIGKILL");
    await new Promise((resolve) => dev.child.once("exit", resolve));
    for (const [name, pid] of Object.entries(pidsBefore))
      assert.ok(alive(pid), `the ${name} service outlives a killed oz0 dev`);
    dev = await startDev();
    assert.deepEqual(servicePids(), pidsBefore, "the services were adopted, not started again");

    step("oz0 dev killed and adopted");
    await oz0("approve", waiting, call).catch(async (error: Error) => {
      // Why the call could not be answered is in the job's record (its error): say it with the failure.
      const record = await oz0("jobs", "show", waiting, "--json").catch((e: Error) => e.message);
      throw new Error(`${error.message}\nthe job: ${record}`);
    });
    step("approved");
    for (const id of [waiting, working]) {
      const ended = await finished(id);
      assert.equal(ended.state, "JOB_STATE_SUCCEEDED", `${id}: ${ended.error}`);
    }

    assert.equal(await watcherDone, 0, "the watcher followed the job to its success");
    const seqs = (jsonLines(watched) as { seq?: string | number }[])
      .map((e) => e.seq)
      .filter((s) => s !== undefined)
      .map(Number);
    assert.ok(seqs.length > 3, watched);
    assert.deepEqual(
      seqs,
      [...new Set(seqs)].sort((a, b) => a - b),
      "each event once, in order",
    );

    // The restarted sandbox runs new jobs too.
    const after = (await oz0("run", "trusted", "Write the proof.", "--detach")).trim();
    assert.equal((await finished(after)).state, "JOB_STATE_SUCCEEDED");

    // Ctrl-C stops every service; nothing of the stack is left.
    const last = servicePids();
    dev.child.kill("SIGINT");
    assert.equal(await new Promise((resolve) => dev.child.once("exit", resolve)), 0);
    // One calm line, not a line per service that reads like a crash.
    assert.deepEqual(dev.stderr().split("oz0: stopping the stack\n")[1], "", dev.stderr());
    for (const [name, pid] of Object.entries(last)) assert.equal(alive(pid), false, `the ${name} service is stopped`);
  },
);
