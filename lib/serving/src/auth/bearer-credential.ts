// The client side: every call a service or the CLI makes carries its credential.
import type { Interceptor } from "@connectrpc/connect";
import type { AuthSettings } from "./authenticator.js";
import type { ServiceName } from "./principal.js";

/** The credential a service sends to an audience: the one for that audience alone when it has one, else its own. */
export function callerToken(settings: AuthSettings | undefined, audience: ServiceName): string | undefined {
  return settings?.audienceTokens?.[audience] ?? settings?.serviceToken;
}

/** Adds `authorization: Bearer <token>` to every call; no header when there is no token. */
export function bearerInterceptor(token: string | undefined | (() => string | undefined)): Interceptor {
  return (next) => async (request) => {
    const value = typeof token === "function" ? token() : token;
    if (value) request.header.set("authorization", `Bearer ${value}`);
    return next(request);
  };
}
