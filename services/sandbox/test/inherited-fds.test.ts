// A descriptor the sandbox inherited open past exec (whatever started it leaked one: a shell's redirection, a
// tool's pipe) never reaches a session: the sandbox closes it first thing (@oz0/serving's
// inherited-descriptors.ts), and the keeper (bubblewrap) and the filter's perl (the user mode) close every
// descriptor they did not place before the session's first program runs, for a keeper outliving its sandbox.
import assert from "node:assert/strict";
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { it } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { SandboxService, SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { testCredentials } from "@oz0/serving/testing";
import { listeningUrl, runToEnd, scenarioStart, spawnSandboxMain } from "./sandbox-test-kit.js";

const MODES = process.getuid?.() === 0 ? (["bwrap", "user", "none"] as const) : (["bwrap", "none"] as const);

for (const isolation of MODES)
  void it(`a descriptor the sandbox inherited does not reach its sessions (${isolation})`, async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-leaked-fd-"));
    // Its own temporary folder: one every user passes, for the user mode's uids.
    const root = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-fds-"));
    const secret = path.join(dir, "leaked-secret.txt");
    writeFileSync(secret, "what the sandbox's starter had open");
    const leaked = openSync(secret, "r");
    // Given to the sandbox as its fd 40 (a stdio entry: open past exec, as a leak is; a low one Node takes over).
    const child = spawnSandboxMain(
      { OZ0_SANDBOX_ROOT: root, OZ0_ISOLATION: isolation, OZ0_LOG_LEVEL: "info" },
      { extraStdio: [...Array<"ignore">(37).fill("ignore"), leaked] },
    );
    closeSync(leaked);
    const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
    try {
      const lines: string[] = [];
      const url = await listeningUrl(child, lines);
      const said = lines.map(
        (line) => JSON.parse(line) as { msg: string; closed?: Array<{ fd: number; was: string }> },
      );
      assert.deepEqual(
        said.find((line) => line.closed !== undefined)?.closed?.find(({ fd }) => fd === 40),
        { fd: 40, was: secret },
        "the start-up log names what it closed",
      );
      const client = createClient(
        SandboxService,
        createGrpcTransport({ baseUrl: url, interceptors: [testCredentials.caller] }),
      );
      const stream = await runToEnd(client, scenarioStart({ mode: "probe" }));
      assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
      const { fds } = JSON.parse(stream.texts()[0] ?? "{}") as { fds: Record<string, string> };
      assert.ok(Object.keys(fds).length >= 3, JSON.stringify(fds));
      assert.deepEqual(
        Object.entries(fds).filter(([, target]) => target.includes("leaked-secret")),
        [],
        "the leaked file is not among the session's descriptors",
      );
    } finally {
      child.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
      rmSync(root, { recursive: true, force: true });
    }
  });
