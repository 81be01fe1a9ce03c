// Who is calling: a person, one of the suite's services, or a sandbox node.
// A session (agent code) is never a principal of any RPC: its token is
// accepted by the LLM proxy's model routes and nowhere else.
import { createContextKey, type ContextValues } from "@connectrpc/connect";

/** What a person may do. `admin` implies every role; `operator` and `approver` imply `viewer`. */
export type Role = "admin" | "operator" | "approver" | "viewer";

export const ROLES: readonly Role[] = ["admin", "operator", "approver", "viewer"];

/** The suite's services, each with a credential of its own. */
export type ServiceName = "orchestrator" | "sandbox" | "llm-proxy" | "events";

export const SERVICE_NAMES: readonly ServiceName[] = ["orchestrator", "sandbox", "llm-proxy", "events"];

export type Principal =
  | {
      kind: "person";
      /** A stable id (the OIDC username claim, a configured token's user, or `owner`); never shown as an email unless the issuer's claim is one. */
      id: string;
      groups: readonly string[];
      roles: ReadonlySet<Role>;
      /** How the person proved who they are; `console`: a session opened with a one-time login code. */
      via: "oidc" | "token" | "owner" | "console";
      /**
       * When the credential they proved it with ends, in ms since the epoch (an OIDC token's `exp`); absent for
       * one that does not end by itself. What it opens (a console session) ends then at the latest.
       */
      credentialEnds?: number;
    }
  | { kind: "service"; id: ServiceName }
  | { kind: "node"; id: "node" };

/** The roles a role brings with it. */
export function impliedRoles(role: Role): Role[] {
  switch (role) {
    case "admin":
      return [...ROLES];
    case "operator":
      return ["operator", "viewer"];
    case "approver":
      return ["approver", "viewer"];
    case "viewer":
      return ["viewer"];
  }
}

/** The embedded owner: every role. */
export function ownerPrincipal(id = "owner"): Principal {
  return { kind: "person", id, groups: [], roles: new Set(ROLES), via: "owner" };
}

/** How a principal is named in messages: `alice`, `service orchestrator`, `a sandbox node`. */
export function describePrincipal(p: Principal): string {
  if (p.kind === "person") return p.id;
  if (p.kind === "service") return `the ${p.id} service`;
  return "a sandbox node";
}

export const principalKey = createContextKey<Principal | undefined>(undefined, {
  description: "the authenticated principal",
});

/** The principal the auth interceptor put on this call, or undefined on an open method (health). */
export function principalOf(context: { values: ContextValues }): Principal | undefined {
  return context.values.get(principalKey);
}
