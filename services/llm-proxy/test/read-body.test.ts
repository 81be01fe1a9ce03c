// readAll reads a request's or an answer's whole body: at once when it came
// whole with its headers (taken from the stream's buffer), else through
// events as it arrives. Both ways must give the same bytes, refuse a body
// over the limit, and reject an answer whose connection dies before its end.
// nextChunk reads a streamed answer as it arrives: what is buffered at once,
// else the next part, null at the end, and rejects a cut connection.
import assert from "node:assert/strict";
import http from "node:http";
import net from "node:net";
import { after, before, describe, it } from "node:test";
import { nextChunk, readAll } from "../src/upstream-client.js";

const LIMIT = 1000;

interface Seen {
  /** Whether the body was all buffered when readAll was called (so it was read at once). */
  buffered: boolean;
  body: Buffer | undefined;
}

void describe("readAll", () => {
  let server: http.Server;
  let port: number;
  /** Resolved by the handler as it starts, so a client can send the rest of a body after it. */
  let started: () => void = () => undefined;
  const seen: Seen[] = [];

  before(async () => {
    server = http.createServer((req, res) => {
      started();
      // As the proxy does: the body is read after an await (the token check).
      void Promise.resolve().then(async () => {
        const buffered = req.complete || req.readableLength === Number(req.headers["content-length"]);
        const body = await readAll(req, LIMIT);
        seen.push({ buffered, body });
        res.end(body === undefined ? "too large" : body);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as net.AddressInfo).port;
  });
  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  /** Sends a request through a raw socket: its head and body parts, each part after the handler started. */
  async function send(parts: string[]): Promise<{ seen: Seen; answer: string }> {
    const socket = net.connect(port, "127.0.0.1");
    socket.setNoDelay(true);
    let answer = "";
    socket.on("data", (chunk: Buffer) => (answer += chunk.toString()));
    const handled = new Promise<void>((resolve) => (started = resolve));
    const count = seen.length;
    socket.write(parts[0]!);
    if (parts.length > 1) {
      await handled;
      for (const part of parts.slice(1)) {
        await new Promise<void>((resolve) => socket.write(part, () => resolve()));
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
    while (seen.length === count || !answer.includes("\r\n\r\n")) await new Promise((r) => setTimeout(r, 5));
    socket.destroy();
    return { seen: seen.at(-1)!, answer: answer.slice(answer.indexOf("\r\n\r\n") + 4) };
  }

  const head = (length: number): string =>
    `POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: ${length}\r\nConnection: close\r\n\r\n`;

  void it("reads a body that came with its headers at once", async () => {
    const body = '{"model":"m","messages":[{"role":"user","content":"h\u00e9llo"}]}';
    const { seen, answer } = await send([head(Buffer.byteLength(body)) + body]);
    assert.equal(seen.buffered, true, "the whole request came in one write: all buffered when read");
    assert.equal(seen.body!.toString(), body);
    assert.equal(answer, body);
  });

  void it("reads a body that arrives in parts after its headers through events", async () => {
    const body = "x".repeat(300) + "y".repeat(300);
    const { seen } = await send([head(body.length) + body.slice(0, 100), body.slice(100, 350), body.slice(350)]);
    assert.equal(seen.buffered, false);
    assert.equal(seen.body!.toString(), body);
  });

  void it("reads an empty body and a chunked one", async () => {
    assert.equal((await send([head(0)])).seen.body!.length, 0);
    const chunked = `POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n`;
    // Without a content-length it is read through events, as it ends.
    const { seen } = await send([chunked]);
    assert.equal(seen.buffered, false);
    assert.equal(seen.body!.toString(), "hello world");
  });

  void it("refuses a body over the limit, whole or in parts", async () => {
    const body = "z".repeat(LIMIT + 1);
    const whole = await send([head(body.length) + body]);
    assert.equal(whole.seen.buffered, true);
    assert.equal(whole.seen.body, undefined);
    assert.equal(whole.answer, "too large");
    const parts = await send([head(body.length) + body.slice(0, 10), body.slice(10)]);
    assert.equal(parts.seen.buffered, false);
    assert.equal(parts.seen.body, undefined);
    // A body of exactly the limit is read.
    const exact = await send([head(LIMIT) + body.slice(1)]);
    assert.equal(exact.seen.body!.length, LIMIT);
  });

  void it("reads an answer whole, and rejects one whose connection dies before its end", async () => {
    const upstream = net.createServer((socket) => {
      socket.once("data", (request) => {
        const answer = '{"id":"a","usage":{"input_tokens":1}}';
        if (request.toString().startsWith("POST /cut")) {
          socket.write(`HTTP/1.1 200 OK\r\nContent-Length: ${answer.length}\r\n\r\n${answer.slice(0, 10)}`);
          setImmediate(() => socket.destroy());
        } else socket.end(`HTTP/1.1 200 OK\r\nContent-Length: ${answer.length}\r\nConnection: close\r\n\r\n${answer}`);
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    try {
      const { port: upstreamPort } = upstream.address() as net.AddressInfo;
      const answer = (path: string): Promise<http.IncomingMessage> =>
        new Promise((resolve, reject) => {
          const req = http.request({ host: "127.0.0.1", port: upstreamPort, path, method: "POST", agent: false });
          req.on("response", resolve).on("error", reject).end("{}");
        });
      const whole = await answer("/whole");
      // As the proxy does: read after the await of the response, when a whole answer is complete.
      assert.equal(whole.complete, true);
      assert.equal((await readAll(whole))!.toString(), '{"id":"a","usage":{"input_tokens":1}}');
      await assert.rejects(readAll(await answer("/cut")), { code: "ECONNRESET" });
    } finally {
      await new Promise<void>((resolve) => upstream.close(() => resolve()));
    }
  });
});

void describe("nextChunk", () => {
  /** An upstream writing a chunked answer in the given parts, each once the client has read the one before; `cut` ends the connection after them. */
  async function answer(
    parts: string[],
    cut = false,
  ): Promise<{ response: http.IncomingMessage; next: () => void; close: () => Promise<void> }> {
    let release: () => void = () => undefined;
    const upstream = net.createServer((socket) => {
      socket.once("data", () => {
        socket.write("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
        const write = (i: number): void => {
          if (i === parts.length) {
            if (cut) socket.destroy();
            else socket.end("0\r\n\r\n");
            return;
          }
          socket.write(`${Buffer.byteLength(parts[i]!).toString(16)}\r\n${parts[i]}\r\n`);
          release = () => write(i + 1);
        };
        write(0);
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    const { port } = upstream.address() as net.AddressInfo;
    const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = http.request({ host: "127.0.0.1", port, method: "POST", agent: false });
      req.on("response", resolve).on("error", reject).end("{}");
    });
    return {
      response,
      next: () => release(),
      close: () => new Promise<void>((resolve) => upstream.close(() => resolve())),
    };
  }

  void it("gives each part as it arrives, then null at the end", async () => {
    const { response, next, close } = await answer(["data: 1\n\n", "data: 2\n\n", "data: 3\n\n"]);
    try {
      const read: string[] = [];
      for (;;) {
        const chunk = await nextChunk(response);
        if (chunk === null) break;
        read.push(chunk.toString());
        next();
      }
      assert.equal(read.join(""), "data: 1\n\ndata: 2\n\ndata: 3\n\n");
      assert.equal(await nextChunk(response), null, "still null after the end");
    } finally {
      await close();
    }
  });

  void it("gives what is buffered at once, without a promise", async () => {
    const { response, next, close } = await answer(["data: 1\n\n"]);
    try {
      next();
      // Wait until the answer is whole in the buffer, then read it in one synchronous call.
      while (!response.complete) await new Promise((resolve) => setImmediate(resolve));
      const chunk = nextChunk(response);
      assert.ok(!(chunk instanceof Promise));
      assert.equal(chunk?.toString(), "data: 1\n\n");
      assert.equal(await nextChunk(response), null);
    } finally {
      await close();
    }
  });

  void it("rejects when the connection is cut before the end, waiting or between reads", async () => {
    const waiting = await answer(["data: 1\n\n"], true);
    try {
      assert.equal((await nextChunk(waiting.response))?.toString(), "data: 1\n\n");
      const pending = nextChunk(waiting.response);
      waiting.next();
      await assert.rejects(Promise.resolve(pending), { code: "ECONNRESET" });
    } finally {
      await waiting.close();
    }
    const between = await answer(["data: 1\n\n"], true);
    try {
      assert.equal((await nextChunk(between.response))?.toString(), "data: 1\n\n");
      between.next();
      while (!between.response.destroyed) await new Promise((resolve) => setImmediate(resolve));
      await assert.rejects(Promise.resolve(nextChunk(between.response)), { code: "ECONNRESET" });
    } finally {
      await between.close();
    }
  });
});
