// A crash of the sandbox is not the end of its sessions (under bubblewrap):
// each harness runs under a keeper that outlives the sandbox, and a sandbox
// started again on the same root takes the sessions over. The sandbox here is
// a real process, SIGKILLed, with one session waiting for a permission answer
// (it then calls the model through its LLM forward) and one that finishes
// while no sandbox runs. After the restart the client re-attaches from the
// last seq it saw, answers, and reads on: every seq once, in order, and both
// sessions end as their harnesses did.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import type net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { SandboxService, SessionStatus, type RunSessionResponse } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { testCredentials } from "@oz0/serving/testing";
import { isText, listeningUrl, scenarioStart, SessionStream } from "./sandbox-test-kit.js";

const MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "dist", "main.js");

let root: string;
let port = 0;
let model: http.Server;
let modelUrl: string;
let sandbox: ChildProcess | undefined;
const logLines: string[] = [];

/**
 * Starts dist/main.js on the test's root and port; resolves once it listens.
 * The first start takes a port of the kernel's choosing (a port chosen before
 * could be taken by another test in between), every later one the same.
 */
async function startSandboxProcess(env: Record<string, string> = {}): Promise<ChildProcess> {
  const child = spawn(process.execPath, [MAIN], {
    env: {
      ...env,
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      OZ0_PORT: String(port),
      OZ0_SANDBOX_ROOT: root,
      OZ0_ISOLATION: "bwrap",
      OZ0_CANCEL_GRACE_MS: "2000",
      ...testCredentials.envFor("sandbox"),
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  port = Number(new URL(await listeningUrl(child, logLines)).port);
  return child;
}

function client(): Client<typeof SandboxService> {
  return createClient(
    SandboxService,
    createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}`, interceptors: [testCredentials.caller] }),
  );
}

before(async () => {
  root = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-restart-"));
  model = http.createServer((_request, response) => response.end("hello from the model"));
  await new Promise<void>((resolve) => model.listen(0, "127.0.0.1", resolve));
  modelUrl = `http://127.0.0.1:${(model.address() as net.AddressInfo).port}/anthropic`;
});

after(async () => {
  sandbox?.kill("SIGTERM");
  if (sandbox !== undefined && sandbox.exitCode === null)
    await new Promise((resolve) => sandbox!.once("exit", resolve));
  model.close();
  rmSync(root, { recursive: true, force: true });
});

function seqs(messages: RunSessionResponse[]): number[] {
  return messages.map((m) => Number(m.seq));
}

void test("a SIGKILLed sandbox's sessions run on, and the restarted sandbox takes them over", async () => {
  sandbox = await startSandboxProcess();
  const waiting = new SessionStream(client(), {
    message: {
      case: "start",
      value: scenarioStart(
        { mode: "permission-then-llm" },
        {},
        { sessionId: "ses_waits", llm: { anthropicBaseUrl: modelUrl, token: "tok" } },
      ),
    },
  });
  const quick = new SessionStream(client(), {
    message: {
      case: "start",
      value: scenarioStart({ mode: "nap", ms: 1500 }, {}, { sessionId: "ses_ends_meanwhile" }),
    },
  });
  const stopped = new SessionStream(client(), {
    message: { case: "start", value: scenarioStart({ mode: "wait" }, {}, { sessionId: "ses_cancelled_after" }) },
  });
  await waiting.waitFor(
    (m) => m.message.case === "event" && m.message.value.event.case === "permissionRequest",
    "the permission request",
  );
  await quick.waitFor((m) => m.message.case === "started", "the quick session's start");
  await stopped.waitFor(isText("ready"), "the session to cancel after the restart");

  sandbox.kill("SIGKILL");
  await new Promise((resolve) => sandbox!.once("exit", resolve));
  waiting.drop();
  quick.drop();
  stopped.drop();
  await Promise.all([waiting.finished, quick.finished, stopped.finished]);
  // Long enough for the quick session to end while no sandbox runs.
  await new Promise((resolve) => setTimeout(resolve, 2500));

  sandbox = await startSandboxProcess();
  assert.ok(
    logLines.some((line) => line.includes("took over the sessions")),
    logLines.join("\n"),
  );

  // Re-attach from the last seq seen, answer the request that waited through the crash, read to the end.
  const lastSeen = Number(waiting.received.at(-1)!.seq);
  const resumed = new SessionStream(client(), {
    message: { case: "attach", value: { sessionId: "ses_waits", afterSeq: BigInt(lastSeen) } },
  });
  resumed.send({ message: { case: "permissionAnswer", value: { id: "p1", allow: true } } });
  await resumed.finished;
  assert.equal(resumed.error, undefined, String(resumed.error));
  const all = [...waiting.received, ...resumed.received];
  assert.deepEqual(
    seqs(all),
    all.map((_m, i) => i + 1),
    "every seq once, in order, across the restart",
  );
  const exited = resumed.exited();
  assert.equal(
    exited.status,
    SessionStatus.COMPLETED,
    `${exited.errorCode}: ${exited.errorMessage} ${exited.stderrTail}`,
  );
  assert.equal(exited.result?.text, "allowed");
  assert.ok(
    resumed.texts().includes("model said hello from the model"),
    `the LLM forward works after the restart: ${resumed.texts().join(" | ")}`,
  );
  assert.equal(all.filter((m) => m.message.case === "started").length, 1, "started once");

  // A cancel after the restart reaches the harness with its grace (SIGTERM to the group of bwrap's init, whose pid
  // the restarted sandbox read from the keeper's info file), not bwrap, which would end the namespace at once.
  const cancelled = new SessionStream(client(), {
    message: {
      case: "attach",
      value: { sessionId: "ses_cancelled_after", afterSeq: BigInt(Number(stopped.received.at(-1)!.seq)) },
    },
  });
  cancelled.send({ message: { case: "cancel", value: { reason: "stopped after the restart" } } });
  await cancelled.finished;
  assert.equal(cancelled.exited().status, SessionStatus.CANCELLED);
  assert.equal(cancelled.exited().result?.text, "cancelled after cleanup");

  // The session that ended while no sandbox ran: its end is there to read, artifacts included.
  const lastQuick = Number(quick.received.at(-1)!.seq);
  const late = new SessionStream(client(), {
    message: { case: "attach", value: { sessionId: "ses_ends_meanwhile", afterSeq: BigInt(lastQuick) } },
  });
  await late.finished;
  const quickAll = [...quick.received, ...late.received];
  assert.deepEqual(
    seqs(quickAll),
    quickAll.map((_m, i) => i + 1),
  );
  assert.ok(
    late.received.some((m) => m.message.case === "artifacts"),
    late.received.map((m) => m.message.case).join(","),
  );
  assert.equal(
    late.exited().status,
    SessionStatus.COMPLETED,
    `${late.exited().errorCode}: ${late.exited().errorMessage}`,
  );
});

/** Alive and not a zombie. */
function runs(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

void test(
  "a session the restarted sandbox cannot take over is ended before its directories are removed",
  { skip: process.getuid?.() === 0 ? false : "sessions run under uids of their own only when the sandbox is root" },
  async () => {
    const stopped = new Promise((resolve) => sandbox?.once("exit", resolve));
    sandbox?.kill("SIGTERM");
    if (sandbox?.exitCode === null) await stopped;
    sandbox = await startSandboxProcess();
    const session = new SessionStream(client(), {
      message: { case: "start", value: scenarioStart({ mode: "wait" }, {}, { sessionId: "ses_refused" }) },
    });
    await session.waitFor(isText("ready"), "the session to refuse after the restart");
    const started = session.received[0]?.message;
    assert(started?.case === "started");
    const record = readdirSync(path.join(root, "internal"))
      .map((name) => path.join(root, "internal", name, "session.json"))
      .filter((file) => existsSync(file))
      .map(
        (file) => JSON.parse(readFileSync(file, "utf8")) as { request: { sessionId: string }; keeper: { pid: number } },
      )
      .find((r) => r.request.sessionId === "ses_refused");
    assert(record !== undefined, "the session's record");

    sandbox.kill("SIGKILL");
    await new Promise((resolve) => sandbox!.once("exit", resolve));
    session.drop();
    await session.finished;
    assert.equal(runs(record.keeper.pid), true, "the session ran on under its keeper");
    // Its uid is outside the range the sandbox starts with now: it cannot take the session over.
    logLines.length = 0;
    sandbox = await startSandboxProcess({ OZ0_SANDBOX_UID_BASE: "300000" });
    assert.ok(
      logLines.some((line) => line.includes("could not take over a session") && line.includes("ses_refused")),
      logLines.join("\n"),
    );
    assert.equal(runs(record.keeper.pid), false, "the refused session's keeper was ended");
    assert.equal(existsSync(started.value.workingDir), false, "and then its directories removed");
  },
);
