// Which sandbox node a session runs on. StaticPlacement: a fixed list of
// nodes (OZ0_SANDBOX_URLS), round robin, each node refusing what it has no
// room for. RegistryPlacement: nodes that register themselves with heartbeats
// (sandbox-node-service.ts), placed by free capacity through the PostgreSQL
// registry every orchestrator replica shares, so capacity is counted once and
// the sessions of a node that went silent are reported lost.
import { createHash } from "node:crypto";
import type { Logger } from "@oz0/serving";
import { invalidArgument, OrchestratorError } from "../orchestrator-error.js";
import { SandboxClient } from "./sandbox-client.js";
import type { LostSession, SandboxNodeRegistry } from "../cluster/sandbox-node-registry.js";
import type { SessionRunner } from "./session-runner.js";
import { orchestratorTracing } from "../tracing.js";

export type { LostSession } from "../cluster/sandbox-node-registry.js";

export interface SandboxPlacement {
  /** True when nodes send heartbeats, so a lost node is known (`lostSessions`) rather than guessed from failed connections. */
  readonly tracksNodes: boolean;
  /**
   * A runner for a new session, or undefined when every node is full (the job
   * waits and asks again). `refusedBy`: the node that just refused this
   * session for want of room; another is chosen when there is one.
   */
  place(request: { jobId: string; sessionId: string; refusedBy?: string }): Promise<SessionRunner | undefined>;
  /**
   * The runner of the node a stored job's session is on, to re-attach or
   * cancel: found by the node's id where nodes register (a node that came
   * back at another address is found there), else by the job's sandboxUrl.
   */
  runnerForSession(job: { sessionId: string; sandboxUrl: string }): Promise<SessionRunner>;
  /** The session ended, or is to be placed afresh: free its slot (`fromNode`: only if it is still there). */
  release(sessionId: string, options?: { fromNode?: string }): Promise<void>;
  /** Sessions whose node stopped sending heartbeats (empty for static placement). */
  lostSessions(): Promise<LostSession[]>;
  /** The session, when its node stopped sending heartbeats (never for static placement). */
  lostSession(sessionId: string): Promise<LostSession | undefined>;
}

/**
 * The configured nodes, chosen by the session id's hash: spread evenly, and
 * the same node again for the same session (a graph's custom step, placed
 * again after a restart, finds the session it started). A full node answers
 * RESOURCE_EXHAUSTED (SandboxFullError) and the job asks the next node in the
 * list; nothing is ever lost here, because nothing watches these nodes'
 * heartbeats.
 */
export class StaticPlacement implements SandboxPlacement {
  readonly tracksNodes = false;
  readonly #runners: SessionRunner[];
  readonly #localStack: boolean;

  /**
   * `runners` as they are: wrap them for tracing before (start-orchestrator.ts does). `localStack`: the list
   * is the sandbox of a local stack (`oz0 dev` or an `oz0` command's embedded one, OZ0_LOCAL_STACK), which
   * takes a new port at each start and reads no OZ0_SANDBOX_URLS from anyone.
   */
  constructor(options: { runners: SessionRunner[]; localStack?: boolean }) {
    if (options.runners.length === 0) throw invalidArgument("no sandbox configured: set OZ0_SANDBOX_URLS");
    this.#runners = [...options.runners];
    this.#localStack = options.localStack ?? false;
  }

  place(request: { jobId: string; sessionId: string; refusedBy?: string }): Promise<SessionRunner> {
    const refused =
      request.refusedBy === undefined ? -1 : this.#runners.findIndex((runner) => runner.url === request.refusedBy);
    // A full node: the next one in the list, so a waiting job goes round the nodes rather than asking one.
    if (refused >= 0) return Promise.resolve(this.#runners[(refused + 1) % this.#runners.length]!);
    const hash = createHash("sha256").update(request.sessionId).digest().readUInt32BE(0);
    return Promise.resolve(this.#runners[hash % this.#runners.length]!);
  }

  runnerForSession(job: { sessionId: string; sandboxUrl: string }): Promise<SessionRunner> {
    return Promise.resolve(this.runnerFor(job.sandboxUrl));
  }

  /** The configured node at `url`. */
  runnerFor(url: string): SessionRunner {
    const found = this.#runners.find((runner) => runner.url === url);
    if (found) return found;
    // A local stack's job outlives its sandbox only when the stack stopped under it (an interrupted command,
    // a stopped `oz0 dev`): that sandbox went with it, and OZ0_SANDBOX_URLS is no setting of a local stack.
    throw new OrchestratorError(
      "unavailable",
      this.#localStack
        ? `the job was started by an earlier run of this local stack (an \`oz0\` command or \`oz0 dev\` that stopped), and its sandbox ${url} went with it: the job cannot continue; run it again`
        : `the job's sandbox ${url} is not configured any more; add it to OZ0_SANDBOX_URLS`,
    );
  }

  release(_sessionId: string, _options?: { fromNode?: string }): Promise<void> {
    return Promise.resolve();
  }

  lostSessions(): Promise<LostSession[]> {
    return Promise.resolve([]);
  }

  lostSession(_sessionId: string): Promise<LostSession | undefined> {
    return Promise.resolve(undefined);
  }
}

export interface RegistryPlacementOptions {
  /** The shared registry (PostgresCluster.nodes). */
  registry: Pick<
    SandboxNodeRegistry,
    "place" | "release" | "lostSessions" | "lostSession" | "listLive" | "nodeOfSession"
  >;
  /** The runner for a node's URL; default a SandboxClient with a session span around each session. */
  connect?: (url: string) => SessionRunner;
  /** The orchestrator's credential for sandboxes, for the default SandboxClient (sandboxes take sessions only from orchestrators). */
  sandboxToken?: string;
  logger?: Logger;
}

/**
 * Sessions go to live nodes (a heartbeat within the registry's stale limit)
 * with free capacity, the least loaded first. Placing the same session id
 * again returns its node, live or not, so a retried placement (or a graph
 * step's session placed again after a restart) takes no second slot and finds
 * its node; to move a session off a silent node, release it first.
 */
export class RegistryPlacement implements SandboxPlacement {
  readonly tracksNodes = true;
  readonly #o: RegistryPlacementOptions;
  readonly #runners = new Map<string, SessionRunner>();
  /** What was last logged about why nothing could be placed, so a waiting job does not log on every try. */
  #noRoom: "no_nodes" | "all_full" | undefined;

  constructor(options: RegistryPlacementOptions) {
    this.#o = options;
  }

  async place(request: { jobId: string; sessionId: string }): Promise<SessionRunner | undefined> {
    const placement = await this.#o.registry.place(request);
    if (placement) {
      this.#noRoom = undefined;
      return this.runnerFor(placement.node.url);
    }
    const why = (await this.#o.registry.listLive()).length === 0 ? "no_nodes" : "all_full";
    if (why !== this.#noRoom) {
      this.#noRoom = why;
      if (why === "no_nodes") {
        this.#o.logger?.warn(
          "no sandbox node sends heartbeats: jobs wait until one does (set OZ0_ORCHESTRATOR_URL and OZ0_NODE_TOKEN on the sandboxes)",
        );
      } else {
        this.#o.logger?.info("every live sandbox node is full: jobs wait for a free session");
      }
    }
    return undefined;
  }

  async runnerForSession(job: { sessionId: string; sandboxUrl: string }): Promise<SessionRunner> {
    const node = await this.#o.registry.nodeOfSession(job.sessionId);
    return this.runnerFor(node?.url ?? job.sandboxUrl);
  }

  /** The runner of the node at `url` (one per URL). */
  runnerFor(url: string): SessionRunner {
    let runner = this.#runners.get(url);
    if (!runner) {
      runner = this.#o.connect
        ? this.#o.connect(url)
        : orchestratorTracing.sessionRunner(new SandboxClient({ url, token: this.#o.sandboxToken }));
      this.#runners.set(url, runner);
    }
    return runner;
  }

  async release(sessionId: string, options: { fromNode?: string } = {}): Promise<void> {
    await this.#o.registry.release(sessionId, options);
  }

  lostSessions(): Promise<LostSession[]> {
    return this.#o.registry.lostSessions();
  }

  lostSession(sessionId: string): Promise<LostSession | undefined> {
    return this.#o.registry.lostSession(sessionId);
  }
}
