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

export function describeError(error: unknown, target: string): string {
  if (error instanceof CliError) return error.message;
  if (error instanceof ConnectError) {
    const cause = String((error.cause as Error | undefined)?.message ?? error.rawMessage);
    if (error.code === Code.Unavailable || /ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ECONNRESET/.test(cause)) {
      return `cannot reach the orchestrator at ${target} (${/ECONNREFUSED/.test(cause) ? "connection refused" : error.rawMessage}): start it with \`oz0 dev\`, or unset OZ0_URL to use the embedded stack`;
    }
    if (error.code === Code.Internal) return `the orchestrator failed: ${error.rawMessage}`;
    return error.rawMessage;
  }
  if (error instanceof Error) return error.message;
  return String(error);
}
