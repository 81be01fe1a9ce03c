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
      if (error instanceof ConnectError) throw error;
      const ref = randomUUID().slice(0, 8);
      logger.error({ err: error, ref, procedure: request.method.name }, "unexpected error in handler");
      throw new ConnectError(
        `internal error (ref ${ref}); the service log has the details`,
        Code.Internal,
        undefined,
        undefined,
        error,
      );
    }
  };
}
