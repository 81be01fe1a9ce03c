// Anything a handler throws that is not a ConnectError becomes `Internal`
// with a short reference; the original goes to the log (and stays as `cause`),
// never into the message a caller sees.
import { randomUUID } from "node:crypto";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type { Logger } from "./logger.js";

export function unexpectedErrorInterceptor(logger: Logger): Interceptor {
  return (next) => async (request) => {
    try {
      return await next(request);
    } catch (error) {
      throw hiddenUnexpected(error, logger, request.method.name);
    }
  };
}

/** A ConnectError as it is; anything else logged, and `Internal` with its reference. */
export function hiddenUnexpected(error: unknown, logger: Logger, procedure: string): ConnectError {
  if (error instanceof ConnectError) return error;
  const ref = randomUUID().slice(0, 8);
  logger.error({ err: error, ref, procedure }, "unexpected error in handler");
  return new ConnectError(
    `internal error (ref ${ref}); the service log has the details`,
    Code.Internal,
    undefined,
    undefined,
    error,
  );
}
