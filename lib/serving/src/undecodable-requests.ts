// A request body that is not the method's request message is the caller's
// mistake, so it is answered InvalidArgument (HTTP 400 on the Connect
// protocol, grpc-status 3 on gRPC and gRPC-Web), never Internal.
//
// connect-es decodes binary request messages inside its protocol handlers and
// reports bytes that do not parse as `Internal` ("parse binary: ..."), for
// unary calls before any interceptor runs, and it offers no hook to change
// that: the error has no cause and no type of its own, and the serialization
// is private to each handler (connect-es 2.3 and its main branch). So each
// handler's request body is decoded on its way in: every complete message is
// decoded as the method's request type with the options connect uses, and one
// that does not decode ends the body with InvalidArgument before connect's
// own parser sees its last byte. Connect answers an error from the body in
// each protocol's own form, with the code it carries.
//
// A message that decodes is not decoded again: connect is handed an empty
// message in its place (an empty envelope; an empty unary body), which it
// parses for next to nothing, and the message decoded here travels in the
// call's context values to `handingOnDecodedMessages`, the first interceptor,
// which puts it where connect's empty one was. Decoding each Publish of the
// events service twice was about 2.8 µs of CPU per event and a quarter of its
// main thread's allocations (issue 24). Where connect would do something
// else with the bytes (a compressed unary body, an envelope connect skips),
// they go on as they came and connect parses them.
//
// The same pass holds every body to the service's message size limit
// (message-size-limit.ts), JSON ones too: an envelope whose header says it is
// larger, or a unary body whose Content-Length does, is refused before any of
// its bytes are read, and one without a declared size on the first byte past
// the limit, so no more than the limit is ever held for a message. Connect's
// own readMaxBytes is the same limit (it is what bounds a compressed JSON
// message's decompression). A caller the access table refuses never gets this
// far: serve()'s request gate refuses it before the body is read.
//
// JSON bodies are otherwise left to connect: it already answers them
// InvalidArgument, naming the request type.
import { fromBinary, type DescMethod, type Message } from "@bufbuild/protobuf";
import { Code, ConnectError, createContextKey, createContextValues, type Interceptor } from "@connectrpc/connect";
import type { Compression, UniversalHandler, UniversalServerRequest } from "@connectrpc/connect/protocol";
import { messageTooLarge, type OversizedMessage } from "./message-size-limit.js";

/**
 * The messages a body's envelopes were decoded to, in their order; undefined
 * for one connect parses itself (it got the bytes as they came).
 */
type DecodedMessages = (Message | undefined)[];

const decodedMessages = createContextKey<DecodedMessages | undefined>(undefined, {
  description: "request messages decoded by @oz0/serving's body check",
});

/** An envelope with no message: what connect parses in place of one decoded here. */
const EMPTY_ENVELOPE = new Uint8Array(5);
const EMPTY_BODY = new Uint8Array(0);

export interface BodyCheckOptions {
  /** The encodings connect is given (`acceptCompression`), to decompress a message before decoding it. */
  compressions: Compression[];
  /** The largest request message, decompressed, in bytes (connect's `readMaxBytes` is the same). */
  maxMessageBytes: number;
  /** Told of each message refused for its size, before the caller is (the service logs it). */
  onOversized?: (refusal: OversizedMessage) => void;
}

/**
 * `handler`, answering a binary body that is not its method's request message
 * with InvalidArgument, and handing each message it decoded on in the call's
 * context values; serve `handingOnDecodedMessages()` as the first interceptor.
 */
export function decodingBinaryBodies(handler: UniversalHandler, options: BodyCheckOptions): UniversalHandler {
  const checked = (request: UniversalServerRequest) => {
    const framing = bodyFraming(request.header.get("content-type"));
    if (!framing || !isByteStream(request.body)) return handler(request);
    const declared = framing.enveloped ? undefined : declaredLength(request.header.get("content-length"));
    // Connect reads no more than a unary JSON body's Content-Length (more is a protocol error), and parses it itself.
    if (!framing.binary && declared !== undefined && declared <= options.maxMessageBytes) return handler(request);
    const encoding = request.header.get(framing.encodingHeader);
    const decoded: DecodedMessages = [];
    const contextValues = request.contextValues ?? createContextValues();
    contextValues.set(decodedMessages, decoded);
    const method = `${handler.service.typeName}/${handler.method.name}`;
    const check: MessageCheck = {
      method: handler.method,
      binary: framing.binary,
      compression:
        encoding && encoding !== "identity"
          ? (options.compressions.find((c) => c.name === encoding) ?? "unknown")
          : undefined,
      maxBytes: options.maxMessageBytes,
      refuse: (reason) =>
        new ConnectError(
          `the request body could not be decoded as ${handler.method.input.typeName} (${reason}); send that message${framing.binary ? " in the protocol's binary encoding" : ""}`,
          Code.InvalidArgument,
        ),
      oversized: (size, decompressed) => {
        const refusal = { method, size, limit: options.maxMessageBytes, decompressed };
        options.onOversized?.(refusal);
        return messageTooLarge(refusal);
      },
      decoded,
    };
    if (framing.enveloped)
      return handler({ ...request, contextValues, body: decodedEnvelopes(request.body, check, framing.endFlag) });
    if (declared !== undefined && declared > check.maxBytes) {
      // Connect would refuse it on its Content-Length itself, without saying what raises the limit.
      const body = refused(() => check.oversized(declared, false));
      return handler({ ...request, header: withoutLength(request.header), contextValues, body });
    }
    if (check.compression !== undefined || !check.binary)
      return handler({ ...request, contextValues, body: checkedWhole(request.body, check) });
    // Connect compares the body with its Content-Length, and it gets an empty one.
    const header = withoutLength(request.header);
    return handler({ ...request, header, contextValues, body: decodedWhole(request.body, check) });
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

/**
 * Puts the messages `decodingBinaryBodies` decoded where connect's empty
 * stand-ins were, so every later interceptor and the handler see them. First
 * in the list: an interceptor before it would see the empty ones.
 */
export function handingOnDecodedMessages(): Interceptor {
  return (next) => (request) => {
    const decoded = request.contextValues.get(decodedMessages);
    if (decoded === undefined) return next(request);
    if (!request.stream) return next({ ...request, message: decoded.shift() ?? request.message });
    return next({ ...request, message: inOrder(request.message, decoded) });
  };
}

async function* inOrder<M>(parsed: AsyncIterable<M>, decoded: DecodedMessages): AsyncIterable<M> {
  // Connect parses each envelope after the check handed it on, so its entry is there.
  for await (const message of parsed) yield (decoded.shift() as M | undefined) ?? message;
}

interface MessageCheck {
  method: DescMethod;
  /** Binary protobuf, decoded here; false for JSON, whose messages are only counted and go on as they came. */
  binary: boolean;
  /** The request's encoding; "unknown" when connect does not accept it (connect refuses the call itself). */
  compression: Compression | "unknown" | undefined;
  /** The service's message size limit. */
  maxBytes: number;
  refuse(reason: string): ConnectError;
  /** The refusal of a message of `size` bytes (undefined: more than the limit arrived), logged. */
  oversized(size: number | undefined, decompressed: boolean): ConnectError;
  /** Where each envelope's message goes, in order. */
  decoded: DecodedMessages;
}

/**
 * How a request body carries its messages, from its content type (connect's
 * own content types; connect refuses any other without reading the body), and
 * the flag of an envelope connect skips in it (end of stream, trailers)
 * rather than parses.
 */
function bodyFraming(contentType: string | null): Framing | undefined {
  return FRAMINGS.get(contentType?.toLowerCase().replace(/;\s*charset=utf-?8$/, "") ?? "");
}

interface Framing {
  enveloped: boolean;
  binary: boolean;
  encodingHeader: string;
  endFlag?: number;
}

const CONNECT_UNARY = { enveloped: false, encodingHeader: "content-encoding" };
const CONNECT_STREAM = { enveloped: true, encodingHeader: "connect-content-encoding", endFlag: 0b10 };
const GRPC = { enveloped: true, encodingHeader: "grpc-encoding" };
const GRPC_WEB = { enveloped: true, encodingHeader: "grpc-encoding", endFlag: 0x80 };
/** gRPC-Web's base64 text is not among them: connect does not serve it. */
const FRAMINGS = new Map<string, Framing>([
  ["application/proto", { ...CONNECT_UNARY, binary: true }],
  ["application/json", { ...CONNECT_UNARY, binary: false }],
  ["application/connect+proto", { ...CONNECT_STREAM, binary: true }],
  ["application/connect+json", { ...CONNECT_STREAM, binary: false }],
  ["application/grpc", { ...GRPC, binary: true }],
  ["application/grpc+proto", { ...GRPC, binary: true }],
  ["application/grpc+json", { ...GRPC, binary: false }],
  ["application/grpc-web", { ...GRPC_WEB, binary: true }],
  ["application/grpc-web+proto", { ...GRPC_WEB, binary: true }],
  ["application/grpc-web+json", { ...GRPC_WEB, binary: false }],
]);

/** A Content-Length header's value, undefined when absent or not a plain number. */
function declaredLength(header: string | null): number | undefined {
  return header !== null && /^\d+$/.test(header) ? Number(header) : undefined;
}

function withoutLength(headers: Headers): Headers {
  const header = new Headers(headers);
  header.delete("content-length");
  return header;
}

/**
 * A body that ends in `error()` before a byte of the request's own is read.
 * The error is made when connect first reads the body, after its request
 * gate: a caller the access table refuses never gets this far, so its
 * Content-Length puts nothing in the log.
 */
// eslint-disable-next-line require-yield -- it only throws, as a body connect reads
async function* refused(error: () => ConnectError): AsyncIterable<Uint8Array> {
  throw error();
}

function isByteStream(body: UniversalServerRequest["body"]): body is AsyncIterable<Uint8Array> {
  return typeof body === "object" && body !== null && Symbol.asyncIterator in body;
}

/** A Connect unary body, uncompressed: one message, all of it; connect gets an empty body once it decoded. */
async function* decodedWhole(body: AsyncIterable<Uint8Array>, check: MessageCheck): AsyncIterable<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.byteLength;
    if (size > check.maxBytes) throw check.oversized(undefined, false);
    chunks.push(chunk);
  }
  const message = await decodeMessage(concat(chunks), false, check);
  if (message instanceof ConnectError) throw message;
  check.decoded.push(message);
  yield EMPTY_BODY;
}

/**
 * A Connect unary body connect parses itself (compressed, or JSON): passed on
 * as it comes, counted; a compressed binary one is also decoded whole here
 * (connect decompresses it again).
 */
async function* checkedWhole(body: AsyncIterable<Uint8Array>, check: MessageCheck): AsyncIterable<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.byteLength;
    if (size > check.maxBytes) throw check.oversized(undefined, false);
    if (check.binary) chunks.push(chunk);
    yield chunk;
  }
  if (!check.binary) return;
  const message = await decodeMessage(concat(chunks), true, check);
  if (message instanceof ConnectError) throw message;
}

/**
 * An enveloped body (gRPC, gRPC-Web, Connect streaming): 1 byte of flags, a
 * 4-byte big-endian length, the message. An envelope larger than the limit is
 * refused once its header is in. Each other is handed on once complete:
 * empty, its message decoded here; as it came when connect skips it
 * (`endFlag`), judges it itself (a compression connect does not take) or
 * parses it (JSON); refused, with any other flags.
 */
async function* decodedEnvelopes(
  body: AsyncIterable<Uint8Array>,
  check: MessageCheck,
  endFlag: number | undefined,
): AsyncIterable<Uint8Array> {
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  let size: number | undefined; // of the envelope being received, once its header is in
  for await (const chunk of body) {
    pending.push(chunk);
    pendingBytes += chunk.byteLength;
    const out: Uint8Array[] = [];
    for (;;) {
      if (size === undefined && pendingBytes >= 5) {
        const head = pending[0]!.byteLength >= 5 ? pending[0]! : (pending = [concat(pending)])[0]!;
        size = 5 + new DataView(head.buffer, head.byteOffset, 5).getUint32(1);
        if (size - 5 > check.maxBytes) {
          // The envelopes before it go on, as connect would have taken them; none of its bytes is held.
          for (const good of out) yield good;
          throw check.oversized(size - 5, false);
        }
      }
      if (size === undefined || pendingBytes < size) break;
      const bytes = concat(pending);
      const envelope = bytes.subarray(0, size);
      const flags = envelope[0]!;
      const refusal = strangeFlags(flags, endFlag, check);
      if (refusal !== undefined) {
        // The envelopes before it go on, as connect would have taken them; the bad one never does.
        for (const good of out) yield good;
        throw refusal;
      }
      if (endFlag !== undefined && (flags & endFlag) === endFlag) {
        out.push(envelope);
      } else {
        const message = await decodeMessage(envelope.subarray(5), flags === 1, check);
        if (message instanceof ConnectError) {
          for (const good of out) yield good;
          throw message;
        }
        check.decoded.push(message);
        out.push(message === undefined ? envelope : EMPTY_ENVELOPE);
      }
      pending = size < bytes.byteLength ? [bytes.subarray(size)] : [];
      pendingBytes -= size;
      size = undefined;
    }
    if (out.length === 1) yield out[0]!;
    else if (out.length > 1) yield concat(out);
  }
  // A body cut short inside an envelope: connect says so.
  if (pendingBytes > 0) yield concat(pending);
}

/**
 * The refusal of an envelope whose flags are neither a message's (0, or 1:
 * compressed) nor the protocol's end of stream that connect skips (alone, or
 * compressed in an encoding connect takes), else undefined. Connect would
 * parse or decompress such an envelope itself and answer any failure Internal,
 * and before the access check on a unary call.
 */
function strangeFlags(flags: number, endFlag: number | undefined, check: MessageCheck): ConnectError | undefined {
  if (flags === 0 || flags === 1) return undefined;
  if (
    endFlag !== undefined &&
    (flags === endFlag || (flags === (endFlag | 1) && typeof check.compression === "object"))
  )
    return undefined;
  const hex = `0x${flags.toString(16).padStart(2, "0")}`;
  return check.refuse(
    `an envelope is flagged ${hex}; a request message's flags are 0, or 1 when compressed in the encoding the request names`,
  );
}

/**
 * The message `bytes` decode to, undefined when connect is left to judge them
 * (JSON, a compression it does not take, or cannot undo), or the refusal.
 */
async function decodeMessage(
  bytes: Uint8Array,
  compressed: boolean,
  check: MessageCheck,
): Promise<Message | ConnectError | undefined> {
  let message = bytes;
  if (compressed) {
    if (check.compression === undefined)
      return check.refuse("a message is flagged compressed, but the request names no encoding");
    // Connect decompresses a JSON message itself, to its readMaxBytes: the same limit.
    if (check.compression === "unknown" || !check.binary) return undefined;
    try {
      // Stops on the first byte past the limit: a small message that inflates is never held whole.
      message = await check.compression.decompress(bytes, check.maxBytes);
    } catch (error) {
      if (error instanceof ConnectError && error.code === Code.ResourceExhausted)
        return check.oversized(undefined, true);
      return undefined; // connect decompresses it again and says why it cannot
    }
  } else if (!check.binary) return undefined;
  try {
    return fromBinary(check.method.input, message);
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
