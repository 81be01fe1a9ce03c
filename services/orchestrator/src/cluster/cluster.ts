// The cluster seam: everything that decides which orchestrator works on
// which job, and what happens when one stops, behind one interface. Leases
// and their fencing, takeover of a dead replica's jobs, the sandbox node
// registry and the notices replicas send each other are PostgreSQL's
// (postgres-cluster.ts); one orchestrator on SQLite is a cluster of one
// (`soleCluster`): it owns every job and resumes them all when it starts.
// The lifecycle-event outbox beside it (lifecycle-outbox.ts) ships from
// whichever store the cluster has. start-orchestrator.ts wires the job
// runner and graph jobs to this interface only, so a durable-execution
// engine could take the seam over (docs/architecture.md, "Past one machine").
import type { GraphStoreSharing } from "../store/graph-store.js";
import type { JobStore } from "../store/job-store.js";
import type { ApprovalAnswered, CancelRequested, EventsAppended } from "./cluster-notifier.js";
import { soleOwnership, type JobOwnership } from "./job-ownership.js";
import type { Lease } from "./lease-manager.js";
import type { SandboxNodeRegistry } from "./sandbox-node-registry.js";

/** What the orchestrator does with the work it resumes, takes over, loses, or hears of. */
export interface ClusterHandlers {
  /** One orchestrator, starting: resume every job that was running when it stopped. */
  onResumeAll: () => Promise<void>;
  /** Resume a job this replica now owns (its lease is already adopted): re-attach its session or resume its graph run. */
  onTakeOver: (lease: Lease) => Promise<void>;
  /** A lease was lost (this replica was too slow to renew): stop working on the job at once. */
  onLeaseLost: (lease: Lease) => void;
  /** An approval was answered at some replica; act on it when this replica owns the job. */
  onApprovalAnswered: (answer: ApprovalAnswered) => void;
  /** Listening resumed after the connection was lost: re-read undelivered answers of the jobs this replica owns. */
  onApprovalsReconnected?: () => void;
  /** A job was cancelled at some replica; when this replica owns it, make sure its session stops. */
  onCancelRequested?: (cancel: CancelRequested) => void;
}

export interface Cluster {
  /** The job store; on a shared database its job writes are fenced by this replica's leases. */
  readonly store: JobStore;
  /** The jobs this replica works on. */
  readonly ownership: JobOwnership;
  /** Sandbox nodes that register themselves with heartbeats, when the cluster keeps a registry. */
  readonly nodes?: SandboxNodeRegistry;
  /** What graph stores share with the job store (a pool and the lease fences), when they share it. */
  readonly graphStore?: GraphStoreSharing;
  /** Hear of job events other replicas append (for watchers here); undefined when nothing else appends. */
  subscribeAppended?(handler: (appended: EventsAppended) => void): () => void;
  /** Begin: resume, listen, renew and sweep, calling `handlers` for the work this replica gets. */
  start(handlers: ClusterHandlers): Promise<void>;
  /** Stop; a replica's leases are left to expire so another takes its work over. Closes the store. */
  close(): Promise<void>;
}

/** One orchestrator: it owns every job, and resumes them all when it starts. */
export function soleCluster(store: JobStore): Cluster {
  return {
    store,
    ownership: soleOwnership,
    start: (handlers) => handlers.onResumeAll(),
    close: () => store.close(),
  };
}
