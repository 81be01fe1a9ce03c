// Logging in with the OIDC issuer the orchestrator is configured with:
// the authorization-code flow with PKCE (S256), `state` and `nonce`, as a
// public client (no secret), with oauth4webapi doing the protocol. The answer
// comes back in the redirect's fragment (`response_mode=fragment`), so the
// code is never in a request line or an access log, as the one-time links'
// codes are not. The page keeps the ID token (its audience is the console's
// client id, which the orchestrator accepts) and sends it on every RPC; a
// refresh token, when the issuer gives one, renews it. Logging out revokes
// the refresh token at the issuer and ends the issuer's session too, where
// the issuer offers either; a token that expired with no way to renew it
// sends the person through the issuer's log-in again, back to the same page.
import * as oauth from "oauth4webapi";
import { saveSession, type StoredSession } from "./session.js";

/** What the orchestrator says about logging in (`/console-config.json`); public. */
export interface OidcLogin {
  issuer: string;
  clientId: string;
  scopes: string[];
}

/** Where the issuer sends the browser back; register `<this origin>/login/callback` at the issuer. */
export const CALLBACK_PATH = "/login/callback";

/** Where the issuer sends the browser back after it ended its session; register it as a post-logout redirect URI. */
export const LOGGED_OUT_PATH = "/login/logged-out";

/** What the page must remember across the issuer's pages, in this tab only. */
const PENDING_KEY = "oz0.console.oidc-pending";

interface Pending {
  state: string;
  nonce: string;
  verifier: string;
  /** The page to open once logged in (a route's fragment). */
  returnTo: string;
}

let loginOptions: Promise<OidcLogin | undefined> | undefined;

/** The OIDC log-in this orchestrator offers, or undefined when it has none (read once a page load). */
export function oidcLogin(): Promise<OidcLogin | undefined> {
  loginOptions ??= fetch("/console-config.json", { cache: "no-cache" })
    .then(async (res) => (res.ok ? ((await res.json()) as { oidc?: OidcLogin }).oidc : undefined))
    .catch(() => undefined);
  return loginOptions;
}

/** How the button names the issuer: its host and path, without the scheme. */
export function issuerName(login: OidcLogin): string {
  const url = new URL(login.issuer);
  return `${url.host}${url.pathname.replace(/\/$/, "")}`;
}

/** Leaves for the issuer's log-in page; it sends the browser back to CALLBACK_PATH. */
export async function startOidcLogin(login: OidcLogin, returnTo: string): Promise<void> {
  const as = await authorizationServer(login);
  if (!as.authorization_endpoint) throw new Error(`${login.issuer} publishes no authorization_endpoint`);
  const pending: Pending = {
    state: oauth.generateRandomState(),
    nonce: oauth.generateRandomNonce(),
    verifier: oauth.generateRandomCodeVerifier(),
    returnTo,
  };
  sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
  const url = new URL(as.authorization_endpoint);
  const params = url.searchParams;
  params.set("client_id", login.clientId);
  params.set("redirect_uri", redirectUri());
  params.set("response_type", "code");
  params.set("response_mode", "fragment");
  params.set("scope", login.scopes.join(" "));
  params.set("code_challenge", await oauth.calculatePKCECodeChallenge(pending.verifier));
  params.set("code_challenge_method", "S256");
  params.set("state", pending.state);
  params.set("nonce", pending.nonce);
  // OIDC issues a refresh token for offline_access only when the person consents to it.
  if (login.scopes.includes("offline_access")) params.set("prompt", "consent");
  window.location.assign(url.href);
}

/**
 * Finishes the log-in the issuer sent the browser back from (`fragment`: the
 * callback's parameters): checks its state against the one this tab sent,
 * exchanges the code with the PKCE verifier, checks the ID token's nonce, and
 * keeps the session. Throws an Error saying what to do when any step refuses.
 */
export async function finishOidcLogin(
  login: OidcLogin,
  fragment: string,
): Promise<{ session: StoredSession; returnTo: string }> {
  const pending = takePending();
  if (!pending)
    throw new Error(
      "this log-in answer belongs to no log-in started in this tab (it was used already, or started elsewhere): log in again",
    );
  const as = await authorizationServer(login);
  const client: oauth.Client = { client_id: login.clientId };
  let params: URLSearchParams;
  try {
    params = oauth.validateAuthResponse(as, client, new URLSearchParams(fragment), pending.state);
  } catch (error) {
    throw new Error(refusal(error, login));
  }
  try {
    const response = await oauth.authorizationCodeGrantRequest(
      as,
      client,
      oauth.None(),
      params,
      redirectUri(),
      pending.verifier,
      insecure(login),
    );
    const result = await oauth.processAuthorizationCodeResponse(as, client, response, {
      expectedNonce: pending.nonce,
      requireIdToken: true,
    });
    const session = sessionOf(result, undefined);
    saveSession(session);
    return { session, returnTo: pending.returnTo };
  } catch (error) {
    throw new Error(refusal(error, login));
  }
}

let refreshing: Promise<StoredSession | undefined> | undefined;

/**
 * A new ID token for `session` through its refresh token (one request however
 * many calls ask at once), kept in place of the old; undefined when the
 * issuer refuses it or gives no ID token, so the person logs in again.
 */
export function refreshOidcSession(session: StoredSession): Promise<StoredSession | undefined> {
  refreshing ??= (async () => {
    const login = await oidcLogin();
    if (!login || !session.refreshToken) return undefined;
    try {
      const as = await authorizationServer(login);
      const client: oauth.Client = { client_id: login.clientId };
      const response = await oauth.refreshTokenGrantRequest(
        as,
        client,
        oauth.None(),
        session.refreshToken,
        insecure(login),
      );
      const renewed = sessionOf(await oauth.processRefreshTokenResponse(as, client, response), session.refreshToken);
      saveSession(renewed);
      return renewed;
    } catch (error) {
      // For developer tools: the page carries on with the token it has, and the API says when that ends.
      console.warn("the issuer did not renew the ID token:", error);
      return undefined;
    }
  })().finally(() => {
    refreshing = undefined;
  });
  return refreshing;
}

/**
 * Ends the OIDC session `session` belongs to at the issuer, once the page has
 * forgotten it: revokes its refresh token (RFC 7009) when the issuer has a
 * revocation endpoint, so a copy of it is worthless, then leaves for the
 * issuer's end-session endpoint (RP-initiated logout) when there is one, which
 * sends the browser back to LOGGED_OUT_PATH. Resolves false when the page
 * stays (the issuer offers no end-session endpoint, or could not be reached,
 * or `endIssuerSession` is false: the orchestrator was not told of the log-out,
 * and still accepts the ID token the end-session address would carry).
 */
export async function endOidcSession(
  login: OidcLogin,
  session: StoredSession,
  options: { endIssuerSession: boolean },
): Promise<boolean> {
  let as: oauth.AuthorizationServer;
  try {
    as = await authorizationServer(login);
  } catch (error) {
    console.warn("the issuer could not be reached to log out there:", error);
    return false;
  }
  if (session.refreshToken && as.revocation_endpoint) {
    try {
      const response = await oauth.revocationRequest(
        as,
        { client_id: login.clientId },
        oauth.None(),
        session.refreshToken,
        { ...insecure(login), additionalParameters: { token_type_hint: "refresh_token" } },
      );
      await oauth.processRevocationResponse(response);
    } catch (error) {
      // Logging out goes on: the page forgot the token, and the issuer's session still ends below.
      console.warn("the issuer did not revoke the refresh token:", error);
    }
  }
  if (!as.end_session_endpoint || !options.endIssuerSession) return false;
  const url = new URL(as.end_session_endpoint);
  url.searchParams.set("client_id", login.clientId);
  url.searchParams.set("id_token_hint", session.token);
  url.searchParams.set("post_logout_redirect_uri", `${window.location.origin}${LOGGED_OUT_PATH}`);
  window.location.assign(url.href);
  return true;
}

/**
 * Sends the person through the issuer's log-in again (their ID token expired
 * and cannot be renewed), coming back to `returnTo`, the route they were on.
 * At most once a page load: the page is leaving.
 */
let leavingForIssuer = false;
export async function logInAgainAtIssuer(login: OidcLogin, returnTo: string): Promise<void> {
  if (leavingForIssuer) return;
  leavingForIssuer = true;
  try {
    await startOidcLogin(login, returnTo);
  } catch (error) {
    leavingForIssuer = false;
    throw error;
  }
}

function sessionOf(result: oauth.TokenEndpointResponse, previousRefreshToken: string | undefined): StoredSession {
  const claims = oauth.getValidatedIdTokenClaims(result);
  if (!result.id_token || !claims) throw new Error("the issuer answered without an ID token");
  const refreshToken = result.refresh_token ?? previousRefreshToken;
  return {
    token: result.id_token,
    expiresAt: claims.exp * 1000,
    via: "oidc",
    ...(refreshToken ? { refreshToken } : {}),
  };
}

function redirectUri(): string {
  return `${window.location.origin}${CALLBACK_PATH}`;
}

function takePending(): Pending | undefined {
  const raw = sessionStorage.getItem(PENDING_KEY);
  sessionStorage.removeItem(PENDING_KEY);
  try {
    const pending = JSON.parse(raw ?? "null") as Pending | null;
    return pending && typeof pending.state === "string" && typeof pending.verifier === "string" ? pending : undefined;
  } catch {
    return undefined;
  }
}

let discovered: { issuer: string; as: Promise<oauth.AuthorizationServer> } | undefined;

function authorizationServer(login: OidcLogin): Promise<oauth.AuthorizationServer> {
  if (discovered?.issuer !== login.issuer) {
    const issuer = new URL(login.issuer);
    const as = oauth
      .discoveryRequest(issuer, { algorithm: "oidc", ...insecure(login) })
      .then((response) => oauth.processDiscoveryResponse(issuer, response));
    // A failed discovery is tried again on the next log-in.
    void as.catch(() => (discovered = undefined));
    discovered = { issuer: login.issuer, as };
  }
  return discovered.as.catch((error: unknown) => {
    throw new Error(
      `the issuer ${login.issuer} could not be reached or its discovery document was refused: ${(error as Error).message}`,
    );
  });
}

/** An issuer on plain http (a loopback one, in tests and on a laptop) is the orchestrator's config's choice. */
function insecure(login: OidcLogin): { [oauth.allowInsecureRequests]?: boolean } {
  return new URL(login.issuer).protocol === "http:" ? { [oauth.allowInsecureRequests]: true } : {};
}

/** What a refused step says, for a person. */
function refusal(error: unknown, login: OidcLogin): string {
  if (error instanceof oauth.AuthorizationResponseError)
    return `${issuerName(login)} refused the log-in: ${error.error_description ?? error.error}`;
  if (error instanceof oauth.ResponseBodyError)
    return `${issuerName(login)} refused the log-in's code: ${error.error_description ?? error.error}`;
  if (error instanceof oauth.OperationProcessingError) {
    const attribute = (error.cause as { attribute?: unknown } | undefined)?.attribute;
    if (/"state"/.test(error.message))
      return "the log-in answer does not match the log-in this tab started (its state differs), so it was refused: log in again";
    if (attribute === "nonce" || /nonce/.test(error.message))
      return "the ID token does not carry the nonce this tab sent, so it was refused: log in again";
    return `the issuer's answer was refused (${error.message}): log in again`;
  }
  return (error as Error).message;
}
