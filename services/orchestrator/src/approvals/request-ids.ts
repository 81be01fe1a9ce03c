// Permission request ids and tool call ids are unique in a session
// (harness.proto: PermissionRequest.id), checked here and not only by the
// sandbox: a sandbox node could be the attacker's, and it forwards whatever
// it likes. A repeat would let a harness rewrite a decision already made (the
// store keeps one row per id) or pair a denied call with an approved one's
// row (the tool-call audit finds a result's row by its call id or its id), so
// the one namespace both are looked up in holds each value once: a request
// claims its id and its call id (the same value for both is one claim), and
// a later request claiming either again breaks the protocol. The claims of a
// job are read from its stored rows once per process (a restart, a takeover
// count what is stored), then kept with the job. An id must also be well
// formed (@oz0/harness's request-id rules: length, the characters an id may hold).
import { REQUEST_ID_RULES, requestIdProblem } from "@oz0/harness/host";
import { quotedHarnessText } from "../policy/harness-text.js";
import type { PermissionRecord } from "../store/job-store.js";

/** The values the job's permission requests claimed so far, each with the request that claimed it. */
export type RequestIds = Map<string, { permissionId: string; as: "id" | "call id" }>;

/** The claims of stored permission requests. */
export function requestIdsOf(stored: readonly PermissionRecord[]): RequestIds {
  const ids: RequestIds = new Map();
  for (const p of stored) claim(ids, p);
  return ids;
}

/** Records a request's claims, once it is stored. */
export function claim(ids: RequestIds, request: { id: string; callId: string }): void {
  if (request.callId) ids.set(request.callId, { permissionId: request.id, as: "call id" });
  ids.set(request.id, { permissionId: request.id, as: "id" });
}

/**
 * The protocol error a new permission request is, for the job's failure; undefined when its ids are new and well formed.
 * Worded like the sandbox's own `duplicate_request_id` so a job reads the same whichever side saw it first.
 */
export function requestIdViolation(ids: RequestIds, request: { id: string; callId: string }): string | undefined {
  const fix =
    "the request was refused, every earlier decision stands, and the session was stopped. A harness gives every permission request an id, and every tool call a call_id, used once in its session";
  if (!request.id) return `the harness broke the protocol: invalid_event: a permission request has no id; ${fix}`;
  for (const [value, as] of [
    [request.id, "id"],
    [request.callId, "call id"],
  ] as const) {
    if (!value) continue;
    const problem = requestIdProblem(value);
    if (problem)
      return `the harness broke the protocol: invalid_event: permission request ${quotedHarnessText(request.id)}: its ${as} has ${problem}; ${fix}, ${REQUEST_ID_RULES}`;
    const earlier = ids.get(value);
    if (earlier)
      return `the harness broke the protocol: duplicate_request_id: permission request ${quotedHarnessText(request.id)} reuses ${quotedHarnessText(value)} as its ${as}, the ${earlier.as} of permission request ${quotedHarnessText(earlier.permissionId)} earlier in this session; ${fix}`;
  }
  return undefined;
}
