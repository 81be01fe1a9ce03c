// The client side: every call a service or the CLI makes carries its credential.
import type { Interceptor } from "@connectrpc/connect";

/** Adds `authorization: Bearer <token>` to every call; no header when there is no token. */
export function bearerInterceptor(token: string | undefined | (() => string | undefined)): Interceptor {
  return (next) => async (request) => {
    const value = typeof token === "function" ? token() : token;
    if (value) request.header.set("authorization", `Bearer ${value}`);
    return next(request);
  };
}
