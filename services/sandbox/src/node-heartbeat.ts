// Heartbeats to the orchestrators (OZ0_ORCHESTRATOR_URL): this node's id, the
// URL orchestrators reach it at, its capacity and how many sessions it runs,
// so sessions are placed on it while it is alive and has room. The node holds
// only the shared node token, never database credentials. An orchestrator
// that does not answer is logged, never fatal: the node keeps serving its
// sessions and the next heartbeat tries again. With several orchestrator
// URLs a heartbeat goes to the one that last answered, and on to the next
// when it does not: any replica records it in the shared registry.
import { readFile } from "node:fs/promises";
import os from "node:os";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { SandboxNodeService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { isWildcardHost, NODE_IDENTITY_HEADER, type Logger } from "@oz0/serving";

export interface NodeHeartbeatOptions {
  /** One or more orchestrator replicas (or one Service URL in front of them). */
  orchestratorUrls: string[];
  /** OZ0_NODE_TOKEN, sent as `authorization: Bearer`. */
  nodeToken: string;
  /**
   * The file the kubelet keeps this pod's projected service-account token in (OZ0_NODE_IDENTITY_TOKEN_FILE), sent in
   * NODE_IDENTITY_HEADER. Read again for every heartbeat: the kubelet replaces it well before it expires.
   */
  identityTokenFile?: string;
  nodeId: string;
  /** Where orchestrators reach this node's SandboxService. */
  advertiseUrl: string;
  /**
   * The node's capacity and running sessions now. When it throws (a sidecar
   * whose sandbox does not answer), no heartbeat is sent: the node goes
   * stale, as it should.
   */
  status: () => NodeStatus | Promise<NodeStatus>;
  intervalMs: number;
  logger: Logger;
}

export interface NodeStatus {
  /** Sessions the node takes at once; 0 while it drains. */
  capacity: number;
  /** Sessions running now. */
  running: number;
}

export interface NodeHeartbeat {
  /** Settles when the first heartbeat was answered or failed (never rejects). */
  readonly first: Promise<void>;
  /**
   * Stops sending. With `drain`, a last heartbeat advertises capacity 0
   * first, so no new session is placed here while the running ones end.
   */
  stop(options?: { drain?: boolean }): Promise<void>;
}

/** What an orchestrator answers a heartbeat it will never take as it is: the same at every replica. */
const REFUSALS = new Set([Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument]);

const LOOPBACK_HOST = /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])$/;

/** The node's identity when OZ0_NODE_ID / OZ0_ADVERTISE_URL are unset: hostname:port, and the server's own URL (the hostname when it listens on every address). */
export function defaultNodeIdentity(options: { host: string | undefined; port: number; url: string }): {
  nodeId: string;
  advertiseUrl: string;
} {
  const hostname = os.hostname();
  return {
    nodeId: `${hostname}:${options.port}`,
    advertiseUrl: isWildcardHost(options.host ?? "127.0.0.1") ? `http://${hostname}:${options.port}` : options.url,
  };
}

export function startNodeHeartbeat(options: NodeHeartbeatOptions): NodeHeartbeat {
  const { logger } = options;
  if (options.orchestratorUrls.length === 0) throw new Error("startNodeHeartbeat needs at least one orchestrator URL");
  const clients = options.orchestratorUrls.map((url) => ({
    url,
    client: createClient(SandboxNodeService, createGrpcTransport({ baseUrl: url })),
  }));
  // The replica that answered last; a failure moves on to the next.
  let current = 0;
  const headers = { authorization: `Bearer ${options.nodeToken}` };
  const timeoutMs = Math.min(Math.max(options.intervalMs, 1_000), 10_000);
  const context = { orchestrator: options.orchestratorUrls.join(","), node: options.nodeId, url: options.advertiseUrl };
  if (
    LOOPBACK_HOST.test(new URL(options.advertiseUrl).hostname) &&
    options.orchestratorUrls.some((url) => !LOOPBACK_HOST.test(new URL(url).hostname))
  ) {
    logger.warn(
      context,
      "this node advertises a loopback URL to an orchestrator elsewhere, which cannot reach it there; set OZ0_ADVERTISE_URL (or OZ0_HOST)",
    );
  }
  const abort = new AbortController();
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let inFlight: Promise<void> = Promise.resolve();
  // What the last heartbeat came to, so a lasting failure is logged once, not every few seconds.
  let last: string | undefined;
  let warnedInterval = false;

  /** Sends to the replica that answered last, then the others in turn; the first answer wins. */
  async function send(
    status: NodeStatus,
    identity: Record<string, string>,
  ): Promise<{ placed: number; staleAfterMs: number }> {
    let failure: unknown;
    for (let tried = 0; tried < clients.length; tried++) {
      const { client } = clients[(current + tried) % clients.length]!;
      try {
        const response = await client.heartbeat(
          { nodeId: options.nodeId, url: options.advertiseUrl, capacity: status.capacity, running: status.running },
          { headers: { ...headers, ...identity }, signal: abort.signal, timeoutMs },
        );
        current = (current + tried) % clients.length;
        return response;
      } catch (error) {
        failure = error;
        const code = ConnectError.from(error).code;
        // A refusal is the same at every replica (they share the token and the cluster's keys); only an unreachable one is skipped.
        if (abort.signal.aborted || REFUSALS.has(code)) break;
      }
    }
    throw failure;
  }

  /** One heartbeat; `draining` advertises capacity 0 (and sends even when the status cannot be read). */
  async function beat(draining: boolean): Promise<void> {
    let status: NodeStatus;
    try {
      status = await options.status();
    } catch (error) {
      if (draining) {
        status = { capacity: 0, running: 0 };
      } else {
        // Once until a heartbeat goes out again, whatever the error says this time: a dying sandbox
        // answers "connection refused", then "reset", then something else.
        const problem = "status unreadable";
        if (problem !== last) {
          logger.warn(
            { ...context, err: (error as Error).message },
            "cannot read this node's status, so no heartbeat is sent (orchestrators stop placing here) until it can be read",
          );
          last = problem;
        }
        return;
      }
    }
    if (draining) status = { ...status, capacity: 0 };
    const identity = await identityHeader();
    // Without it every orchestrator refuses the heartbeat: as with an unreadable status, none is sent.
    if (identity === undefined) return;
    try {
      const response = await send(status, identity);
      if (last !== "ok")
        logger.info(
          { ...context, capacity: status.capacity, placed: response.placed, staleAfterMs: response.staleAfterMs },
          "sending heartbeats to the orchestrator",
        );
      last = "ok";
      if (!warnedInterval && response.staleAfterMs > 0 && options.intervalMs * 2 > response.staleAfterMs) {
        warnedInterval = true;
        logger.warn(
          { ...context, heartbeatMs: options.intervalMs, staleAfterMs: response.staleAfterMs },
          "heartbeats come too seldom for the orchestrator's stale limit: one late heartbeat would lose this node's sessions; lower OZ0_HEARTBEAT_MS",
        );
      }
    } catch (error) {
      if (abort.signal.aborted) return;
      const err = ConnectError.from(error);
      // A refused token or identity is a configuration mistake; anything else may pass (the orchestrator restarts).
      const misconfigured = REFUSALS.has(err.code) || err.code === Code.Unimplemented;
      // An orchestrator that is away answers "refused", then "reset", then a deadline: one lasting
      // failure, logged once until a heartbeat goes through. A refusal is logged for each new reason.
      const problem = misconfigured ? `${Code[err.code]}: ${err.rawMessage}` : "unreachable";
      if (problem === last) {
        logger.debug({ ...context, code: Code[err.code], err: err.rawMessage }, "heartbeat failed again");
        return;
      }
      last = problem;
      logger[misconfigured ? "error" : "warn"](
        { ...context, code: Code[err.code], err: err.rawMessage, retryMs: options.intervalMs },
        misconfigured
          ? "the orchestrator refuses this node's heartbeats; it gets no sessions until that is fixed"
          : "could not send a heartbeat to the orchestrator; trying again",
      );
    }
  }

  /** The identity header with the token as it is now; undefined (logged once) when the file cannot be read. */
  async function identityHeader(): Promise<Record<string, string> | undefined> {
    if (options.identityTokenFile === undefined) return {};
    try {
      const token = (await readFile(options.identityTokenFile, "utf8")).trim();
      if (token === "") throw new Error("the file is empty");
      return { [NODE_IDENTITY_HEADER]: token };
    } catch (error) {
      const problem = "identity token unreadable";
      if (problem !== last)
        logger.error(
          { ...context, file: options.identityTokenFile, err: (error as Error).message },
          "cannot read this pod's identity token (OZ0_NODE_IDENTITY_TOKEN_FILE), so no heartbeat is sent (orchestrators stop placing here) until it can be read",
        );
      last = problem;
      return undefined;
    }
  }

  function schedule(): void {
    if (stopped) return;
    timer = setTimeout(() => {
      inFlight = beat(false).finally(schedule);
    }, options.intervalMs);
    // The server keeps the process alive, not the heartbeat.
    timer.unref();
  }

  inFlight = beat(false).finally(schedule);
  const first = inFlight;
  let stopping: Promise<void> | undefined;
  return {
    first,
    stop({ drain = false } = {}) {
      stopping ??= (async () => {
        stopped = true;
        clearTimeout(timer);
        if (drain) {
          // After the one in flight, so it cannot land later and advertise the capacity again.
          await inFlight;
          await beat(true);
        }
        abort.abort();
        await inFlight;
      })();
      return stopping;
    },
  };
}
