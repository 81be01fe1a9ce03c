// Which sandbox node a heartbeat comes from, proven by the pod it runs in.
// The shared node token says only that a caller is some sandbox node: its
// holder could register any node id at any URL and be sent other nodes'
// sessions (attacker review). In Kubernetes each sandbox pod's heartbeat
// sidecar also presents a service-account token the kubelet projects into
// that container alone, for this audience, bound to the pod and rotated
// within minutes. The cluster signs it; the orchestrator checks it against
// the cluster's published keys (a file, so the orchestrator needs no access
// to the Kubernetes API) and then holds the heartbeat to what the token
// proves: its node id is the pod's name, from the sandbox pods' service
// account, and the URL it advertises is the address its heartbeat came from.
// A node's own credentials can then claim no other node's sessions.
import { readFileSync, statSync } from "node:fs";
import { NODE_IDENTITY_AUDIENCE, NODE_IDENTITY_HEADER } from "@oz0/serving";
import { createLocalJWKSet, errors, jwtVerify, type JSONWebKeySet, type JWTPayload } from "jose";

export interface NodeIdentitySettings {
  /** The cluster's service-account token issuer (OZ0_NODE_IDENTITY_ISSUER): `iss` of every projected token. */
  issuer: string;
  /** The cluster's signing keys as a JWKS document (OZ0_NODE_IDENTITY_JWKS_FILE), read again when it changes. */
  jwksFile: string;
  /** The sandbox pods' service account, `namespace:name` (OZ0_NODE_IDENTITY_SERVICE_ACCOUNT). */
  serviceAccount: string;
}

/** What a heartbeat claims, and where it came from. */
export interface ClaimedNode {
  nodeId: string;
  /** The URL the node advertises, as validated (an http(s) origin). */
  url: string;
  /** The heartbeat connection's source address, as the server's socket saw it. */
  peerAddress: string | undefined;
}

/** A heartbeat whose identity token is missing or does not prove what the heartbeat claims. */
export class NodeIdentityError extends Error {
  constructor(
    message: string,
    /** No token at all (the sidecar is not configured), rather than a token that does not hold. */
    readonly missing = false,
  ) {
    super(message);
    this.name = "NodeIdentityError";
  }
}

/** How far ahead of the orchestrator's clock a token's `nbf` and `iat` may be (and how far past its `exp`). */
const CLOCK_TOLERANCE_SECONDS = 60;

const SERVICE_ACCOUNT = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?):([a-z0-9]([-.a-z0-9]*[a-z0-9])?)$/;

/** Throws, saying what to do, when the settings cannot verify anything; returns them checked. */
export function checkNodeIdentitySettings(settings: NodeIdentitySettings): NodeIdentitySettings {
  if (!SERVICE_ACCOUNT.test(settings.serviceAccount))
    throw new Error(
      `OZ0_NODE_IDENTITY_SERVICE_ACCOUNT is ${JSON.stringify(settings.serviceAccount)}: give the sandbox pods' service account as namespace:name, such as oz0:sandbox`,
    );
  // Read once now, so a missing or malformed file stops the orchestrator at start rather than every heartbeat.
  readKeys(settings.jwksFile);
  return settings;
}

export class NodeIdentity {
  readonly #settings: NodeIdentitySettings;
  readonly #subject: string;
  #keys: { version: string; keys: ReturnType<typeof createLocalJWKSet> } | undefined;

  constructor(settings: NodeIdentitySettings) {
    this.#settings = checkNodeIdentitySettings(settings);
    this.#subject = `system:serviceaccount:${settings.serviceAccount}`;
  }

  /**
   * The pod `token` proves, when it proves the heartbeat's claims; throws NodeIdentityError saying which does not
   * hold. Its uid pins the node to the URL it first came with (the registry's `register`).
   */
  async verify(token: string | undefined, claimed: ClaimedNode): Promise<{ uid: string; issuedAt: number }> {
    if (!token)
      throw new NodeIdentityError(
        `this orchestrator takes heartbeats only with the sandbox pod's own service-account token (audience ${NODE_IDENTITY_AUDIENCE}) in the ${NODE_IDENTITY_HEADER} header: give the heartbeat sidecar OZ0_NODE_IDENTITY_TOKEN_FILE, the path of that projected token (deploy/k8s/README.md, "Node identities")`,
        true,
      );
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, this.#currentKeys(), {
        issuer: this.#settings.issuer,
        audience: NODE_IDENTITY_AUDIENCE,
        subject: this.#subject,
        requiredClaims: ["exp", "iat"],
        // The kubelet sends a renewed token at once: an orchestrator's clock a little behind the API server's must
        // not refuse it as not yet valid, and every node at each renewal with it.
        clockTolerance: CLOCK_TOLERANCE_SECONDS,
      }));
    } catch (error) {
      throw new NodeIdentityError(refusal(error, this.#subject));
    }
    const { name: pod, uid: podUid } = podOf(payload);
    if (pod === undefined || podUid === undefined)
      throw new NodeIdentityError(
        "the identity token is not bound to a pod: it must be the projected token of the sandbox pod's own volume, not one made with `kubectl create token`",
      );
    if (pod !== claimed.nodeId)
      throw new NodeIdentityError(
        `node id ${JSON.stringify(claimed.nodeId)} is not the pod the identity token was issued to (${pod}): a node's id is its pod's name (OZ0_NODE_ID from metadata.name)`,
      );
    const host = new URL(claimed.url).hostname.replace(/^\[(.*)\]$/, "$1");
    if (claimed.peerAddress === undefined || host !== claimed.peerAddress)
      throw new NodeIdentityError(
        `url ${claimed.url} is not where this heartbeat came from (${claimed.peerAddress ?? "an address no longer known"}): with node identities a node advertises its pod's own IP (OZ0_ADVERTISE_URL from status.podIP), so no node can send orchestrators to another host`,
      );
    return { uid: podUid, issuedAt: payload.iat! };
  }

  /** The key set, read again when the file changed (the operator replaced it after the cluster's keys rotated). */
  #currentKeys(): ReturnType<typeof createLocalJWKSet> {
    const { jwksFile } = this.#settings;
    let version: string;
    try {
      const stat = statSync(jwksFile);
      version = `${stat.mtimeMs}:${stat.size}:${stat.ino}`;
    } catch (error) {
      throw new NodeIdentityError(`the cluster's keys cannot be read from ${jwksFile}: ${(error as Error).message}`);
    }
    if (this.#keys?.version !== version) this.#keys = { version, keys: createLocalJWKSet(readKeys(jwksFile)) };
    return this.#keys.keys;
  }
}

function readKeys(file: string): JSONWebKeySet {
  let document: unknown;
  try {
    document = JSON.parse(readFileSync(file, "utf8"));
  } catch (error) {
    throw new Error(
      `OZ0_NODE_IDENTITY_JWKS_FILE ${file} is not a JSON document (${(error as Error).message}): write the cluster's keys there with \`kubectl get --raw /openid/v1/jwks\``,
    );
  }
  const keys = (document as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(keys) || keys.length === 0)
    throw new Error(
      `OZ0_NODE_IDENTITY_JWKS_FILE ${file} holds no keys: write the cluster's keys there with \`kubectl get --raw /openid/v1/jwks\``,
    );
  return document as JSONWebKeySet;
}

/** `kubernetes.io.pod` of a bound service-account token: its name and uid. */
function podOf(payload: JWTPayload): { name?: string; uid?: string } {
  const pod = (payload["kubernetes.io"] as { pod?: { name?: unknown; uid?: unknown } } | undefined)?.pod;
  const text = (value: unknown): string | undefined => (typeof value === "string" && value !== "" ? value : undefined);
  const name = text(pod?.name);
  const uid = text(pod?.uid);
  return { ...(name ? { name } : {}), ...(uid ? { uid } : {}) };
}

function refusal(error: unknown, subject: string): string {
  if (error instanceof NodeIdentityError) return error.message;
  if (error instanceof errors.JWTExpired)
    return "the identity token has expired: the kubelet renews the projected token; the sidecar reads the file again each heartbeat";
  if (error instanceof errors.JWTClaimValidationFailed && (error.claim === "nbf" || error.claim === "iat"))
    return `the identity token is not valid yet by this orchestrator's clock (${error.reason}): its clock is more than ${CLOCK_TOLERANCE_SECONDS} s behind the cluster's; synchronise it (NTP)`;
  if (error instanceof errors.JWTClaimValidationFailed)
    return error.claim === "sub"
      ? `the identity token is not of the sandbox pods' service account (${subject}; OZ0_NODE_IDENTITY_SERVICE_ACCOUNT)`
      : `the identity token's ${error.claim} claim is not accepted (${error.reason}): check OZ0_NODE_IDENTITY_ISSUER and the projected token's audience, ${NODE_IDENTITY_AUDIENCE}`;
  if (error instanceof errors.JWSSignatureVerificationFailed || error instanceof errors.JWKSNoMatchingKey)
    return "the identity token is not signed by a key of OZ0_NODE_IDENTITY_JWKS_FILE: if the cluster's keys rotated, write them there again";
  if (error instanceof errors.JOSEError)
    return `the identity token is not a valid service-account token (${error.code})`;
  return `the identity token could not be checked: ${(error as Error).message}`;
}
