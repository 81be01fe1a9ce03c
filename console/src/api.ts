// The generated Connect clients, over one transport to the page's own origin
// (the orchestrator serves the page and the API on one port). Every call
// carries the session's bearer token; a call refused as Unauthenticated ends
// the session, so the page asks to log in again (an OIDC ID token is renewed
// first when the issuer gave a refresh token; one that expired and could not
// be renewed sends the person through the issuer's log-in again, main.tsx).
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { AgentService, JobService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { LoginService } from "@oz0/proto/oz0/orchestrator/v1/login_pb";
import { visible } from "./format.js";
import { refreshOidcSession } from "./oidc-login.js";
import { currentSession, forgetSession, saveSession } from "./session.js";

/** An OIDC ID token this close to its expiry is renewed first, when the issuer gave a refresh token. */
const RENEW_BEFORE_MS = 60_000;

const bearer: Interceptor = (next) => async (request) => {
  let session = currentSession();
  if (session?.via === "oidc" && session.refreshToken && session.expiresAt - RENEW_BEFORE_MS <= Date.now())
    session = (await refreshOidcSession(session)) ?? session;
  if (session?.via === "oidc" && session.expiresAt <= Date.now()) {
    // Expired and not renewed (no refresh token, or the issuer refused it): kept without its refresh token, so the
    // shell sends the person through the issuer's log-in, back to this page, instead of trying it again.
    saveSession({ token: session.token, expiresAt: session.expiresAt, via: "oidc" });
    window.dispatchEvent(new Event("oz0:logged-out"));
    throw new ConnectError("the log-in expired: logging in again at the issuer", Code.Unauthenticated);
  }
  if (session) request.header.set("authorization", `Bearer ${session.token}`);
  try {
    return await next(request);
  } catch (error) {
    if (ConnectError.from(error).code === Code.Unauthenticated && request.method.name !== "RedeemLoginCode") {
      forgetSession();
      window.dispatchEvent(new Event("oz0:logged-out"));
    }
    throw error;
  }
};

const transport = createConnectTransport({ baseUrl: window.location.origin, interceptors: [bearer] });

export const jobs: Client<typeof JobService> = createClient(JobService, transport);
export const login: Client<typeof LoginService> = createClient(LoginService, transport);
export const agents: Client<typeof AgentService> = createClient(AgentService, transport);

/** What a failed call says, for a person: the server's message, without the code's prefix. */
/**
 * What a failed call says, ready to show: an error may quote what the caller sent (a job id from the address, which
 * anybody may write into a link) or a harness wrote, so its controls are shown as escapes (`visible`), never obeyed.
 */
export function messageOf(error: unknown): string {
  const e = ConnectError.from(error);
  return visible(e.rawMessage || e.message);
}
