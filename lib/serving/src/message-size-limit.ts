// How large a request message a service takes. connect-node reads a message
// up to its `readMaxBytes`, whose default is the most zlib and protobuf-es
// handle (4 GiB): with it, any caller that reaches a port, even one with no
// credential, could make a service hold gigabytes per call, and several calls
// at once. Each service now has a limit fitted to what legitimately reaches
// it (its README says why), raised with one setting, and an oversized message
// is refused as soon as its size is known: from an envelope's header or a
// unary body's Content-Length before its bytes arrive, else on the first
// byte past the limit, and a compressed one on the first byte it would
// decompress past it (undecodable-requests.ts does the counting).
import { Code, ConnectError } from "@connectrpc/connect";
import { envInteger } from "./env-config.js";

/** The setting that raises every service's limit (its configFromEnv reads it with `envMaxMessageBytes`). */
export const MAX_MESSAGE_BYTES_VARIABLE = "OZ0_MAX_MESSAGE_BYTES";

/** gRPC's own default, and what a service takes when it names no limit of its own. */
export const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;

/** The most connect (and zlib's maxOutputLength) accept as `readMaxBytes`. */
const MOST_CONNECT_READS = 0xffffffff;

/** `OZ0_MAX_MESSAGE_BYTES`: a whole number of bytes from 1 to 4 GiB - 1, undefined when unset. */
export function envMaxMessageBytes(env: Readonly<Record<string, string | undefined>>): number | undefined {
  return envInteger(env, MAX_MESSAGE_BYTES_VARIABLE, { min: 1, max: MOST_CONNECT_READS, unit: "bytes" });
}

/** What a refusal tells the log: never a byte of the message. */
export interface OversizedMessage {
  /** `service/Method`. */
  method: string;
  /** Its size when known (an envelope's header, a Content-Length), else undefined: more than the limit arrived. */
  size: number | undefined;
  limit: number;
  /** It grew past the limit while being decompressed. */
  decompressed: boolean;
}

/** The ResourceExhausted a caller gets: the limit, the size, and the setting that raises it. */
export function messageTooLarge(refusal: OversizedMessage): ConnectError {
  const method = refusal.method.slice(refusal.method.lastIndexOf(".") + 1);
  const limit = `this service's limit of ${refusal.limit} bytes`;
  const what = refusal.decompressed
    ? `a request message decompresses to more than ${limit}`
    : refusal.size === undefined
      ? `a request message is over ${limit}`
      : `a request message of ${refusal.size} bytes is over ${limit}`;
  return new ConnectError(
    `${method}: ${what}; send less in one message, or raise ${MAX_MESSAGE_BYTES_VARIABLE} on the service`,
    Code.ResourceExhausted,
  );
}
