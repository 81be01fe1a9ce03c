// What the job runner needs from a sandbox node: start a session, re-attach
// to it by session id after the last sequence number handled, answer its
// permission requests, cancel it. sandbox-client.ts implements it over the
// sandbox's RunSession stream.
import type { LifecycleType, RawEventInit } from "@oz0/events-client";
import type { RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import type {
  PermissionAnswer,
  RuntimeToolResult,
  SessionEvent,
  SessionRequest,
  SessionResult,
} from "@oz0/proto/oz0/harness/v1/harness_pb";

export interface SessionArtifact {
  name: string;
  mediaType: string;
  content: Uint8Array;
}

/**
 * One message of a session, numbered by the sandbox (per session, from 1). `bytes`: what the node sent for it, as
 * decoded (sandbox-client.ts), counted against the session's byte budget (session-driver.ts); a runner that reads
 * from no node (a test's) may leave it out.
 */
export type SandboxMessage = { bytes?: number } & (
  | {
      seq: number;
      kind: "started";
      sessionId: string;
      /** How the node isolates it (`none`, `bwrap`, `user`), as the node says; for the job's session.started. */
      isolation?: string;
    }
  | { seq: number; kind: "event"; event: SessionEvent }
  /** A piece of the harness's stderr, the session token scrubbed; `droppedBytes` were written just before `text` and not kept. */
  | { seq: number; kind: "stderr"; sessionId: string; text: string; droppedBytes: number }
  | {
      seq: number;
      kind: "exited";
      exitCode: number;
      signal: string;
      /** What went wrong, when the session failed or timed out (`code: message`); empty otherwise. */
      error: string;
      /** How it ended from the node's side (`completed`, `failed`, `cancelled`, `timed_out`), for session.ended. */
      status?: string;
      /** The node's code for the first problem it saw (`no_result`, `deadline_exceeded`, …); empty when none. */
      errorCode?: string;
      /**
       * Set when the sandbox failed the session (the harness broke the
       * protocol or a limit): whoever consumes the session fails with it,
       * whatever result the harness wrote, since that result cannot be
       * trusted. For example `the harness broke the protocol:
       * duplicate_result: the harness wrote a second result; …`.
       */
      failure?: string;
      /**
       * Set when a session asked to stop (cancelled) did not stop on SIGTERM and was killed: the node's words
       * (`ignored_sigterm: the harness was still running 10000 ms after SIGTERM and was killed`). The job ends as
       * the stop made it end; this says how its harness took the stop.
       */
      killedAfterStop?: string;
      result?: SessionResult;
      /** The last few KiB of the harness's stderr, scrubbed (for a failure message: harness-stderr.ts). */
      stderrTail?: string;
    }
  | {
      seq: number;
      kind: "artifacts";
      artifacts: SessionArtifact[];
      /** Why the node could not collect them (all, or some): its words. */
      error?: string;
    }
);

export interface StartSessionOptions {
  request: SessionRequest;
  /** The harness command, paths already absolute. */
  command: string[];
  /** The plugin's folder (the harness's own files). */
  pluginDir: string;
  /** Absolute paths copied into the working directory. */
  attachments: string[];
  /** Run in the live working directory of this other session (a harness operation's scratch session); attachments must be empty. */
  shareWorkingDirOf?: string;
}

export interface SessionChannel extends AsyncIterable<SandboxMessage> {
  /** When the node answered the call (its response headers came), in ms since the epoch; undefined until then. */
  readonly answeredAt?: number | undefined;
  answerPermission(answer: PermissionAnswer): Promise<void>;
  /** Answer one of the session's runtime tool calls. */
  answerRuntimeTool(result: RuntimeToolResult): Promise<void>;
  /** Stop listening (the session keeps running on the sandbox). */
  close(): void;
}

export class SessionNotFoundError extends Error {
  constructor(sessionId: string) {
    super(`session ${sessionId} is not known to the sandbox`);
    this.name = "SessionNotFoundError";
  }
}

/**
 * The sandbox node takes no session now: it runs as many as it may (OZ0_MAX_SESSIONS), or its disk is below its floor
 * (OZ0_SANDBOX_MIN_FREE_BYTES), as `reason` says; try another node, or again later.
 */
export class SandboxFullError extends Error {
  constructor(url: string, reason: string) {
    super(`the sandbox at ${url} takes no session now: ${reason}`);
    this.name = "SandboxFullError";
  }
}

/**
 * The sandbox refused this orchestrator's credential: a configuration error
 * that trying again does not mend, so the job fails at once saying what to set.
 */
export class SandboxRefusedError extends Error {
  constructor(url: string, reason: string) {
    super(
      `the sandbox at ${url} refused this orchestrator (${reason}); give the sandbox the SHA-256 of the orchestrator's OZ0_SERVICE_TOKEN_FOR_SANDBOX (or, without one, of its OZ0_SERVICE_TOKEN) as OZ0_PEER_ORCHESTRATOR_SHA256`,
    );
    this.name = "SandboxRefusedError";
  }
}

/**
 * The node answered a message larger than this orchestrator reads (SANDBOX_READ_MAX_BYTES, decompressed): a node
 * sending it again on every re-attach would keep the job, so the job fails at once, saying so.
 */
export class SandboxAnswerTooLargeError extends Error {
  constructor(url: string, reason: string) {
    super(
      `the sandbox at ${url} answered a message larger than the orchestrator reads (${reason}); a session's artifacts must fit in it: lower the sandbox's OZ0_MAX_ARTIFACT_BYTES`,
    );
    this.name = "SandboxAnswerTooLargeError";
  }
}

/**
 * The node sent more about one session than the orchestrator takes (OZ0_MAX_SESSION_BYTES, counted across the
 * session's streams, re-attaches included). Each message is bounded (SANDBOX_READ_MAX_BYTES), but a node that sent
 * events, stderr or artifacts without end filled the orchestrator's store (attacker review): what it sends is
 * followed no further, the session is cancelled at its node, and its job (or operation, or step) fails with this.
 */
export class SessionTooLargeError extends Error {
  readonly code = "session_too_large";
  constructor(options: { url: string; sessionId: string; receivedBytes: number; maxBytes: number }) {
    super(
      `session_too_large: the sandbox node at ${options.url} sent ${options.receivedBytes} bytes about session ${options.sessionId}, more than the ${options.maxBytes} a session may send (OZ0_MAX_SESSION_BYTES); the node was asked to cancel the session, and nothing past the budget was stored. A session that needs more (a very long transcript, large artifacts) runs with a larger OZ0_MAX_SESSION_BYTES`,
    );
    this.name = "SessionTooLargeError";
  }
}

export interface SessionRunner {
  readonly url: string;
  start(options: StartSessionOptions): SessionChannel;
  /** Messages with seq > afterSeq; the channel throws SessionNotFoundError when the sandbox has no such session. */
  reattach(options: { sessionId: string; afterSeq: number }): SessionChannel;
  /** SIGTERM to the session's process group, SIGKILL after the grace period. */
  cancel(options: { sessionId: string; reason: string }): Promise<void>;
}

/** Session tokens at the LLM proxy. */
export interface TokenIssuer {
  mint(options: {
    jobId: string;
    agent: string;
    agentVersion: number;
    sessionId: string;
    budgetUsd?: number;
    /** The session whose budget this token's calls spend (a harness operation's scratch session spends its parent's). */
    budgetSession?: string;
    /** The most model calls the session may make (the agent's limits.max_steps); absent: no limit. */
    maxModelCalls?: number;
  }): Promise<MintedToken>;
  /**
   * Ends the session's token. `neverUsed`: the proxy knows that no model call
   * ever carried it, which proves the session never reached a model (nor
   * will, now); false when it was used or nothing is known.
   */
  revoke(options: { tokenId: string }): Promise<{ neverUsed: boolean }>;
}

export interface MintedToken {
  token: string;
  tokenId: string;
  anthropicBaseUrl: string;
  openaiBaseUrl: string;
  /** Headers every model call carries (Oz0-Job, Oz0-Agent). */
  headers: Record<string, string>;
}

/** A provider key as listed: its name and times, never its value. */
export interface SecretListing {
  name: string;
  createdAt: Date | undefined;
  updatedAt: Date | undefined;
}

/** Provider keys, kept by the LLM proxy: set (write-only), listed by name, deleted. */
export interface ProviderSecrets {
  setSecret(options: { name: string; value: string }): Promise<void>;
  listSecrets(): Promise<SecretListing[]>;
  /** NotFound (OrchestratorError not_found) when there is none by that name. */
  deleteSecret(options: { name: string }): Promise<void>;
}

/** What a lifecycle event says besides its type: the job it is about, and the raw event's other fields (the id and the source are the sink's). */
export type LifecycleInit = Omit<RawEventInit, "id" | "source"> & { jobId: string };

/**
 * Raw lifecycle events for the events service, kept in the job store until
 * it accepts them (cluster/lifecycle-outbox.ts), so a crash loses none. Never blocks,
 * never throws.
 */
export interface LifecycleSink {
  /**
   * The event reporting a job change, to be stored in that change's own
   * transaction (JobAppend.lifecycle), then `committed()`. Undefined when
   * lifecycle events are not published.
   */
  event(type: LifecycleType, init: LifecycleInit): RawEvent | undefined;
  /** A transaction that stored events committed: ship them now rather than at the next poll. */
  committed(): void;
  /** An event with no job write of its own: stored on its own, then shipped. */
  publish(type: LifecycleType, init: LifecycleInit): void;
  /**
   * The id of the job's trace once its `job.created` or `graph.run_started`
   * event was made, when that trace is exported (tracing.ts); else undefined.
   */
  traceIdOf?(jobId: string): string | undefined;
  /**
   * The job's root span as a W3C traceparent once that event was made (even
   * when not sampled: a resumed job keeps the sampling decision), to store
   * with the job; else undefined.
   */
  traceparentOf?(jobId: string): string | undefined;
  /**
   * The job whose `job.created` (or `graph.run_started`) event was made is
   * not stored after all (its creation's transaction failed): what the event
   * began for it (its trace's root span) ends, failed, and is forgotten.
   */
  withdrawn?(jobId: string): void;
  /**
   * A job this process did not start is worked on here (a restart, a
   * takeover): its further work continues the trace of its stored traceparent.
   */
  resumed?(job: { id: string; agentName: string; sessionId: string; traceparent?: string; tokenId: string }): void;
  close(): Promise<void>;
}
