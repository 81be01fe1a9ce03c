// Turn anything a command throws into one line for a person: what happened
// and what to do. Never a stack trace (OZ0_DEBUG=1 prints it).
import { Code, ConnectError } from "@connectrpc/connect";

export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 1) {
    super(message);
    this.name = "CliError";
    this.exitCode = exitCode;
  }
}

/** Where the failed command was going: `mode` is how it was found (connection.ts), absent before that. */
export interface ErrorTarget {
  target: string;
  mode?: "url" | "login" | "dev" | "embedded" | undefined;
}

/**
 * What to do about an orchestrator that did not answer, by how it was found. Under `oz0 dev` a refused
 * connection is most often its supervisor restarting the orchestrator; telling that operator to start
 * `oz0 dev` or to unset an OZ0_URL they never set sent them the wrong way.
 */
function unreachableAdvice(mode: ErrorTarget["mode"]): string {
  switch (mode) {
    case "url":
      return "check that it runs at that address, or unset OZ0_URL to use the stack of `oz0 dev` (or an embedded one)";
    case "login":
      return "it may be restarting: try again in a moment; check that it runs, or `oz0 logout` to use a local stack";
    case "dev":
      return "it may be restarting (`oz0 dev` restarts it when it stops): try again in a moment, and if it stays down look at the `oz0 dev` terminal";
    default:
      return "it may be restarting: try again in a moment";
  }
}

/**
 * Whether a call failed before the orchestrator answered: no connection, a reset, or something in between (an
 * ingress answering 502 or 503 while the orchestrator restarts, with headers but no gRPC status). An answer of the
 * orchestrator's own carries a gRPC status, and when it is Unavailable it says itself what is (the LLM proxy it could
 * not reach, its shutdown): prefixing that with "could not reach the orchestrator" sent operators to the wrong service.
 */
function failedInTransit(error: ConnectError, cause: string): boolean {
  if (error.metadata.has("grpc-status") || (error.metadata.get("content-type") ?? "").startsWith("application/grpc"))
    return false;
  return error.code === Code.Unavailable || /ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ECONNRESET/.test(cause);
}

export function describeError(error: unknown, where: ErrorTarget): string {
  if (error instanceof CliError) return error.message;
  if (error instanceof ConnectError) {
    const cause = String((error.cause as Error | undefined)?.message ?? error.rawMessage);
    if (failedInTransit(error, cause)) {
      return `could not reach the orchestrator at ${where.target} (${/ECONNREFUSED/.test(cause) ? "connection refused" : error.rawMessage}): ${unreachableAdvice(where.mode)}`;
    }
    if (error.code === Code.Internal) return `the orchestrator failed: ${error.rawMessage}`;
    return error.rawMessage;
  }
  if (error instanceof Error) return error.message;
  return String(error);
}
