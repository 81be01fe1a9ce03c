// A real OpenID Provider on loopback for the console's OIDC log-in tests:
// panva's oidc-provider (certified), with its development log-in and consent
// pages (devInteractions: any password; the accounts are the ones given), one
// public client (no secret, PKCE required, as the console is) and its own
// signing key. Its ID tokens carry `groups`, as an issuer's do when asked. It
// revokes tokens (RFC 7009) and ends its session at the client's asking
// (RP-initiated logout, with a confirmation page), as the console's log-out uses.
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import Provider, { type JWK } from "oidc-provider";

export interface TestOpenIdProvider {
  /** The issuer URL (no trailing slash), as the auth config names it; it answers once `start` was called. */
  issuer: string;
  /** Starts answering as the issuer, with one public client whose redirect URI is `redirectUri`. */
  start(options: {
    clientId: string;
    redirectUri: string;
    /** Where the issuer may send the browser after ending its session. */
    postLogoutRedirectUri: string;
    /** Account id (the `sub`) → its groups. Any other name is refused at log-in. */
    accounts: Record<string, string[]>;
  }): void;
  close(): Promise<void>;
}

/**
 * Listens first, so the issuer URL can go into the orchestrator's auth config
 * before the orchestrator starts, and the client's redirect URI (the
 * orchestrator's address) into the provider once it has.
 */
export async function listenTestOpenIdProvider(): Promise<TestOpenIdProvider> {
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    issuer,
    start(options) {
      const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
      const provider = new Provider(issuer, {
        clients: [
          {
            client_id: options.clientId,
            token_endpoint_auth_method: "none",
            redirect_uris: [options.redirectUri],
            post_logout_redirect_uris: [options.postLogoutRedirectUri],
            grant_types: ["authorization_code", "refresh_token"],
            response_types: ["code"],
          },
        ],
        pkce: { required: () => true },
        jwks: { keys: [{ ...(privateKey.export({ format: "jwk" }) as JWK), kid: "test", alg: "RS256", use: "sig" }] },
        cookies: { keys: [randomBytes(16).toString("hex")] },
        claims: { openid: ["sub", "groups"] },
        // Claims of the openid scope in the ID token itself (the console sends the ID token, not the access token).
        conformIdTokenClaims: false,
        features: { devInteractions: { enabled: true }, revocation: { enabled: true } },
        findAccount: (_ctx, id) => {
          const groups = options.accounts[id];
          return groups ? { accountId: id, claims: () => ({ sub: id, groups }) } : undefined;
        },
      });
      const handle = provider.callback();
      // Koa answers its own errors; the promise only says when the answer ended.
      server.on("request", (req, res) => void handle(req, res));
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
