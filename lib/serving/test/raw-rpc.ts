// Raw RPCs for the serving tests: envelopes written and read by hand, gRPC
// over node:http2, gRPC-Web and Connect over fetch (HTTP/1.1), so a test
// sends exactly the bytes it means to, however malformed.
import { connect as http2Connect, type ClientHttp2Session, type ClientHttp2Stream } from "node:http2";

export function envelope(message: Uint8Array, flags = 0): Uint8Array {
  const out = new Uint8Array(5 + message.byteLength);
  out[0] = flags;
  new DataView(out.buffer).setUint32(1, message.byteLength);
  out.set(message, 5);
  return out;
}

export function envelopes(bytes: Uint8Array): { flags: number; data: Uint8Array }[] {
  const out: { flags: number; data: Uint8Array }[] = [];
  for (let at = 0; at + 5 <= bytes.byteLength;) {
    const size = new DataView(bytes.buffer, bytes.byteOffset + at, 5).getUint32(1);
    out.push({ flags: bytes[at]!, data: bytes.subarray(at + 5, at + 5 + size) });
    at += 5 + size;
  }
  return out;
}

export interface GrpcAnswer {
  status: number;
  message: string;
  messages: Uint8Array[];
}

/**
 * A gRPC call on `session`: `body` is written, and the request is ended only
 * when `end` (a stream left open shows the answer came before the rest of a body).
 */
export function grpcOn(
  session: ClientHttp2Session,
  path: string,
  body: Uint8Array[],
  options: { headers?: Record<string, string>; end?: boolean } = {},
): { stream: ClientHttp2Stream; answer: Promise<GrpcAnswer> } {
  const stream = session.request({
    ":method": "POST",
    ":path": path,
    "content-type": "application/grpc",
    te: "trailers",
    ...options.headers,
  });
  const answer = new Promise<GrpcAnswer>((resolve, reject) => {
    const received: Buffer[] = [];
    let fields: Record<string, unknown> = {};
    stream.on("response", (h) => (fields = { ...h }));
    stream.on("trailers", (t) => (fields = { ...fields, ...t }));
    stream.on("data", (chunk: Buffer) => received.push(chunk));
    stream.on("error", reject);
    stream.on("close", () =>
      resolve({
        status: Number(fields["grpc-status"]),
        message: decodeURIComponent(String(fields["grpc-message"] ?? "")),
        messages: envelopes(Buffer.concat(received)).map((e) => e.data),
      }),
    );
  });
  for (const chunk of body) stream.write(chunk);
  if (options.end ?? true) stream.end();
  return { stream, answer };
}

export async function grpc(url: string, path: string, body: Uint8Array[], headers: Record<string, string> = {}) {
  const session = http2Connect(url);
  try {
    return await grpcOn(session, path, body, { headers }).answer;
  } finally {
    session.close();
  }
}

/** The status of a gRPC-Web call over HTTP/1.1 (in the trailer envelope, or the headers). */
export async function grpcWeb(url: string, path: string, body: Uint8Array, headers: Record<string, string> = {}) {
  const response = await fetch(url + path, {
    method: "POST",
    headers: { "content-type": "application/grpc-web+proto", ...headers },
    body,
  });
  const trailer = envelopes(new Uint8Array(await response.arrayBuffer())).find((e) => e.flags & 0x80);
  const fields = Object.fromEntries(
    new TextDecoder()
      .decode(trailer?.data)
      .split("\r\n")
      .filter(Boolean)
      .map((line) => [line.slice(0, line.indexOf(":")).toLowerCase(), line.slice(line.indexOf(":") + 1).trim()]),
  );
  return {
    status: Number(fields["grpc-status"] ?? response.headers.get("grpc-status")),
    message: decodeURIComponent(fields["grpc-message"] ?? response.headers.get("grpc-message") ?? ""),
  };
}

export async function connectUnary(
  url: string,
  path: string,
  body: Uint8Array | string,
  headers: Record<string, string> = {},
): Promise<{ http: number; code?: string; message?: string }> {
  const response = await fetch(url + path, {
    method: "POST",
    headers: { "content-type": "application/proto", ...headers },
    body,
  });
  const text = await response.text();
  return { http: response.status, ...(response.ok ? {} : (JSON.parse(text) as { code: string; message: string })) };
}

/** A Connect streaming call's end-of-stream error (HTTP/1.1). */
export async function connectStream(url: string, path: string, body: Uint8Array, headers: Record<string, string> = {}) {
  const response = await fetch(url + path, {
    method: "POST",
    headers: { "content-type": "application/connect+proto", ...headers },
    body,
  });
  const end = envelopes(new Uint8Array(await response.arrayBuffer())).find((e) => e.flags & 0x02);
  return (JSON.parse(new TextDecoder().decode(end?.data)) as { error?: { code: string; message: string } }).error;
}
