// The forwarder's Unix sockets bind under any sandbox root, however deep:
// a path past the 107 bytes Linux binds goes through a short alias of its
// directory, and closing the forwarder removes the socket either way. The
// node's shared listeners give each origin one socket, in a folder of its
// own holding nothing else, for every session that names it.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { open } from "node:fs/promises";
import http from "node:http";
import type net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { ForwardBudget, planLlmForwards, SharedLlmListeners, startLlmForwarding } from "../src/llm-forwarder.js";

const budget = new ForwardBudget({ perSession: 64, total: 1024, idleTimeoutMs: 60_000 });

/** One HTTP request over the Unix socket at `socketPath`; the answer's body. */
function get(socketPath: string): Promise<string> {
  return new Promise((resolve, reject) => {
    // A connection of its own: the global agent would reuse one to another socket by the same path (a reused fd number).
    const req = http.get({ socketPath, path: "/v1/models", agent: false }, (res) => {
      let body = "";
      res.on("data", (d: Buffer) => (body += d.toString()));
      res.on("end", () => resolve(body));
    });
    req.on("error", reject);
  });
}

void describe("the LLM forwarder", () => {
  let outer: string;
  let origin: http.Server;
  let url: string;
  before(async () => {
    outer = mkdtempSync(path.join(os.tmpdir(), "oz0-forwarder-"));
    origin = http.createServer((req, res) => res.end(`origin saw ${req.url}`));
    await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
    url = `http://127.0.0.1:${(origin.address() as net.AddressInfo).port}`;
  });
  after(() => {
    origin.close();
    rmSync(outer, { recursive: true, force: true });
  });

  for (const depth of [10, 120]) {
    void it(`binds, forwards and removes its socket in a directory ${depth} bytes deep`, async () => {
      const socketDir = path.join(outer, "d".repeat(depth));
      mkdirSync(socketDir);
      const forwards = planLlmForwards({ socketDir, urls: [{ field: "llm.anthropic_base_url", url }] });
      const socketPath = forwards[0]!.socketPath;
      assert.equal(Buffer.byteLength(socketPath) > 107, depth > 100);
      const forwarding = await startLlmForwarding({ forwards, budget, sessionId: "ses_deep" });
      try {
        assert.ok(existsSync(socketPath), "the socket is where bubblewrap binds it from");
        // Connecting has the same limit as binding: a client reaches a deep socket through its directory too.
        const dir = await open(socketDir, "r");
        try {
          assert.equal(await get(`/proc/self/fd/${dir.fd}/llm-0.sock`), "origin saw /v1/models");
        } finally {
          await dir.close();
        }
      } finally {
        await forwarding.close();
      }
      assert.equal(existsSync(socketPath), false, "closing removed the socket");
    });
  }

  for (const depth of [10, 120]) {
    void it(`listens once per origin for every session, each origin in a folder of its own, ${depth} bytes deep`, async () => {
      const sharedDir = path.join(outer, `shared-${depth}-${"s".repeat(depth)}`);
      const other = http.createServer((req, res) => res.end(`other saw ${req.url}`));
      await new Promise<void>((resolve) => other.listen(0, "127.0.0.1", resolve));
      const otherUrl = `http://127.0.0.1:${(other.address() as net.AddressInfo).port}`;
      const listeners = new SharedLlmListeners({ dir: sharedDir, budget });
      try {
        const plan = (urls: string[]) =>
          planLlmForwards({
            socketDir: path.join(outer, "unused"),
            sharedDir,
            urls: urls.map((u) => ({ field: "llm.anthropic_base_url", url: u })),
          });
        const first = await listeners.open(plan([`${url}/anthropic`]));
        const second = await listeners.open(plan([`${otherUrl}/openai`, `${url}/anthropic`]));
        const [a] = first.forwards;
        const [b, c] = second.forwards;
        assert.equal(c!.socketPath, a!.socketPath, "the same origin, the same socket");
        assert.notEqual(path.dirname(b!.socketPath), path.dirname(a!.socketPath), "another origin, another folder");
        assert.deepEqual([a!.mount.dest, b!.mount.dest, c!.mount.dest], ["/run/oz0/0", "/run/oz0/0", "/run/oz0/1"]);
        assert.equal(second.innerUrl(`${url}/anthropic/`), "http://127.0.0.1:41001/anthropic");
        // What a session sees there: its origin's socket alone, nothing of the other sessions using it.
        for (const forward of [a!, b!]) {
          assert.deepEqual(readdirSync(forward.mount.source), ["llm.sock"]);
          assert.equal(statSync(forward.socketPath).nlink, 1);
        }
        const via = async (socketPath: string): Promise<string> => {
          const dir = await open(path.dirname(socketPath), "r");
          try {
            return await get(`/proc/self/fd/${dir.fd}/llm.sock`);
          } finally {
            await dir.close();
          }
        };
        assert.equal(await via(a!.socketPath), "origin saw /v1/models");
        assert.equal(await via(b!.socketPath), "other saw /v1/models");
        await first.close();
        assert.equal(
          await via(a!.socketPath),
          "origin saw /v1/models",
          "a session's end leaves the listener to others",
        );
      } finally {
        await listeners.close();
        other.close();
      }
    });
  }
});
