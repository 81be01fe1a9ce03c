// A request body that is not the method's request message is the caller's
// mistake, so it is answered InvalidArgument (HTTP 400 on the Connect
// protocol, grpc-status 3 on gRPC and gRPC-Web), never Internal.
//
// connect-es decodes binary request messages inside its protocol handlers and
// reports bytes that do not parse as `Internal` ("parse binary: ..."), for
// unary calls before any interceptor runs, and it offers no hook to change
// that: the error has no cause and no type of its own, and the serialization
// is private to each handler (connect-es 2.3 and its main branch). So each
// handler's request body is checked on its way in: every complete message is
// decoded as the method's request type with the options connect uses, and one
// that does not decode ends the body with InvalidArgument before connect's
// own parser sees its last byte. Connect answers an error from the body in
// each protocol's own form, with the code it carries.
//
// JSON bodies are left to connect: it already answers them InvalidArgument,
// naming the request type. The price is decoding binary messages twice
// (microseconds for the suite's messages; connect's parse is the second).
import { fromBinary, type DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Compression, UniversalHandler, UniversalServerRequest } from "@connectrpc/connect/protocol";

export interface BodyCheckOptions {
  /** The encodings connect is given (`acceptCompression`), to decompress a message before decoding it. */
  compressions: Compression[];
  /** Connect's `readMaxBytes`: no message is decompressed past it. */
  readMaxBytes: number;
  /**
   * Asked before a body is refused, with the method (`service/Method`) and the
   * authorization header; throws the caller's refusal (Unauthenticated,
   * PermissionDenied). So a caller the access table refuses is told that
   * first, whatever it sent, on every protocol: a streaming call's
   * interceptors run before its body is read, a unary call's after.
   */
  accessCheck: (method: string, authorization: string | null) => Promise<unknown>;
}

/** `handler`, answering a binary body that is not its method's request message with InvalidArgument. */
export function refusingUndecodableBodies(handler: UniversalHandler, options: BodyCheckOptions): UniversalHandler {
  const checked = (request: UniversalServerRequest) => {
    const framing = binaryFraming(request.header.get("content-type"));
    if (!framing || !isByteStream(request.body)) return handler(request);
    const encoding = request.header.get(framing.encodingHeader);
    const check: MessageCheck = {
      method: handler.method,
      compression:
        encoding && encoding !== "identity"
          ? (options.compressions.find((c) => c.name === encoding) ?? "unknown")
          : undefined,
      readMaxBytes: options.readMaxBytes,
      refuse: async (reason) => {
        const method = `${handler.service.typeName}/${handler.method.name}`;
        await options.accessCheck(method, request.header.get("authorization"));
        return new ConnectError(
          `the request body could not be decoded as ${handler.method.input.typeName} (${reason}); send that message in the protocol's binary encoding`,
          Code.InvalidArgument,
        );
      },
    };
    return handler({
      ...request,
      body: framing.enveloped ? checkedEnvelopes(request.body, check) : checkedWhole(request.body, check),
    });
  };
  return Object.assign(checked, {
    protocolNames: handler.protocolNames,
    service: handler.service,
    method: handler.method,
    requestPath: handler.requestPath,
    allowedMethods: handler.allowedMethods,
    supportedContentType: handler.supportedContentType,
  });
}

interface MessageCheck {
  method: DescMethod;
  /** The request's encoding; "unknown" when connect does not accept it (connect refuses the call itself). */
  compression: Compression | "unknown" | undefined;
  readMaxBytes: number;
  refuse(reason: string): Promise<ConnectError>;
}

/**
 * How a binary request body carries its messages, from its content type
 * (connect's own content types; JSON and gRPC-Web's base64 text are not checked).
 */
function binaryFraming(contentType: string | null): { enveloped: boolean; encodingHeader: string } | undefined {
  switch (contentType?.toLowerCase()) {
    case "application/proto":
      return { enveloped: false, encodingHeader: "content-encoding" };
    case "application/connect+proto":
      return { enveloped: true, encodingHeader: "connect-content-encoding" };
    case "application/grpc":
    case "application/grpc+proto":
    case "application/grpc-web":
    case "application/grpc-web+proto":
      return { enveloped: true, encodingHeader: "grpc-encoding" };
    default:
      return undefined;
  }
}

function isByteStream(body: UniversalServerRequest["body"]): body is AsyncIterable<Uint8Array> {
  return typeof body === "object" && body !== null && Symbol.asyncIterator in body;
}

/** A Connect unary body: one message, all of it; connect reads it whole before parsing, so the check runs at its end. */
async function* checkedWhole(body: AsyncIterable<Uint8Array>, check: MessageCheck): AsyncIterable<Uint8Array> {
  const chunks: Uint8Array[] = [];
  for await (const chunk of body) {
    chunks.push(chunk);
    yield chunk;
  }
  const refusal = await checkMessage(concat(chunks), check.compression !== undefined, check);
  if (refusal) throw refusal;
}

/**
 * An enveloped body (gRPC, gRPC-Web, Connect streaming): 1 byte of flags, a
 * 4-byte big-endian length, the message. Each chunk is passed on once the
 * envelopes it completes decode; other flags (end of stream, trailers) are
 * connect's to judge.
 */
async function* checkedEnvelopes(body: AsyncIterable<Uint8Array>, check: MessageCheck): AsyncIterable<Uint8Array> {
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  let size: number | undefined; // of the envelope being received, once its header is in
  for await (const chunk of body) {
    pending.push(chunk);
    pendingBytes += chunk.byteLength;
    for (;;) {
      if (size === undefined && pendingBytes >= 5) {
        const head = pending[0]!.byteLength >= 5 ? pending[0]! : (pending = [concat(pending)])[0]!;
        size = 5 + new DataView(head.buffer, head.byteOffset, 5).getUint32(1);
      }
      if (size === undefined || pendingBytes < size) break;
      const bytes = concat(pending);
      const flags = bytes[0]!;
      const refusal =
        flags === 0 || flags === 1 ? await checkMessage(bytes.subarray(5, size), flags === 1, check) : undefined;
      if (refusal) {
        // What came before it in this chunk goes on, as connect would have taken it; the bad envelope stays one byte short.
        const kept = chunk.byteLength - (bytes.byteLength - size) - 1;
        if (kept > 0) yield chunk.subarray(0, kept);
        throw refusal;
      }
      pending = size < bytes.byteLength ? [bytes.subarray(size)] : [];
      pendingBytes -= size;
      size = undefined;
    }
    yield chunk;
  }
}

/** The refusal for a message that does not decode, or undefined. */
async function checkMessage(
  bytes: Uint8Array,
  compressed: boolean,
  check: MessageCheck,
): Promise<ConnectError | undefined> {
  let message = bytes;
  if (compressed) {
    if (check.compression === undefined)
      return check.refuse("a message is flagged compressed, but the request names no encoding");
    if (check.compression === "unknown") return undefined;
    try {
      message = await check.compression.decompress(bytes, check.readMaxBytes);
    } catch {
      return undefined; // connect decompresses it again and says why it cannot
    }
  }
  try {
    fromBinary(check.method.input, message);
    return undefined;
  } catch (error) {
    return check.refuse(`binary protobuf: ${error instanceof Error ? error.message : String(error)}`);
  }
}

function concat(chunks: Uint8Array[]): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.byteLength, 0));
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}
