// Errors the proxy itself answers, in the body shape of the route's API (its
// wire format's) so the official clients surface the message.
import type http from "node:http";
import type http2 from "node:http2";
import type { ProxyErrorType, WireFormat } from "./wire-formats/wire-format.js";
import { writeHead } from "@oz0/serving";

export type ClientResponse = http.ServerResponse | http2.Http2ServerResponse;

export function sendError(
  res: ClientResponse,
  options: {
    format: WireFormat;
    status: number;
    type: ProxyErrorType;
    message: string;
    operationId?: string;
    /** A refusal the same call gets past later (a budget of bytes in flight): the SDKs retry it after this. */
    retryAfterSeconds?: number;
  },
): void {
  const text = JSON.stringify(options.format.errorBody(options.type, options.message));
  if (res.headersSent) {
    abortResponse(res);
    return;
  }
  writeHead(res, options.status, {
    "content-type": "application/json",
    "content-length": String(Buffer.byteLength(text)),
    // Refusals are final, but for those that pass once other calls end: the official SDKs
    // follow x-should-retry over the status, and retry-after for the wait.
    ...(options.retryAfterSeconds === undefined
      ? { "x-should-retry": "false" }
      : { "x-should-retry": "true", "retry-after": String(options.retryAfterSeconds) }),
    ...(options.operationId ? { "oz0-operation-id": options.operationId } : {}),
  });
  res.end(text);
}

/** Kills the client connection so the client sees a broken stream, not a complete one. */
export function abortResponse(res: ClientResponse): void {
  if ("stream" in res && res.stream) res.stream.close(2 /* NGHTTP2_INTERNAL_ERROR */);
  else (res as http.ServerResponse).destroy();
}
