// Redeems the one-time code of the link `oz0 dev` printed for a session token
// of this page's own; the code is removed from the address bar and history
// at once, used or not.
import { useEffect, useState } from "preact/hooks";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { WhoAmIResponse } from "@oz0/proto/oz0/orchestrator/v1/login_pb";
import { login, messageOf } from "../api.js";
import { saveSession } from "../session.js";

export function LoginPage({
  code,
  onLoggedIn,
}: {
  code: string | undefined;
  onLoggedIn: (who: WhoAmIResponse) => void;
}) {
  const [problem, setProblem] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(code !== undefined);
  useEffect(() => {
    if (!code) return;
    window.history.replaceState(null, "", "#/login");
    login.redeemLoginCode({ code }).then(
      (answer) => {
        saveSession({
          token: answer.sessionToken,
          expiresAt: answer.expiresAt ? timestampDate(answer.expiresAt).getTime() : Date.now() + 3_600_000,
        });
        onLoggedIn(answer.principal!);
      },
      (error: unknown) => {
        setProblem(messageOf(error));
        setBusy(false);
      },
    );
  }, [code]);
  return (
    <main id="main" class="login">
      <h1>Orchestrator Zero</h1>
      {busy ? <p>Logging in…</p> : null}
      {problem ? (
        <p role="alert" class="error">
          {problem}
        </p>
      ) : null}
      {!busy ? (
        <p>
          Open the console with the one-time link <code>oz0 dev</code> prints (
          <code>console: http://…/#/login?code=…</code>). A link works once and for a few minutes.
        </p>
      ) : null}
    </main>
  );
}
