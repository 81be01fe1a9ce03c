#!/usr/bin/env node
// Container HEALTHCHECK: asks grpc.health.v1.Health/Check over h2c (gRPC on
// cleartext HTTP/2), with nothing but Node's own http2, so it runs in every
// image before and without any dependency.
//
//   node healthcheck.mjs [service] [port]
//
// service: "readiness" (default), "liveness", "" or a served service name.
// port: default $OZ0_PORT. Host: $OZ0_HEALTHCHECK_HOST or 127.0.0.1.
// Exit 0 when the answer is SERVING, 1 otherwise (any error, a timeout, an
// unknown service, NOT_SERVING), with one line on stderr saying why.
import http2 from "node:http2";

const service = process.argv[2] ?? process.env.OZ0_HEALTHCHECK_SERVICE ?? "readiness";
const port = Number(process.argv[3] ?? process.env.OZ0_PORT);
const host = process.env.OZ0_HEALTHCHECK_HOST ?? "127.0.0.1";
const timeoutMs = Number(process.env.OZ0_HEALTHCHECK_TIMEOUT_MS ?? 3000);
const SERVING = 1;

function fail(reason) {
  process.stderr.write(`healthcheck ${service || '""'}: ${reason}\n`);
  process.exit(1);
}

if (!Number.isInteger(port) || port <= 0 || port > 65535) fail("no port: pass one or set OZ0_PORT");

/** Protobuf varint. */
function varint(n) {
  const out = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return out;
}

// HealthCheckRequest { string service = 1; } in one length-prefixed gRPC frame.
const name = Buffer.from(service, "utf8");
const message = name.length > 0 ? Buffer.from([0x0a, ...varint(name.length), ...name]) : Buffer.alloc(0);
const frame = Buffer.alloc(5 + message.length);
frame.writeUInt8(0, 0);
frame.writeUInt32BE(message.length, 1);
message.copy(frame, 5);

/** HealthCheckResponse { ServingStatus status = 1; } → status (0 when absent). */
function parseStatus(body) {
  if (body.length < 5) return 0;
  const length = body.readUInt32BE(1);
  const msg = body.subarray(5, 5 + length);
  let i = 0;
  let status = 0;
  while (i < msg.length) {
    const tag = msg[i++];
    const wire = tag & 7;
    let value = 0;
    let shift = 0;
    if (wire === 0) {
      for (;;) {
        const b = msg[i++];
        value += (b & 0x7f) * 2 ** shift;
        shift += 7;
        if (!(b & 0x80) || i >= msg.length) break;
      }
      if (tag >> 3 === 1) status = value;
    } else if (wire === 2) {
      let len = 0;
      for (;;) {
        const b = msg[i++];
        len += (b & 0x7f) * 2 ** shift;
        shift += 7;
        if (!(b & 0x80) || i >= msg.length) break;
      }
      i += len;
    } else {
      break;
    }
  }
  return status;
}

const timer = setTimeout(() => fail(`no answer within ${timeoutMs} ms`), timeoutMs);
const session = http2.connect(`http://${host}:${port}`);
session.on("error", (error) => fail(error.message));
const request = session.request({
  ":method": "POST",
  ":path": "/grpc.health.v1.Health/Check",
  "content-type": "application/grpc+proto",
  te: "trailers",
});
const chunks = [];
let grpcStatus;
let grpcMessage = "";
request.on("response", (headers) => {
  if (headers["grpc-status"] !== undefined) grpcStatus = Number(headers["grpc-status"]);
  if (headers["grpc-message"]) grpcMessage = decodeURIComponent(String(headers["grpc-message"]));
});
request.on("trailers", (trailers) => {
  if (trailers["grpc-status"] !== undefined) grpcStatus = Number(trailers["grpc-status"]);
  if (trailers["grpc-message"]) grpcMessage = decodeURIComponent(String(trailers["grpc-message"]));
});
request.on("data", (chunk) => chunks.push(chunk));
request.on("error", (error) => fail(error.message));
request.on("end", () => {
  clearTimeout(timer);
  session.close();
  if (grpcStatus !== 0) fail(`grpc-status ${grpcStatus ?? "missing"}${grpcMessage ? `: ${grpcMessage}` : ""}`);
  const status = parseStatus(Buffer.concat(chunks));
  if (status !== SERVING) fail(`status ${status} (want SERVING)`);
  process.exit(0);
});
request.end(frame);
