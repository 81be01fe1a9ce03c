// Thin RPC handlers of LoginService over ConsoleLogin: the console's one-time
// codes, its sessions, and who the caller is.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { LoginService, WhoAmIResponseSchema, type WhoAmIResponse } from "@oz0/proto/oz0/orchestrator/v1/login_pb";
import { credentialDigest, principalOf, registration, type Principal, type ServiceRegistration } from "@oz0/serving";
import type { ConsoleLogin } from "../console/console-login.js";
import { OrchestratorError } from "../orchestrator-error.js";

export function loginService(login: ConsoleLogin): ServiceRegistration {
  return registration(LoginService, {
    createLoginCode(_request, context) {
      const { code, expiresAt } = domain(() => login.createCode(callerOf(context)));
      return { code, expiresAt: timestampFromDate(expiresAt) };
    },
    redeemLoginCode(request) {
      const session = request.code ? login.redeem(request.code) : undefined;
      if (!session) {
        // `oz0 console` makes a new link for the running stack (or OZ0_URL); `oz0 dev` prints one only as it starts.
        throw new ConnectError(
          "this login link was used already, has expired or was not made by this orchestrator (a restart forgets them): run `oz0 console` for a new one",
          Code.Unauthenticated,
        );
      }
      return {
        sessionToken: session.token,
        expiresAt: timestampFromDate(session.expiresAt),
        principal: whoAmI(session.principal),
      };
    },
    whoAmI(_request, context) {
      return whoAmI(callerOf(context));
    },
    logout(_request, context) {
      const bearer = /^Bearer\s+(\S+)/i.exec(context.requestHeader.get("authorization") ?? "")?.[1];
      if (bearer) login.logout(credentialDigest(bearer), principalOf(context));
      return {};
    },
  });
}

function callerOf(context: HandlerContext): Principal {
  const principal = principalOf(context);
  if (!principal) throw new ConnectError("this call needs a credential", Code.Unauthenticated);
  return principal;
}

function domain<T>(fn: () => T): T {
  try {
    return fn();
  } catch (error) {
    if (error instanceof OrchestratorError && error.code === "permission_denied")
      throw new ConnectError(error.message, Code.PermissionDenied);
    throw error;
  }
}

function whoAmI(principal: Principal): WhoAmIResponse {
  if (principal.kind !== "person") return create(WhoAmIResponseSchema, { id: principal.id, via: principal.kind });
  return create(WhoAmIResponseSchema, {
    id: principal.id,
    roles: [...principal.roles].sort(),
    groups: [...principal.groups],
    via: principal.via,
  });
}
