// Errors the proxy itself answers, in the body shape of the route's API so
// the official clients surface the message.
import type http from "node:http";
import type http2 from "node:http2";

export type Wire = "anthropic" | "openai";
export type ClientResponse = http.ServerResponse | http2.Http2ServerResponse;

/** `budget_exhausted` is the type a session ends on. */
export type ProxyErrorType =
  | "authentication_error"
  | "permission_error"
  | "budget_exhausted"
  | "invalid_request_error"
  | "not_found_error"
  | "api_error";

export function errorBody(wire: Wire, type: ProxyErrorType, message: string): unknown {
  return wire === "anthropic"
    ? { type: "error", error: { type, message } }
    : { error: { message, type, code: type, param: null } };
}

export function sendError(res: ClientResponse, options: { wire: Wire; status: number; type: ProxyErrorType; message: string; operationId?: string }): void {
  const text = JSON.stringify(errorBody(options.wire, options.type, options.message));
  if (res.headersSent) {
    abortResponse(res);
    return;
  }
  res.writeHead(options.status, {
    "content-type": "application/json",
    "content-length": String(Buffer.byteLength(text)),
    // Refusals are final: tell the official SDKs not to retry them.
    "x-should-retry": "false",
    ...(options.operationId ? { "oz0-operation-id": options.operationId } : {}),
  });
  res.end(text);
}

/** The stream event that ends a stream cut off by the proxy. */
export function streamErrorEvent(wire: Wire, type: ProxyErrorType, message: string): string {
  const body = JSON.stringify(errorBody(wire, type, message));
  return wire === "anthropic" ? `event: error\ndata: ${body}\n\n` : `data: ${body}\n\n`;
}

/** Kills the client connection so the client sees a broken stream, not a complete one. */
export function abortResponse(res: ClientResponse): void {
  if ("stream" in res && res.stream) res.stream.close(2 /* NGHTTP2_INTERNAL_ERROR */);
  else (res as http.ServerResponse).destroy();
}
