// The ways in: "Log in with <issuer>" where the orchestrator has an OIDC
// issuer for the console, and the one-time link `oz0 dev` prints, whose code
// is redeemed for a session token of this page's own. A code, like the
// issuer's answer, is removed from the address bar and history at once, used
// or not.
import { useEffect, useState } from "preact/hooks";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { WhoAmIResponse } from "@oz0/proto/oz0/orchestrator/v1/login_pb";
import { login, messageOf } from "../api.js";
import {
  CALLBACK_PATH,
  finishOidcLogin,
  issuerName,
  logInAgainAtIssuer,
  oidcLogin,
  startOidcLogin,
  type OidcLogin,
} from "../oidc-login.js";
import { currentSession, forgetSession, saveSession } from "../session.js";

/**
 * Where a login link stands: who is logged in here being read, that person
 * asked whether the link may replace them, the code being redeemed, or done.
 */
type LinkPhase =
  { at: "checking" } | { at: "asking"; current: string } | { at: "redeeming"; replaces: boolean } | { at: "idle" };

export function LoginPage({
  code,
  oidc,
  problem: given,
  notice,
  onLoggedIn,
  onStay,
}: {
  code: string | undefined;
  /** The person chose to stay logged in as they were rather than use the link. */
  onStay: () => void;
  /** The issuer to offer, when the orchestrator has one for the console. */
  oidc: OidcLogin | undefined;
  /** Why the last log-in failed (an issuer's answer refused), to say on this page. */
  problem: string | undefined;
  /** What happened last, when it was not a problem (logged out at the issuer). */
  notice?: string | undefined;
  onLoggedIn: (who: WhoAmIResponse) => void;
}) {
  const [problem, setProblem] = useState<string | undefined>(given);
  // A link opened where someone is logged in already asks them first: one a viewer sent would otherwise log this
  // browser in as that viewer, unasked (attacker review).
  const [phase, setPhase] = useState<LinkPhase>(
    code === undefined ? { at: "idle" } : currentSession() ? { at: "checking" } : { at: "redeeming", replaces: false },
  );
  const busy = phase.at === "checking" || phase.at === "redeeming";
  useEffect(() => setProblem(given), [given]);
  useEffect(() => {
    if (code) window.history.replaceState(null, "", "#/login");
  }, [code]);
  useEffect(() => {
    if (phase.at !== "checking") return;
    login.whoAmI({}).then(
      (who) => setPhase({ at: "asking", current: who.id }),
      // No one after all (an expired session): the link logs in.
      () => setPhase({ at: "redeeming", replaces: false }),
    );
  }, [phase.at]);
  useEffect(() => {
    if (phase.at !== "redeeming" || !code) return;
    login.redeemLoginCode({ code }).then(
      async (answer) => {
        // The session it replaces ends on the server too, not only in this browser.
        if (phase.replaces) await login.logout({}).catch(() => undefined);
        saveSession({
          token: answer.sessionToken,
          expiresAt: answer.expiresAt ? timestampDate(answer.expiresAt).getTime() : Date.now() + 3_600_000,
        });
        onLoggedIn(answer.principal!);
      },
      (error: unknown) => {
        setProblem(messageOf(error));
        setPhase({ at: "idle" });
      },
    );
  }, [phase.at]);
  const logInWithIssuer = (issuer: OidcLogin): void => {
    setPhase({ at: "redeeming", replaces: false });
    startOidcLogin(issuer, "#/jobs").catch((error: unknown) => {
      setProblem((error as Error).message);
      setPhase({ at: "idle" });
    });
  };
  if (phase.at === "asking")
    return (
      <main id="main" class="login">
        <h1>Orchestrator Zero</h1>
        <p role="status" data-testid="login-link-confirm">
          You are logged in as <strong>{phase.current}</strong>. This link logs in whoever made it, in your place.
        </p>
        <p>
          <button type="button" onClick={onStay}>
            Stay logged in as {phase.current}
          </button>{" "}
          <button type="button" onClick={() => setPhase({ at: "redeeming", replaces: true })}>
            Log in with the link
          </button>
        </p>
      </main>
    );
  return (
    <main id="main" class="login">
      <h1>Orchestrator Zero</h1>
      {busy ? <p>Logging in…</p> : null}
      {notice && !problem ? <p role="status">{notice}</p> : null}
      {problem ? (
        <p role="alert" class="error">
          {problem}
        </p>
      ) : null}
      {!busy && oidc ? (
        <p>
          <button type="button" onClick={() => logInWithIssuer(oidc)}>
            Log in with {issuerName(oidc)}
          </button>
        </p>
      ) : null}
      {!busy ? (
        <p>
          {oidc ? "Or open" : "Open"} the console with the one-time link <code>oz0 dev</code> prints (
          <code>console: http://…/#/login?code=…</code>). A link works once and for a few minutes.
        </p>
      ) : null}
    </main>
  );
}

/**
 * The page the issuer sends the browser back to (CALLBACK_PATH, the answer
 * in the fragment): finishes the log-in, then opens the page the person was
 * going to; or says why it was refused.
 */
export function OidcCallbackPage({
  fragment,
  onLoggedIn,
  onRefused,
}: {
  fragment: string;
  onLoggedIn: (who: WhoAmIResponse, returnTo: string) => void;
  onRefused: (problem: string) => void;
}) {
  useEffect(() => {
    // The code leaves the address bar and history before anything else happens.
    window.history.replaceState(null, "", CALLBACK_PATH);
    void (async () => {
      try {
        const issuer = await oidcLogin();
        if (!issuer)
          throw new Error(
            "this orchestrator has no OIDC issuer for the console (oidc.consoleClientId in its auth config)",
          );
        const { returnTo } = await finishOidcLogin(issuer, fragment);
        const who = await login.whoAmI({}).catch((error: unknown) => {
          forgetSession();
          throw new Error(messageOf(error));
        });
        onLoggedIn(who, returnTo);
      } catch (error) {
        onRefused((error as Error).message);
      }
    })();
  }, [fragment]);
  return (
    <main id="main" class="login">
      <h1>Orchestrator Zero</h1>
      <p>Logging in…</p>
    </main>
  );
}

/**
 * Shown for the moment the page leaves for the issuer's log-in because the
 * ID token expired and cannot be renewed; the issuer sends the browser back
 * to `returnTo`, the route the person was on. When the issuer cannot be
 * reached the session is forgotten and `onRefused` says why (the login page
 * then shows it, and nothing leaves for the issuer again by itself).
 */
export function LogInAgainPage({ returnTo, onRefused }: { returnTo: string; onRefused: (problem: string) => void }) {
  useEffect(() => {
    void (async () => {
      try {
        const issuer = await oidcLogin();
        if (!issuer) throw new Error("this orchestrator no longer offers an OIDC log-in for the console: log in again");
        forgetSession();
        await logInAgainAtIssuer(issuer, returnTo);
      } catch (error) {
        forgetSession();
        onRefused((error as Error).message);
      }
    })();
  }, [returnTo]);
  return (
    <main id="main" class="login">
      <h1>Orchestrator Zero</h1>
      <p>Your log-in expired: logging in again at the issuer…</p>
    </main>
  );
}
