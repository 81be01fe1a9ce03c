// One HTTP request to a provider over pooled keep-alive connections. The
// provider SDKs are not used here: they retry on their own, and the proxy's
// retry loop must be the only one.
import http from "node:http";
import https from "node:https";

// noDelay: a request is written at once, and nothing should wait on Nagle's algorithm. The agent passes its
// options on to the socket's connect, which takes noDelay (@types/node's AgentOptions does not list it).
const agentOptions = { keepAlive: true, maxSockets: 256, maxFreeSockets: 64, noDelay: true };
const httpAgent = new http.Agent(agentOptions);
const httpsAgent = new https.Agent(agentOptions);

/** Pooled sockets already switched to noDelay (one syscall per connection, not per request). */
const noDelaySockets = new WeakSet<object>();

export interface UpstreamRequest {
  /** The provider's base URL (its scheme, host and port count; a path in it does not, as with `new URL(path, baseUrl)`). */
  baseUrl: string;
  /** The path and query, from `/`. */
  path: string;
  headers: Record<string, string>;
  body: Buffer;
}

/** Where a base URL's requests go, as `http.request` takes it. */
interface Origin {
  secure: boolean;
  hostname: string;
  port: number | undefined;
  auth: string | undefined;
}

/**
 * Per base URL (a few): a URL object made and taken apart again for every
 * request (`new URL(path, baseUrl)`, then Node's `urlToHttpOptions`) was a
 * step of every request's way out.
 */
const origins = new Map<string, Origin>();

function originOf(baseUrl: string): Origin {
  let origin = origins.get(baseUrl);
  if (!origin) {
    const url = new URL(baseUrl);
    origin = {
      secure: url.protocol === "https:",
      // As urlToHttpOptions gives them: an IPv6 host without brackets, credentials decoded.
      hostname: url.hostname.replace(/^\[(.*)\]$/, "$1"),
      port: url.port ? Number(url.port) : undefined,
      auth:
        url.username || url.password
          ? `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`
          : undefined,
    };
    origins.set(baseUrl, origin);
  }
  return origin;
}

/** A request sent upstream. */
export interface UpstreamCall {
  /** Resolves with the response once its headers arrived; rejects when no response came (or it was aborted first). */
  response: Promise<http.IncomingMessage>;
  /**
   * Stops the request and its response (the client went away, the budget ran
   * out, the attempt timed out); nothing once the response has ended. A
   * function rather than an AbortSignal: Node's signal plumbing costs more
   * per request than the rest of sending it.
   */
  abort(): void;
}

export function sendUpstream(request: UpstreamRequest): UpstreamCall {
  const origin = originOf(request.baseUrl);
  const options: http.RequestOptions = {
    hostname: origin.hostname,
    path: request.path,
    method: "POST",
    agent: origin.secure ? httpsAgent : httpAgent,
    // Object.assign, not a spread: on Node 20 a spread copy with a field more costs about 1 µs.
    headers: Object.assign({}, request.headers, { "content-length": String(request.body.length) }),
  };
  if (origin.port !== undefined) options.port = origin.port;
  if (origin.auth !== undefined) options.auth = origin.auth;
  const req = (origin.secure ? https : http).request(options);
  const response = new Promise<http.IncomingMessage>((resolve, reject) => {
    req.once("socket", (socket) => {
      if (noDelaySockets.has(socket)) return;
      noDelaySockets.add(socket);
      socket.setNoDelay(true);
    });
    req.once("response", resolve);
    req.once("error", reject);
  });
  req.end(request.body);
  return {
    response,
    abort: () =>
      void req.destroy(
        Object.assign(new Error("the request upstream was aborted"), { name: "AbortError", code: "ABORT_ERR" }),
      ),
  };
}

/**
 * Whether `bytes` more of a body being read may be held (the bytes-in-flight
 * budgets); false stops the read, which then resolves undefined.
 */
export type ChargeBytes = (bytes: number) => boolean;

/**
 * Reads a whole body: undefined when it is larger than `maxBytes` or `charge`
 * refuses a part of it (the rest is read and dropped, not held). Rejects when
 * the connection dies before its end.
 * Events rather than `for await`: the async iterator costs a promise per chunk.
 */
export function readAll(
  stream: NodeJS.ReadableStream & { readonly complete?: boolean },
  maxBytes = Number.POSITIVE_INFINITY,
  charge?: ChargeBytes,
): Promise<Buffer | undefined> {
  const arrived = bodyArrived(stream, maxBytes, charge);
  if (arrived !== NOT_ARRIVED) return Promise.resolve(arrived);
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > maxBytes || (charge !== undefined && !charge(chunk.length))) {
        cleanup();
        stream.resume();
        resolve(undefined);
        return;
      }
      parts.push(chunk);
    };
    const onEnd = (): void => {
      cleanup();
      resolve(Buffer.concat(parts));
    };
    const onError = (error: Error): void => {
      cleanup();
      reject(error);
    };
    const onClose = (): void => {
      // A response whose connection closed before its end never emits `end`.
      if (stream.complete === false)
        onError(Object.assign(new Error("the connection closed before the body ended"), { code: "ECONNRESET" }));
    };
    function cleanup(): void {
      stream.off("data", onData);
      stream.off("end", onEnd);
      stream.off("error", onError);
      stream.off("close", onClose);
    }
    stream.on("data", onData);
    stream.on("end", onEnd);
    stream.on("error", onError);
    stream.on("close", onClose);
  });
}

const NOT_ARRIVED = Symbol("not arrived");

/**
 * The body of an HTTP/1.1 message that arrived whole with its headers (a
 * model call's request, most whole answers), taken from the stream's buffer
 * at once. Through `data` and `end` events the same bytes took a resume, a
 * tick and two events more, and for a request waited for the parser's end
 * of message besides: 30–50 µs of a call one at a time on the loaded bench
 * machine (bench/README.md, issue 24). An answer is whole once the code
 * awaiting it runs (`complete`); a request's end of message comes after its
 * handler's first await, so its body is whole when the buffer holds its
 * `content-length`. Undefined when larger than `maxBytes` or refused by
 * `charge`; NOT_ARRIVED when
 * the body is still arriving, already being read, or HTTP/2 (an HTTP/2
 * request is `complete` when aborted too, with part of its body buffered):
 * `readAll` reads those through events.
 */
function bodyArrived(
  stream: NodeJS.ReadableStream,
  maxBytes: number,
  charge: ChargeBytes | undefined,
): Buffer | undefined | typeof NOT_ARRIVED {
  if (!(stream instanceof http.IncomingMessage) || stream.readableFlowing !== null) return NOT_ARRIVED;
  const length = stream.readableLength;
  const complete = stream.complete;
  if (!complete) {
    const declared = stream.headers["content-length"];
    if (declared === undefined || stream.headers["transfer-encoding"] !== undefined || Number(declared) !== length)
      return NOT_ARRIVED;
  }
  if (length > maxBytes || (charge !== undefined && !charge(length))) {
    stream.resume();
    return undefined;
  }
  // Paused, `read()` returns everything buffered as one Buffer (null when empty), and ends a
  // complete stream; one whose end of message is still to be parsed flows to its end once it is
  // (its `end` frees a pooled connection and lets the server take the next request, as before).
  const body = stream.read() as Buffer | null;
  if (!complete) stream.resume();
  return body ?? Buffer.alloc(0);
}

/**
 * The next part of a response's body, for a stream read as it arrives:
 * everything buffered at once (no promise when something is), else what
 * comes next; null at the body's end. Rejects when the connection dies (or
 * the request is aborted) before the end. Not Readable's async iterator:
 * making it and awaiting its first chunk cost about 40 µs of a streamed call
 * one at a time (bench/README.md, issue 24), and a stream that came in one
 * go waits for nothing here. Leaves the stream paused: `discard` reads what
 * a caller leaves.
 */
export function nextChunk(stream: http.IncomingMessage): Buffer | null | Promise<Buffer | null> {
  const chunk = stream.read() as Buffer | null;
  if (chunk !== null || stream.readableEnded) return chunk;
  return new Promise((resolve, reject) => {
    const settle = (): void => {
      const next = stream.read() as Buffer | null;
      if (next !== null) done(() => resolve(next));
      else if (stream.readableEnded) done(() => resolve(null));
    };
    const onEnd = (): void => done(() => resolve(null));
    const onError = (error: Error): void => done(() => reject(error));
    const onClose = (): void => {
      // A response whose connection closed before its end never emits `end` (and emits no
      // `error` when it had no listener as it was destroyed: between two reads).
      if (stream.complete) onEnd();
      else onError(Object.assign(new Error("the connection closed before the body ended"), { code: "ECONNRESET" }));
    };
    function done(then: () => void): void {
      stream.off("readable", settle);
      stream.off("end", onEnd);
      stream.off("error", onError);
      stream.off("close", onClose);
      then();
    }
    stream.on("readable", settle);
    stream.on("end", onEnd);
    stream.on("error", onError);
    stream.on("close", onClose);
    if (stream.destroyed) onClose();
  });
}

/** Reads and discards a body so the connection can be reused. */
export function discard(response: http.IncomingMessage): void {
  response.on("error", () => {});
  response.resume();
}
