// The forwarder's Unix sockets bind under any sandbox root, however deep:
// a path past the 107 bytes Linux binds goes through a short alias of its
// directory, and closing the forwarder removes the socket either way.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { open } from "node:fs/promises";
import http from "node:http";
import type net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { planLlmForwards, startLlmForwarding } from "../src/llm-forwarder.js";

/** One HTTP request over the Unix socket at `socketPath`; the answer's body. */
function get(socketPath: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.get({ socketPath, path: "/v1/models" }, (res) => {
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
      const forwarding = await startLlmForwarding(forwards);
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
});
