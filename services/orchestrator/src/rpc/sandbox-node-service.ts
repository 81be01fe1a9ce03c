// Thin RPC handler of oz0.orchestrator.v1.SandboxNodeService: sandbox nodes'
// heartbeats into the node registry. Sandboxes run untrusted code, so they
// get no database credentials; they hold only the shared node token, and a
// caller without it cannot register a node of its own and receive sessions.
// With node identities (Kubernetes, cluster/node-identity.ts) a heartbeat
// also proves which pod sent it, and may register only that pod's node.
// The service is served on a listener of its own (startNodeListener), whose
// only credential is the node token, so that token reaches nothing else.
import { Code, ConnectError } from "@connectrpc/connect";
import { SandboxNodeService, type HeartbeatRequest } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import {
  Authenticator,
  credentialDigest,
  NODE_IDENTITY_HEADER,
  PEER_ADDRESS,
  registration,
  serve,
  SummarisedLog,
  type Logger,
  type RunningServer,
  type ServiceRegistration,
} from "@oz0/serving";
import { NodeIdentityError, type NodeIdentity } from "../cluster/node-identity.js";
import { NodePinnedError, type SandboxNode, type SandboxNodeRegistry } from "../cluster/sandbox-node-registry.js";
import { untracedProbes } from "../tracing.js";

export interface SandboxNodeServiceOptions {
  registry: Pick<SandboxNodeRegistry, "register" | "staleAfterMs">;
  /** OZ0_NODE_TOKEN, shared with the sandboxes; they send it as `authorization: Bearer <token>`. */
  nodeToken: string;
  /** The most sessions a node may offer (OZ0_MAX_NODE_CAPACITY). Default DEFAULT_MAX_NODE_CAPACITY. */
  maxNodeCapacity?: number;
  /** With it, a heartbeat must also carry its pod's identity token, and may register only that pod's node. */
  identity?: NodeIdentity;
  logger?: Logger;
}

/** A shorter shared token is too easy to guess for what it guards (receiving sessions). */
export const MIN_NODE_TOKEN_LENGTH = 16;
/**
 * Placement takes the node with the smallest share of its capacity in use: a heartbeat claiming 100,000 sessions
 * took nearly every job of the cluster (attacker review). A node offering more than this is refused, saying so.
 */
export const DEFAULT_MAX_NODE_CAPACITY = 256;
/** Every URL is kept in each replica's memory and read at each placement: a node's address, not a document. */
const MAX_URL_LENGTH = 512;
/** Log lines say only what changed for a node; past this many ids the oldest is forgotten (and said again). */
const MAX_KNOWN_NODES = 10_000;
const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,199}$/;

/**
 * The SandboxNodeService for `serve({ services })`. Throws when the node
 * token is missing or short: an orchestrator that takes heartbeats must
 * not take them from anyone.
 */
export function sandboxNodeServices(options: SandboxNodeServiceOptions): ServiceRegistration[] {
  if (options.nodeToken.length < MIN_NODE_TOKEN_LENGTH) {
    throw new Error(
      `OZ0_NODE_TOKEN must be set to at least ${MIN_NODE_TOKEN_LENGTH} characters (the same value on the orchestrators and the sandboxes; for example \`openssl rand -base64 32\`)`,
    );
  }
  const maxCapacity = options.maxNodeCapacity ?? DEFAULT_MAX_NODE_CAPACITY;
  const known = new Map<string, string>();
  // By source address, the first at once and the rest summed up a minute: a heartbeat comes every few seconds.
  const refusals = new SummarisedLog<"NODE_IDENTITY_REFUSED">({
    otherSources: "(other addresses)",
    summarise: (from, { kind, details, total }) =>
      options.logger?.warn(
        { code: kind, from, heartbeats: total, nodes: Object.fromEntries(details) },
        `${total} more heartbeats from ${from} were refused for their node identity`,
      ),
  });
  return [
    registration(SandboxNodeService, {
      async heartbeat(request, context) {
        const node = validNode(request, maxCapacity);
        const peer = context.values.get(PEER_ADDRESS);
        let registered: SandboxNode;
        try {
          const pod = await options.identity?.verify(context.requestHeader.get(NODE_IDENTITY_HEADER) ?? undefined, {
            nodeId: node.id,
            url: node.url,
            peerAddress: peer,
          });
          registered = await options.registry.register({ ...node, ...(pod ? { pod } : {}) });
        } catch (error) {
          if (!(error instanceof NodeIdentityError || error instanceof NodePinnedError)) throw error;
          // Logged by source address, not by node id: a caller with the node token alone chooses the id, and
          // logged a line per id it made up.
          const kind = error instanceof NodeIdentityError && error.missing ? "missing" : "refused";
          refusals.add(peer ?? "?", "NODE_IDENTITY_REFUSED", `${kind} ${node.id}`, () =>
            options.logger?.warn(
              { code: "NODE_IDENTITY_REFUSED", node: node.id, url: node.url, from: peer, reason: error.message },
              "a heartbeat's node identity was refused",
            ),
          );
          throw new ConnectError(
            error.message,
            error instanceof NodeIdentityError && error.missing ? Code.Unauthenticated : Code.PermissionDenied,
          );
        }
        const shape = `${node.url} ${node.capacity}`;
        if (known.get(node.id) !== shape) {
          // Only what changed: a node sends one heartbeat every few seconds.
          known.delete(node.id);
          known.set(node.id, shape);
          if (known.size > MAX_KNOWN_NODES) known.delete(known.keys().next().value!);
          options.logger?.info(
            {
              node: node.id,
              url: node.url,
              capacity: node.capacity,
              running: request.running,
              placed: registered.placed,
            },
            "sandbox node registered",
          );
        }
        return { placed: registered.placed, staleAfterMs: options.registry.staleAfterMs };
      },
    }),
  ];
}

/**
 * The node API's own listener (OZ0_NODE_PORT, default 7710): it serves
 * SandboxNodeService and health, and accepts the node token and nothing else.
 * The public API never accepts the node token, so a sandbox pod that holds it
 * reaches no job, approval or secret.
 */
export async function startNodeListener(
  options: SandboxNodeServiceOptions & { host: string; port: number; maxMessageBytes?: number },
): Promise<RunningServer> {
  const services = sandboxNodeServices(options);
  return serve({
    name: "orchestrator-node-api",
    host: options.host,
    port: options.port,
    services,
    auth: new Authenticator({ nodeTokenSha256: credentialDigest(options.nodeToken) }),
    credentialHint: "sandbox nodes send OZ0_NODE_TOKEN; set it on the sandbox to the value the orchestrators have",
    // Heartbeats and health checks are no trace's work (tracing.ts).
    untracedRpcs: untracedProbes,
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.maxMessageBytes !== undefined ? { maxMessageBytes: options.maxMessageBytes } : {}),
  });
}

function validNode(request: HeartbeatRequest, maxCapacity: number): { id: string; url: string; capacity: number } {
  if (!NODE_ID.test(request.nodeId)) {
    throw new ConnectError(
      "node_id must be 1 to 200 letters, digits or . _ : @ - (OZ0_NODE_ID; default hostname:port)",
      Code.InvalidArgument,
    );
  }
  if (request.url.length > MAX_URL_LENGTH)
    throw new ConnectError(
      `url has ${request.url.length} characters, more than ${MAX_URL_LENGTH}: OZ0_ADVERTISE_URL is where orchestrators reach the sandbox, such as http://10.0.0.7:7701`,
      Code.InvalidArgument,
    );
  let url: URL;
  try {
    url = new URL(request.url);
  } catch {
    throw new ConnectError(
      `url ${JSON.stringify(request.url)} is not a URL: set OZ0_ADVERTISE_URL to where orchestrators reach the sandbox, for example http://node-1:7701`,
      Code.InvalidArgument,
    );
  }
  if (
    (url.protocol !== "http:" && url.protocol !== "https:") ||
    url.username ||
    url.password ||
    url.search ||
    url.hash ||
    url.pathname !== "/"
  ) {
    throw new ConnectError(
      `url ${request.url} must be a plain http:// or https:// URL with no path, such as http://10.0.0.7:7701 (OZ0_ADVERTISE_URL)`,
      Code.InvalidArgument,
    );
  }
  if (request.capacity > maxCapacity) {
    throw new ConnectError(
      `capacity ${request.capacity} is more than the ${maxCapacity} sessions an orchestrator takes from one node: lower the sandbox's OZ0_MAX_SESSIONS, or raise the orchestrators' OZ0_MAX_NODE_CAPACITY`,
      Code.InvalidArgument,
    );
  }
  // One spelling per node, so a stored job's sandboxUrl finds its runner again.
  return { id: request.nodeId, url: url.href.replace(/\/+$/, ""), capacity: request.capacity };
}
