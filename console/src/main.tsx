// The console's shell: who is logged in (WhoAmI, so roles decide what is
// shown), the navigation, and the page the URL names.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import type { WhoAmIResponse } from "@oz0/proto/oz0/orchestrator/v1/login_pb";
import { login, messageOf } from "./api.js";
import { AgentPage, AgentsPage } from "./pages/agents.js";
import { ApprovalsPage } from "./pages/approvals.js";
import { UsagePage } from "./pages/usage.js";
import { GraphPage, GraphsPage } from "./pages/graphs.js";
import { JobPage } from "./pages/job.js";
import { JobsPage } from "./pages/jobs.js";
import { CALLBACK_PATH, endOidcSession, issuerName, LOGGED_OUT_PATH, oidcLogin, type OidcLogin } from "./oidc-login.js";
import { LogInAgainPage, LoginPage, OidcCallbackPage } from "./pages/login.js";
import { href, NO_FILTER, replaceRoute, useRoute } from "./router.js";
import { retryDelayMs } from "./retry-delay.js";
import { currentSession, expiredOidcSession, forgetSession, storedSession } from "./session.js";
import "./style.css";

// The issuer sends the browser here after ending its session (RP-initiated logout): the login page, saying so.
const backFromIssuerLogout = window.location.pathname === LOGGED_OUT_PATH;
if (backFromIssuerLogout) window.history.replaceState(null, "", "/#/login");

function App() {
  const route = useRoute();
  const [me, setMe] = useState<WhoAmIResponse | undefined>(undefined);
  const [problem, setProblem] = useState<string | undefined>(undefined);
  const [sessionVersion, setSessionVersion] = useState(0);
  const [oidc, setOidc] = useState<OidcLogin | undefined>(undefined);
  const [loginProblem, setLoginProblem] = useState<string | undefined>(undefined);
  const [loginNotice, setLoginNotice] = useState<string | undefined>(
    backFromIssuerLogout ? "Logged out, at the issuer too." : undefined,
  );
  // The issuer's answer, when the issuer sent the browser back here; read once, before routing.
  const [callback, setCallback] = useState<string | undefined>(() =>
    window.location.pathname === CALLBACK_PATH ? window.location.hash.replace(/^#/, "") : undefined,
  );

  useEffect(() => {
    void oidcLogin().then(setOidc);
  }, []);

  useEffect(() => {
    const loggedOut = (): void => {
      setMe(undefined);
      setSessionVersion((v) => v + 1);
    };
    window.addEventListener("oz0:logged-out", loggedOut);
    return () => window.removeEventListener("oz0:logged-out", loggedOut);
  }, []);

  useEffect(() => {
    if (route.page === "login" || !currentSession()) return;
    let stopped = false;
    let retry: ReturnType<typeof setTimeout> | undefined;
    // Read again on each page. A failed read (the orchestrator restarting) keeps who was known, says why, and is
    // tried again until it answers, so its error does not stay on the page after the orchestrator is back.
    const ask = (attempt: number): void => {
      login.whoAmI({}).then(
        (who) => {
          if (stopped) return;
          setMe(who);
          setProblem(undefined);
        },
        (error: unknown) => {
          if (stopped) return;
          setProblem(messageOf(error));
          retry = setTimeout(() => ask(attempt + 1), retryDelayMs(attempt));
        },
      );
    };
    ask(0);
    return () => {
      stopped = true;
      clearTimeout(retry);
    };
  }, [route.page, sessionVersion]);

  if (callback !== undefined) {
    return (
      <OidcCallbackPage
        fragment={callback}
        onLoggedIn={(who, returnTo) => {
          setMe(who);
          setProblem(undefined);
          setLoginProblem(undefined);
          setLoginNotice(undefined);
          window.history.replaceState(null, "", `/${returnTo}`);
          setCallback(undefined);
          window.dispatchEvent(new HashChangeEvent("hashchange"));
        }}
        onRefused={(refusal) => {
          setLoginProblem(refusal);
          window.history.replaceState(null, "", "/#/login");
          setCallback(undefined);
          window.dispatchEvent(new HashChangeEvent("hashchange"));
        }}
      />
    );
  }
  if (route.page !== "login" && !currentSession() && expiredOidcSession()) {
    return (
      <LogInAgainPage
        returnTo={window.location.hash || "#/jobs"}
        onRefused={(refusal) => {
          setLoginProblem(refusal);
          replaceRoute({ page: "login", code: undefined });
        }}
      />
    );
  }
  if (route.page === "login" || !currentSession()) {
    return (
      <LoginPage
        code={route.page === "login" ? route.code : undefined}
        oidc={oidc}
        problem={loginProblem}
        notice={loginNotice}
        onStay={() => replaceRoute({ page: "jobs", filter: NO_FILTER })}
        onLoggedIn={(who) => {
          setMe(who);
          setProblem(undefined);
          setLoginNotice(undefined);
          replaceRoute({ page: "jobs", filter: NO_FILTER });
        }}
      />
    );
  }
  const logOut = async (): Promise<void> => {
    const before = storedSession();
    const loggedOut = await login.logout({}).then(
      () => true,
      () => false,
    );
    // The call may have renewed the ID token first: the one the orchestrator logged out is the one stored now.
    const session = storedSession() ?? before;
    // Told, or expired: the ID token is worth nothing at the orchestrator any more.
    const told = loggedOut || (session?.expiresAt ?? 0) <= Date.now();
    forgetSession();
    setMe(undefined);
    setLoginProblem(undefined);
    // An OIDC log-in ends at the issuer too: its refresh token revoked, its session ended (the issuer's page, then
    // back). Ending it puts the ID token in an address (id_token_hint), worthless only once the orchestrator was told.
    if (session?.via === "oidc" && oidc && (await endOidcSession(oidc, session, { endIssuerSession: told }))) return;
    setLoginNotice(
      session?.via === "oidc" && oidc
        ? told
          ? `Logged out here; still logged in at ${issuerName(oidc)}.`
          : `Logged out here. The orchestrator could not be told, so your session at ${issuerName(oidc)} was left open (ending it would put your ID token, still valid, in an address): log out there yourself.`
        : undefined,
    );
    replaceRoute({ page: "login", code: undefined });
  };
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Orchestrator Zero</span>
        <nav aria-label="Pages">
          <a
            href={href({ page: "jobs", filter: NO_FILTER })}
            aria-current={route.page === "jobs" || route.page === "job" ? "page" : undefined}
          >
            Jobs
          </a>
          <a href={href({ page: "approvals" })} aria-current={route.page === "approvals" ? "page" : undefined}>
            Approvals
          </a>
          <a
            href={href({ page: "agents" })}
            aria-current={route.page === "agents" || route.page === "agent" ? "page" : undefined}
          >
            Agents
          </a>
          <a
            href={href({ page: "graphs" })}
            aria-current={route.page === "graphs" || route.page === "graph" ? "page" : undefined}
          >
            Graphs
          </a>
          <a href={href({ page: "usage", window: "24h" })} aria-current={route.page === "usage" ? "page" : undefined}>
            Usage
          </a>
        </nav>
        <span class="who">
          {me ? (
            <>
              <span data-testid="principal">{me.id}</span>{" "}
              <span class="roles">({me.roles.join(", ") || "no role"})</span>
            </>
          ) : null}
          <button type="button" class="link" onClick={() => void logOut()}>
            Log out
          </button>
        </span>
      </header>
      <main id="main">
        {problem ? (
          <p role="alert" class="error">
            {problem}
          </p>
        ) : null}
        {me ? <Page route={route} roles={me.roles} /> : <p>Loading…</p>}
      </main>
    </>
  );
}

function Page({ route, roles }: { route: ReturnType<typeof useRoute>; roles: string[] }) {
  switch (route.page) {
    case "job":
      return <JobPage jobId={route.jobId} roles={roles} />;
    case "approvals":
      return <ApprovalsPage roles={roles} />;
    case "agents":
      return <AgentsPage />;
    case "agent":
      return <AgentPage name={route.name} version={route.version} />;
    case "jobs":
      return <JobsPage filter={route.filter} />;
    case "graphs":
      return <GraphsPage />;
    case "graph":
      return <GraphPage name={route.name} run={route.run} />;
    case "usage":
      return <UsagePage window={route.window} />;
    default:
      return null;
  }
}

render(<App />, document.getElementById("app")!);
