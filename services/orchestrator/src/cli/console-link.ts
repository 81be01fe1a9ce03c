// The link that opens the web console logged in: a one-time code the
// orchestrator made for the caller, in the URL's fragment (never sent to a
// server in a request line or a Referer, never in its access logs). The
// credential that asked for it stays on this machine.
import type { Client } from "@connectrpc/connect";
import type { LoginService } from "@oz0/proto/oz0/orchestrator/v1/login_pb";

export async function consoleLink(url: string, login: Client<typeof LoginService>): Promise<string> {
  const { code } = await login.createLoginCode({});
  return `${url.replace(/\/$/, "")}/#/login?code=${encodeURIComponent(code)}`;
}
