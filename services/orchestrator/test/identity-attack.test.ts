// Issue 19's attack, on the real stack: a job's own tool call, from inside its
// session, calls every method of every service with no credential, with its
// session token, and with every credential it can read from files and from
// other processes' environments; and it looks for a planted provider key in
// everything it can read. Every call is refused (or cannot even connect), no
// credential or store of the services is readable, and the key is nowhere.
// Once under bubblewrap and once as an unprivileged user of the session's own.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, copyFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";
import { ACCESS_TABLE } from "@oz0/serving";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import { commitAll, eventually, repoRoot, startTestStack, type TestStack } from "./support/test-stack.js";
import { toolResults } from "./support/tool-results.js";

const fixture = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "identity-attack.mjs");
const PLANTED_KEY = `sk-ant-api03-PLANTED${Math.random().toString(36).slice(2)}q9Zx7Lw2Vb8Nc4Md6`;
// The shell the stack starts from holds the key too, as a person's would.
process.env.ANTHROPIC_API_KEY = PLANTED_KEY;

interface Report {
  attempts: number;
  refused: number;
  unreachable: number;
  notServed: number;
  credentials: string[];
  breaches: unknown[];
  readableSensitive: string[];
  keyFound: string[];
  probesRead: string[];
  uid: number;
}

async function attack(isolation: "bwrap" | "user", ctx: TestContext): Promise<{ report: Report; t: TestStack }> {
  let command = "";
  const pick = ({ turn, request }: { turn: number; request: ScriptedRequest }): ScriptedTurn =>
    turn === 0
      ? { toolCalls: [{ name: "run_command", input: { command } }] }
      : { text: `saw: ${toolResults(request)}` };
  const t = await startTestStack({ pick, sandboxEnv: { OZ0_ISOLATION: isolation } });
  const repo = mkdtempSync(path.join(os.tmpdir(), "oz0-attack-repo-"));
  ctx.after(() => rmSync(repo, { recursive: true, force: true }));
  for (const sub of ["agents", "prompts"]) mkdirSync(path.join(repo, sub));
  writeFileSync(path.join(repo, "prompts", "p.md"), "Do as you are told.\n");
  writeFileSync(
    path.join(repo, "oz0-plugin.yaml"),
    'name: attack\nversion: 0.1.0\nharnesses:\n  - name: fake\n    command: ["oz0-fake-harness"]\n    permissions: true\n    tools: [run_command]\nagents:\n  - agents/intruder.yaml\n',
  );
  writeFileSync(
    path.join(repo, "agents", "intruder.yaml"),
    "name: intruder\nruntime: harness:fake\nmodel:\n  primary: anthropic/claude-sonnet-5-5\ninstructions: prompts/p.md\nlimits:\n  max_steps: 3\nharness:\n  tools: [run_command]\n",
  );
  await commitAll(repo, "plugin");
  assert.equal((await t.cli(["plugin", "install", `file://${repo}`])).code, 0);
  // The key in the proxy's custody as well: encrypted in its store.
  assert.equal((await t.cli(["secret", "set", "ANTHROPIC_API_KEY"], { input: `${PLANTED_KEY}\n` })).code, 0);
  const payload = mkdtempSync(path.join(os.tmpdir(), "oz0-attack-payload-"));
  ctx.after(() => rmSync(payload, { recursive: true, force: true }));
  copyFileSync(fixture, path.join(payload, "identity-attack.mjs"));
  // Where a person's checkout holds secrets, readable by everyone (0644): a .env beside package.json, in a
  // service's folder, in a harness package's own (not among what it publishes), and under deploy/ (where the k8s
  // README has operators write keys). Sessions of the local stack run the harnesses from the checkout, and must
  // still not read them; and a file the harness needs, to show the probes can read what is bound.
  const planted = [".", "services/llm-proxy", "sdk/harness-ts", "deploy"].map((dir) =>
    path.join(repoRoot, dir, `.env.oz0-attack-${process.pid}`),
  );
  const needed = path.join(repoRoot, "sdk", "harness-ts", "package.json");
  if (isolation === "bwrap") {
    for (const file of planted) {
      writeFileSync(file, `ANTHROPIC_API_KEY=${PLANTED_KEY}\n`, { mode: 0o644 });
      ctx.after(() => rmSync(file, { force: true }));
    }
  }
  const targets = {
    install: repoRoot,
    probes: isolation === "bwrap" ? [...planted, needed] : [],
    urls: t.stack.urls,
    methods: Object.keys(ACCESS_TABLE).filter((m) => !m.startsWith("grpc.health.")),
    home: t.home,
    plantedKeyReversed: [...PLANTED_KEY].reverse().join(""),
  };
  command = `node "$(find . -name identity-attack.mjs | head -n 1)" ${Buffer.from(JSON.stringify(targets)).toString("base64")}`;
  const run = await t.cli(["run", "intruder", "attack", "--attach", payload, "--detach"]);
  const jobId = /job_\w+/.exec(run.stdout + run.stderr)?.[0];
  assert.ok(jobId, `${run.stdout}\n${run.stderr}`);
  const job = await eventually(async () => {
    const shown = JSON.parse((await t.cli(["jobs", "show", jobId, "--json"])).stdout) as {
      state: string;
      resultText?: string;
      error?: string;
    };
    return shown.state === "JOB_STATE_SUCCEEDED" || shown.state === "JOB_STATE_FAILED" ? shown : undefined;
  });
  assert.equal(job.state, "JOB_STATE_SUCCEEDED", job.error);
  const line = /\{"attempts".*\}/.exec(job.resultText ?? "")?.[0];
  assert.ok(line, `the attack reported: ${job.resultText}`);
  return { report: JSON.parse(line) as Report, t };
}

function assertHeld(report: Report, diagnostic: (message: string) => void): void {
  const { attempts, refused, unreachable, notServed, credentials, uid } = report;
  diagnostic(JSON.stringify({ attempts, refused, unreachable, notServed, credentials, uid }));
  assert.deepEqual(report.breaches, [], "calls that got past authentication");
  assert.deepEqual(report.readableSensitive, [], "service credentials or stores the session could read");
  assert.deepEqual(report.keyFound, [], "places the planted provider key was found");
  assert.ok(
    report.credentials.some((c) => c === "env ANTHROPIC_API_KEY"),
    "the session tried its own session token",
  );
  assert.equal(report.attempts, report.refused + report.unreachable + report.notServed);
}

void describe("an attacker inside a job", () => {
  void it("as an unprivileged user of its own reaches the services, and every call is refused", async (ctx) => {
    const { report, t } = await attack("user", ctx);
    try {
      assertHeld(report, (m) => ctx.diagnostic(m));
      assert.notEqual(report.uid, 0, "the session did not run as root");
      // Loopback is shared in this mode: the services answered, and authentication refused every call.
      assert.ok(report.refused >= 4 * 20, `refused ${report.refused} of ${report.attempts}`);
    } finally {
      await t.close();
    }
  });

  void it("under bubblewrap reaches no service port at all", async (ctx) => {
    const { report, t } = await attack("bwrap", ctx);
    try {
      assertHeld(report, (m) => ctx.diagnostic(m));
      assert.equal(
        report.unreachable,
        report.attempts,
        "every call failed to connect: the session has a network of its own",
      );
      // Of the checkout it read what its harness needs, and none of the planted secrets (keyFound above).
      assert.deepEqual(report.probesRead, [path.join(repoRoot, "sdk", "harness-ts", "package.json")]);
    } finally {
      await t.close();
    }
  });
});
