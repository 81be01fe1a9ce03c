// One TCP port for HTTP/2 cleartext (gRPC, Connect) and HTTP/1.1 (Connect,
// gRPC-Web, plain HTTP): Node's http2.createServer cannot take HTTP/1.1
// without TLS, so each connection is routed by its first bytes.
import http from "node:http";
import http2 from "node:http2";
import net from "node:net";

const HTTP2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/** The streams one HTTP/2 connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS). */
export const MAX_CONCURRENT_STREAMS = 1000;

export type RequestHandler = (
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
) => void;

/**
 * `res.writeHead(status, headers)` on an HTTP/1.1 or an HTTP/2 response. Both
 * take these arguments alike; a call on their union does not type-check,
 * since @types/node gives each its own overloads.
 */
export function writeHead(
  res: http.ServerResponse | http2.Http2ServerResponse,
  status: number,
  headers: http.OutgoingHttpHeaders,
): void {
  (res as http.ServerResponse).writeHead(status, headers);
}

export interface SniffingServer {
  readonly tcp: net.Server;
  readonly h1: http.Server;
  readonly h2: http2.Http2Server;
  /** Stop accepting connections; ask HTTP/2 peers to go away; close idle HTTP/1.1 sockets. */
  stopAccepting(): Promise<void>;
  /** Destroy every open connection. */
  destroyConnections(): void;
}

export interface SniffingServerOptions {
  /**
   * How long a client may take to send a request's headers (and, before that,
   * enough bytes to tell HTTP/2 from HTTP/1.1). A client that stalls is
   * disconnected instead of holding a connection open. Default 10 s.
   */
  headersTimeoutMs?: number;
  /**
   * How long a request's body may take to arrive, on either protocol: a body
   * that stops short is not held forever. Default 120 s.
   */
  requestTimeoutMs?: number;
  /**
   * How long an HTTP/2 session may have no stream open before it is closed;
   * its first stream is due within `headersTimeoutMs` of the connection, as a
   * request's headers are. Default an hour (retire() says why so long).
   */
  idleSessionTimeoutMs?: number;
  /**
   * Requests whose body stays open as long as the call lasts (client- and
   * bidi-streaming RPCs), by path: HTTP/2 gives them no request timeout.
   */
  openEndedRequest?: (path: string) => boolean;
}

export function createSniffingServer(handler: RequestHandler, options: SniffingServerOptions = {}): SniffingServer {
  const headersTimeout = options.headersTimeoutMs ?? 10_000;
  const requestTimeout = options.requestTimeoutMs ?? 120_000;
  const h1 = http.createServer(
    {
      headersTimeout,
      // Node's HTTP/1.1 server takes none shorter than its headers timeout.
      requestTimeout: Math.max(requestTimeout, headersTimeout),
      // Node checks both timeouts on this interval (30 s by default, which let a stalled client stay far past them).
      connectionsCheckingInterval: Math.min(1_000, headersTimeout),
    },
    handler as http.RequestListener,
  );
  h1.keepAliveTimeout = 5_000;
  const openEnded = options.openEndedRequest ?? (() => false);
  // Node's default lets one connection hold 2^32-1 streams at once, each with its buffers: a client
  // without a credential could open them faster than the gate refuses them. A node's sessions, a
  // console's Watches and an orchestrator's calls need far fewer.
  const h2 = http2.createServer({ settings: { maxConcurrentStreams: MAX_CONCURRENT_STREAMS } }, (req, res) => {
    if (!openEnded(req.url)) timeRequestBody(req, res, requestTimeout);
    handler(req, res);
  });
  const sockets = new Set<net.Socket>();
  const sessions = new Set<http2.ServerHttp2Session>();
  const idleSessionTimeout = options.idleSessionTimeoutMs ?? 60 * 60_000;
  h2.on("session", (session) => {
    sessions.add(session);
    // Node's HTTP/2 server keeps a session for as long as its peer does: a
    // client that connected and sent nothing, or went quiet, held one forever
    // (2,000 of them, no credential needed, held 30 MB). Counting its open
    // streams is what tells a quiet session from one holding a long call (a
    // Watch that has nothing to say for minutes), which a timeout on the
    // session's traffic alone would end too.
    let open = 0;
    let idle = setTimeout(() => retire(session), headersTimeout).unref();
    session.on("stream", (stream: http2.ServerHttp2Stream) => {
      open += 1;
      clearTimeout(idle);
      stream.once("close", () => {
        open -= 1;
        if (open === 0 && !session.closed) idle = setTimeout(() => retire(session), idleSessionTimeout).unref();
      });
    });
    session.on("close", () => {
      clearTimeout(idle);
      sessions.delete(session);
    });
  });

  const tcp = net.createServer((socket) => {
    sockets.add(socket);
    // RPCs are small request/response exchanges: Nagle plus delayed ACKs
    // added ~15 ms to a one-event Publish.
    socket.setNoDelay(true);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    let head = Buffer.alloc(0);
    // Until the protocol is known, the socket is ours to time out: a client that sends a few bytes and stops is dropped.
    const sniffing = setTimeout(() => socket.destroy(), headersTimeout);
    sniffing.unref();
    socket.once("close", () => clearTimeout(sniffing));
    const onData = (chunk: Buffer): void => {
      head = Buffer.concat([head, chunk]);
      const n = Math.min(head.length, HTTP2_PREFACE.length);
      const isH2Prefix = head.subarray(0, n).equals(HTTP2_PREFACE.subarray(0, n));
      if (isH2Prefix && head.length < HTTP2_PREFACE.length) return; // need more bytes to decide
      socket.off("data", onData);
      clearTimeout(sniffing);
      // Both servers read what is buffered on the socket before taking it over.
      socket.pause();
      socket.unshift(head);
      if (isH2Prefix) {
        h2.emit("connection", socket);
      } else {
        h1.emit("connection", socket);
        socket.resume();
      }
    };
    socket.on("data", onData);
  });

  // h1 never listens itself (connections reach it from tcp), and Node starts
  // checking headers and request timeouts on its "listening" event: pass it on.
  tcp.once("listening", () => h1.emit("listening"));

  return {
    tcp,
    h1,
    h2,
    async stopAccepting() {
      // Stops the timeout checks started above.
      h1.close(() => undefined);
      const closed = new Promise<void>((resolve) => tcp.close(() => resolve()));
      for (const session of sessions) session.close();
      h1.closeIdleConnections();
      await Promise.race([closed, new Promise((r) => setTimeout(r, 0))]);
    },
    destroyConnections() {
      for (const session of sessions) session.destroy();
      for (const socket of sockets) socket.destroy();
    },
  };
}

/**
 * Closes a quiet HTTP/2 session: a GOAWAY naming the last stream it took, and
 * the streams still open finish. A stream the client sends as the GOAWAY
 * crosses it is refused (REFUSED_STREAM, which HTTP/2 makes safe to retry,
 * though connect-node does not retry it). Node has no way to send nghttp2's
 * shutdown notice (a GOAWAY that still admits every stream, then the real one
 * a round trip later, as gRPC servers do), so the idle time is set past the
 * clients' own: connect-node closes a connection idle for 15 minutes itself,
 * grpc-js after 30.
 */
function retire(session: http2.ServerHttp2Session): void {
  if (!session.closed && !session.destroyed) session.close();
}

/**
 * A request's body that has not arrived whole within `timeoutMs` is answered
 * 408 (or, once an answer began, its stream or connection is cut). Node's
 * HTTP/2 server has no request timeout, and its HTTP/1.1 one
 * (`server.requestTimeout`) is not enforced on a body the handler is still
 * reading: a body one byte short of complete was held for as long as the
 * connection lived.
 */
export function timeRequestBody(
  req: http.IncomingMessage | http2.Http2ServerRequest,
  res: http.ServerResponse | http2.Http2ServerResponse,
  timeoutMs: number,
): void {
  const answer408 = (then: () => void): void => {
    if (res.headersSent) return then();
    writeHead(res, 408, { "content-type": "text/plain", connection: "close" });
    (res as http.ServerResponse).end(
      `the request's body did not arrive within ${timeoutMs} ms; send it whole, or send less\n`,
      then,
    );
  };
  if ("stream" in req) {
    const stream = req.stream;
    if (stream.endAfterHeaders) return;
    const timer = setTimeout(() => {
      // The whole body arrived (whether or not it was read), or the stream is gone.
      if (stream.destroyed || stream.state.remoteClose) return;
      answer408(() => {});
      stream.close(http2.constants.NGHTTP2_CANCEL);
    }, timeoutMs).unref();
    stream.once("close", () => clearTimeout(timer));
    return;
  }
  if (req.complete) return;
  const timer = setTimeout(() => {
    if (req.complete || req.socket.destroyed) return;
    // The connection goes too: the rest of the body would otherwise be read as the next request.
    answer408(() => req.socket.destroy());
  }, timeoutMs).unref();
  // Answered (whatever becomes of the body then) or gone.
  (res as http.ServerResponse).once("close", () => clearTimeout(timer));
}
