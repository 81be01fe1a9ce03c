// The session side of a job, on the session driver: mint its token, start
// its session on a node with room, follow it, re-attach to it after a
// restart or a takeover (writing again what it may have missed), and deal
// with the ways it cannot be followed: a node that does not know it, a node
// that went silent. A session proven never to have reached a model (its
// token unused) may start again, elsewhere; any other lost session fails its
// job. What a session's messages mean for the job is the job runner's
// (`handle`), as is finishing the job (`finish`).
import type { RuntimeTool } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { Logger } from "@oz0/serving";
import { parseDuration } from "../agents/agent-versions.js";
import type { ApprovalService } from "../approvals/approval-service.js";
import type { JobOwnership } from "../cluster/job-ownership.js";
import { LeaseLostError } from "../cluster/lease-manager.js";
import { operationRuntimeTools, type OperationParent, type OperationRunner } from "../operations/operation-runner.js";
import type { LostSession, SandboxPlacement } from "../sessions/sandbox-placement.js";
import { SessionDriver, type FollowOptions, type PlaceOptions, type SessionEnd } from "../sessions/session-driver.js";
import { agentSessionStart } from "../sessions/session-request.js";
import type { LifecycleSink, SandboxMessage, SessionRunner, TokenIssuer } from "../sessions/session-runner.js";
import { newSessionId } from "../store/ids.js";
import {
  ACTIVE_JOB_STATES,
  isTerminal,
  type AgentVersionRecord,
  type JobPatch,
  type JobRecord,
  type JobStore,
} from "../store/job-store.js";
import type { ActiveJob, ActiveJobs } from "./active-jobs.js";
import { appendJobStep, stateChanged } from "./job-events.js";
import type { JobFeed } from "./job-feed.js";
import { sendServedAnswer, servedToolCalls, type ServedRuntimeTools } from "./served-tools.js";
import type { SessionStops } from "./session-stops.js";
import { sessionBudget } from "../policy/session-budget.js";

/** Why a pending job has not started, in its events. */
export const WAITING_FOR_ROOM =
  "waiting for a sandbox node with free capacity: every node is full, or none sends heartbeats; the job starts when one has room";

export interface JobSessionsOptions {
  store: JobStore;
  feed: JobFeed;
  lifecycle?: LifecycleSink;
  placement: SandboxPlacement;
  tokens: TokenIssuer;
  logger: Logger;
  ownership: JobOwnership;
  active: ActiveJobs;
  approvals: ApprovalService;
  operations: OperationRunner;
  /** The orchestrator's own clocks on a session's end (session-stops.ts). */
  stops: SessionStops;
  /** Asks the node again to stop the session of a job whose cancel or broken rule is stored, and waits for its end. */
  stopStored(job: JobRecord, active: ActiveJob): void;
  /** A harness operation's scratch session broke a rule: the job fails with it, its session stopped. */
  breakRule(jobId: string, active: ActiveJob, rule: string): Promise<void>;
  /** How often a lost stream is re-attached before the node is suspected. Default 5. */
  reattachAttempts?: number;
  /** Without node heartbeats, how long a lost stream is re-attached before the job fails. Default 30 s. */
  reattachWindowMs?: number;
  /** The runtime tools the orchestrator serves the job itself, if any. */
  served(job: JobRecord): ServedRuntimeTools | undefined;
  /** New messages of the job's session that arrived together, in order (called under the job's lock). */
  handleBurst(jobId: string, active: ActiveJob, messages: SandboxMessage[]): Promise<void>;
  /** Ends the job: from its result, or with `failure`. */
  finish(jobId: string, options: { failure?: string }): Promise<void>;
  /** The budget of a session whose agent sets none (OZ0_DEFAULT_MAX_BUDGET_USD); none by default. */
  defaultBudgetUsd?: number;
  /** The most a node may send about the job's session (OZ0_MAX_SESSION_BYTES). Default 1 GiB. */
  maxSessionBytes?: number;
}

export class JobSessions {
  readonly #o: JobSessionsOptions;
  readonly #driver: SessionDriver;
  #nodeWatch: NodeJS.Timeout | undefined;

  constructor(options: JobSessionsOptions) {
    this.#o = options;
    this.#driver = new SessionDriver({
      placement: options.placement,
      logger: options.logger,
      ...(options.reattachAttempts !== undefined ? { reattachAttempts: options.reattachAttempts } : {}),
      ...(options.reattachWindowMs !== undefined ? { reattachWindowMs: options.reattachWindowMs } : {}),
      ...(options.maxSessionBytes !== undefined ? { maxSessionBytes: options.maxSessionBytes } : {}),
    });
  }

  /** The parent side of a harness operation call: the job's session, its deadline, and its current stream. */
  operationParent(job: JobRecord, active: ActiveJob): OperationParent {
    const timeout = active.agent.definition.limits?.timeout;
    const timeoutMs = timeout ? parseDuration(timeout) : 0;
    return {
      jobId: job.id,
      sessionId: job.sessionId,
      agent: active.agent,
      sandbox: active.sandbox!,
      // From the job's creation: never later than the deadline its session was given.
      ...(timeoutMs > 0 ? { deadline: new Date(job.createdAt.getTime() + timeoutMs) } : {}),
      answer: async (result) => {
        const channel = this.#o.active.get(job.id)?.channel;
        if (!channel) throw new Error("the job's session is not attached");
        await channel.answerRuntimeTool(result);
      },
      brokeRule: (rule) => this.#o.breakRule(job.id, active, rule),
    };
  }

  /** Mints the session's token, places the session, starts it and follows it to its end. */
  /** The runtime tools a job's session is offered: its agent's harness operations, and the tools the job is served. */
  runtimeTools(job: JobRecord, agent: AgentVersionRecord): RuntimeTool[] {
    return [...operationRuntimeTools(agent), ...(this.#o.served(job)?.tools ?? [])];
  }

  async start(job: JobRecord, active: ActiveJob): Promise<void> {
    const agent = active.agent;
    const definition = agent.definition;
    // A token minted for a start that never happened (before a restart or a takeover) is not used again. Its
    // revoke must succeed first: the new token is the same session's, so a sweep still holding the old one to
    // revoke (after a revoke of it failed) would end the new one with it.
    if (job.tokenId) {
      try {
        await this.#o.tokens.revoke({ tokenId: job.tokenId });
      } catch (error) {
        await this.#o.finish(job.id, {
          failure: `could not revoke the session's earlier token at the LLM proxy, so no new one is minted: ${(error as Error).message}`,
        });
        return;
      }
    }
    const budgetUsd = sessionBudget(definition, this.#o.defaultBudgetUsd).usd;
    let token;
    try {
      token = await this.#o.tokens.mint({
        jobId: job.id,
        agent: agent.name,
        agentVersion: agent.version,
        sessionId: job.sessionId,
        ...(budgetUsd !== undefined ? { budgetUsd } : {}),
        // The harness is told the same (limits.max_turns); the proxy holds code in the session that calls the model itself to it.
        ...(definition.limits?.max_steps ? { maxModelCalls: definition.limits.max_steps } : {}),
      });
    } catch (error) {
      await this.#o.finish(job.id, {
        failure: `could not mint a session token at the LLM proxy: ${(error as Error).message}`,
      });
      return;
    }
    const timeoutMs = definition.limits?.timeout ? parseDuration(definition.limits.timeout) : 0;
    const deadline = timeoutMs > 0 ? new Date(Date.now() + timeoutMs) : undefined;
    const start = agentSessionStart({
      sessionId: job.sessionId,
      jobId: job.id,
      agent,
      token,
      input: job.input,
      ...(deadline ? { deadline } : {}),
      // Harness operations, as runtime tools, and the tools this job is served.
      runtimeTools: this.runtimeTools(job, agent),
      attachments: job.attachments,
    });
    if (this.#o.active.closing) return;
    const end = await this.#driver.start({
      ...this.#following(job, active),
      // The token's id is stored with the session's node (or, when every node is full, with the wait): one write.
      // Its deadline is watched once it has a node: a job waiting for room has no session to stop yet.
      place: this.#placing(job, active, {
        minted: token.tokenId,
        ...(deadline
          ? { placed: () => this.#o.stops.watchDeadline(job.id, deadline, definition.limits!.timeout!) }
          : {}),
      }),
      start: (sandbox) => sandbox.start(start),
    });
    await this.#ended(job.id, active, end);
  }

  /** Re-attach to every job that was running when the orchestrator stopped. */
  async resumeAll(): Promise<number> {
    const jobs: JobRecord[] = [];
    for (const state of ACTIVE_JOB_STATES) jobs.push(...(await this.#o.store.listJobs({ state, limit: 100_000 })));
    // A graph run's job has no session of its own: GraphJobs (graph-jobs.ts) resumes it from its checkpoints.
    const agentJobs = jobs.filter((job) => !job.id.startsWith("graph_"));
    for (const job of agentJobs) await this.resume(job);
    return agentJobs.length;
  }

  /**
   * Work on a job this replica just took over (its owner died): re-attach
   * its session, or start it if it never reached a sandbox. Nothing happens
   * when the job ended meanwhile or this replica already follows it (under
   * this lease: JobRunner.resumeJob let go of any follower of an earlier one).
   */
  async resumeJob(jobId: string): Promise<void> {
    const job = await this.#o.store.getJob(jobId);
    if (!job || isTerminal(job.state)) {
      // Ended, but its owner died before letting go: its node slot too, not only the lease.
      if (job?.sessionId) await this.#o.placement.release(job.sessionId);
      await this.#o.ownership.release(jobId);
      return;
    }
    if (this.#o.active.has(jobId)) return;
    await this.resume(job);
  }

  /**
   * Follows a job that was running when this process did not follow it (a
   * restart, a takeover): re-attach its session, or start it if it never
   * reached a sandbox.
   */
  async resume(resumed: JobRecord): Promise<void> {
    let job = resumed;
    // Its further work (the session, the token's revoke, the job's end) continues its stored trace (tracing.ts).
    this.#o.lifecycle?.resumed?.(job);
    const agent = await this.#o.store.getAgentVersion(job.agentName, job.agentVersion);
    if (!agent) {
      await this.#o.finish(job.id, {
        failure: `agent version ${job.agentName} v${job.agentVersion} is missing from the store`,
      });
      return;
    }
    let sandbox: SessionRunner | undefined;
    try {
      // No node yet: the session was never placed, so it is started below.
      sandbox = job.sandboxUrl ? await this.#o.placement.runnerForSession(job) : undefined;
      if (sandbox && job.state === "pending" && job.sandboxSeq === 0 && this.#o.placement.tracksNodes) {
        // Nothing heard from the session yet. On a node that went silent it is given up there and
        // started on a live one, but only when its token proves it never reached a model; otherwise it
        // died with its node, and is reported lost.
        const lost = await this.#o.placement.lostSession(job.sessionId);
        if (lost && (await this.#revokeProvesUnused(job))) {
          job = await this.#renewSession(job, lost);
          sandbox = undefined;
        } else {
          // Its node holds a slot for it only while the session may run there (a slot is given back once
          // a node refused it): without one it never started.
          const placed = await this.#o.placement.place({ jobId: job.id, sessionId: job.sessionId });
          // Placed elsewhere now (or waiting for room): started below, on that node.
          if (placed?.url !== sandbox.url) sandbox = undefined;
        }
      }
    } catch (error) {
      if (error instanceof LeaseLostError) throw error;
      await this.#o.finish(job.id, { failure: (error as Error).message });
      return;
    }
    // Its lease lost meanwhile: whoever takes the job over (this replica too, under a new lease) follows it.
    if (!this.#o.ownership.owns(job.id)) return;
    const active: ActiveJob = {
      agent,
      ...(sandbox ? { sandbox } : {}),
      sandboxSeq: job.sandboxSeq,
      exitError: "",
      // A rule its session broke before the restart (or on the replica before a takeover): the job still fails
      // with it, and what the session changed is still withheld.
      ...(job.ruleBroken ? { violation: job.error || job.ruleBroken } : {}),
    };
    this.#o.active.set(job.id, active);
    await this.#o.approvals.armWaiting(job.id, agent);
    if (job.state === "pending" && (!job.tokenId || !sandbox)) {
      this.#o.active.track(this.start(job, active));
    } else {
      // Pending with nothing heard from the sandbox: the start may never have reached it (its
      // replica died first, or it was full); then the session is started now (#ended).
      if (job.state === "pending" && job.sandboxSeq === 0) active.startIfUnknown = true;
      this.#watchResumed(job, active);
      this.#o.active.track(this.#reattach(job.id, active));
    }
  }

  /**
   * The clocks of a session followed again (session-stops.ts). Its node was given a deadline before the session
   * started, so its start (or, not heard of yet, now) plus the timeout is never earlier than that deadline. A
   * cancel or a broken rule stored before the restart may never have reached its node: it is asked again, and
   * the wait for it starts again.
   */
  #watchResumed(job: JobRecord, active: ActiveJob): void {
    const timeout = active.agent.definition.limits?.timeout;
    const timeoutMs = timeout ? parseDuration(timeout) : 0;
    if (timeoutMs > 0)
      this.#o.stops.watchDeadline(job.id, new Date((job.startedAt ?? new Date()).getTime() + timeoutMs), timeout!);
    if (job.cancelRequestedAt || job.error) this.#o.stopStored(job, active);
  }

  async #reattach(jobId: string, active: ActiveJob): Promise<void> {
    const job = await this.#o.store.getJob(jobId);
    if (!job) return;
    active.channel = active.sandbox!.reattach({ sessionId: job.sessionId, afterSeq: active.sandboxSeq });
    await this.#catchUp(job, active);
    await this.#ended(jobId, active, await this.#driver.follow(this.#following(job, active)));
  }

  /**
   * After any re-attach (a restart, a takeover, a lost stream): what the
   * session waits for that an earlier stream may never have carried.
   */
  async #catchUp(job: JobRecord, active: ActiveJob): Promise<void> {
    // A failure here is left for the next re-attach: the session's stream is followed regardless.
    try {
      await this.#o.approvals.redeliver(job.id);
      for (const call of this.#o.served(job) ? await servedToolCalls(this.#o.store, job.id) : [])
        await sendServedAnswer(active.channel, call);
    } catch (error) {
      this.#o.logger.warn(
        { jobId: job.id, err: String(error) },
        "could not write the session's answers again after re-attaching; the next re-attach tries again",
      );
    }
    // Harness operations the session still waits for: a checkpointed result is delivered, an unfinished one runs
    // again. For a job that ends already (cancelled, or its failure stored) they are cancelled first: resuming
    // them then stops the scratch sessions an earlier process left running, and answers each call cancelled.
    if (job.error || job.cancelRequestedAt) this.#o.operations.cancelJob(job.id);
    this.#o.active.track(this.#o.operations.resumeJob(this.operationParent(job, active)));
  }

  /**
   * How the job's session is placed: on a node with room, stored as the
   * job's node before the session starts (so a restart re-attaches there);
   * waiting while every node is full, until the job is cancelled, ends or
   * is abandoned. `minted`: the session's token's id, just minted, stored with
   * the first of these writes (issue 24: it was a write of its own); the job
   * is read back by it, so a cancel or an end that came meanwhile stops the
   * start there, and the first check before placing reads nothing.
   * `placed`: called when the session has its node and is to start there.
   */
  #placing(job: JobRecord, active: ActiveJob, o: { minted: string; placed?: () => void }): PlaceOptions {
    let tokenId: string | undefined = o.minted;
    let checked = true;
    const withToken = (): JobPatch => {
      const patch = tokenId !== undefined ? { tokenId } : {};
      tokenId = undefined;
      return patch;
    };
    const revokeMinted = async (minted: string | undefined): Promise<void> => {
      if (minted === undefined) return;
      await this.#o.tokens.revoke({ tokenId: minted }).catch((error: unknown) => {
        this.#o.logger.warn({ jobId: job.id, err: String(error) }, "could not revoke the session token");
      });
    };
    return {
      jobId: job.id,
      sessionId: job.sessionId,
      stop: async () => {
        if (this.#o.active.stopped(active)) return true;
        // The write that stores the placement (or the wait) reads the job back and checks it then.
        if (checked) {
          checked = false;
          return false;
        }
        const current = await this.#o.store.getJob(job.id);
        return !current || current.cancelRequestedAt !== undefined || isTerminal(current.state);
      },
      // Once per job: otherwise a waiting job only shows "pending", and why is in the orchestrator's log alone.
      waiting: async () => {
        if (active.waitSaid && tokenId === undefined) return;
        if (tokenId !== undefined) {
          // The first write since the mint stores the token and reads the job back, as `placed` does: a job
          // cancelled meanwhile says nothing more (its transcript ends with its end), and one that has ended
          // has its token revoked here (its end found none stored). A cancel still ending revokes it itself.
          const patch = withToken();
          const current = await this.#o.store.updateJob(job.id, patch);
          if (current.cancelRequestedAt !== undefined || isTerminal(current.state)) {
            if (isTerminal(current.state)) await revokeMinted(patch.tokenId);
            return;
          }
        }
        const said = active.waitSaid === true;
        active.waitSaid = true;
        if (!said) await appendJobStep(this.#o, { jobId: job.id, events: [stateChanged("pending", WAITING_FOR_ROOM)] });
      },
      placed: async (sandbox) => {
        const patch = withToken();
        const current = await this.#o.store.updateJob(job.id, { ...patch, sandboxUrl: sandbox.url });
        if (current.cancelRequestedAt === undefined && !isTerminal(current.state)) {
          o.placed?.();
          return true;
        }
        // Ended while its token was minted (a cancel): that end revoked no token, none was stored yet.
        if (isTerminal(current.state)) await revokeMinted(patch.tokenId);
        return false;
      },
    };
  }

  /** How the job's session is followed: the messages that arrived together handled under the job's lock, what it missed written again after a re-attach. */
  #following(job: JobRecord, active: ActiveJob): FollowOptions {
    return {
      jobId: job.id,
      sessionId: job.sessionId,
      state: active,
      // A burst that waited for the lock behind one that outlived the job's lease here is not handled (nor
      // counted): the new owner, perhaps this replica again under a new lease, re-attaches before it. Nor one
      // that waited behind the job's end: it would append to an ended job.
      handleBurst: (messages) =>
        this.#o.active.withLock(job.id, async () => {
          if (!this.#o.active.stopped(active) && !active.ended) await this.#o.handleBurst(job.id, active, messages);
        }),
      stopped: () => this.#o.active.stopped(active),
      // Not under the lock, which a hook deciding its call holds: the exit stops that hook.
      exitHeard: (why) => this.#o.approvals.stopHooks(job.id, why),
      // Gone from the store, or finished meanwhile (its node was lost): nothing is left to follow.
      stillFollowed: async () =>
        (await this.#o.store.getJob(job.id)) !== undefined && this.#o.active.get(job.id) === active,
      reattached: async () => {
        const current = await this.#o.store.getJob(job.id);
        if (current) await this.#catchUp(current, active);
      },
    };
  }

  /** What the end of following a job's session means for the job. */
  async #ended(jobId: string, active: ActiveJob, end: SessionEnd): Promise<void> {
    switch (end.kind) {
      case "stopped":
        return;
      case "ended":
        await this.#o.finish(jobId, {});
        return;
      case "gave_up":
        // Cancelled or ended while it waited for room (not when this replica stops following it).
        if (!this.#o.active.stopped(active)) await this.#o.finish(jobId, {});
        return;
      case "unknown": {
        if (!active.startIfUnknown || active.sandboxSeq !== 0) {
          await this.#o.finish(jobId, {
            failure: "the session was lost: its sandbox no longer knows it (was the sandbox restarted?)",
          });
          return;
        }
        active.startIfUnknown = false;
        const job = await this.#o.store.getJob(jobId);
        if (!job) return;
        // Its node does not know it: the start never reached the node, or the node restarted after it.
        // Only the first is safe to start again, and only an unused token tells them apart.
        if (!(await this.#revokeProvesUnused(job))) {
          await this.#o.finish(jobId, {
            failure:
              "the session was lost: its sandbox no longer knows it, and it had already called the model (was the sandbox restarted?); run the job again",
          });
          return;
        }
        await this.start(job, active);
        return;
      }
      case "refused":
        await this.#o.finish(jobId, { failure: end.error.message });
        return;
      case "lost":
        await this.#handleLostSession(jobId, end.lost, active);
        return;
      case "broken":
        await this.#o.finish(jobId, {
          failure: `lost the session's stream and could not re-attach: ${end.error.message}`,
        });
        return;
    }
  }

  /**
   * Revokes the job's session token and answers whether that proves the
   * session never reached a model: no model call ever carried the token, and
   * revoked, none ever will. A model call is the first thing a harness does
   * beyond its own sandbox, so such a session may start again elsewhere
   * without anything done twice outside a sandbox that is gone. Without a
   * token the session was never started. A proxy that does not answer (after
   * a few tries) proves nothing.
   */
  async #revokeProvesUnused(job: JobRecord): Promise<boolean> {
    if (!job.tokenId) return true;
    for (let attempt = 1; ; attempt++) {
      try {
        return (await this.#o.tokens.revoke({ tokenId: job.tokenId })).neverUsed;
      } catch (error) {
        if (attempt >= 3) {
          this.#o.logger.warn(
            { jobId: job.id, err: String(error) },
            "could not ask the LLM proxy whether the session used its token; it counts as started",
          );
          return false;
        }
        await new Promise((resolve) => setTimeout(resolve, 300 * attempt));
      }
    }
  }

  /**
   * Deals with the jobs this replica works on whose sandbox node stopped
   * sending heartbeats (handleLostSession): most fail, saying so. Slots of
   * sessions whose jobs already ended are freed. One job's failure to be
   * dealt with is logged and tried again at the next call.
   */
  async handleLostSessions(): Promise<void> {
    for (const lost of await this.#o.placement.lostSessions()) {
      try {
        const job = await this.#o.store.getJob(lost.jobId);
        if (!job || isTerminal(job.state) || job.sessionId !== lost.sessionId) {
          await this.#o.placement.release(lost.sessionId, { fromNode: lost.nodeId });
        } else if (this.#o.ownership.owns(lost.jobId)) {
          // Under the job's lease, as its follower would be: a session started elsewhere is followed under it.
          await this.#o.ownership.working(lost.jobId, () => this.#handleLostSession(lost.jobId, lost));
        }
      } catch (error) {
        this.#o.logger.warn(
          { jobId: lost.jobId, sessionId: lost.sessionId, err: String(error) },
          "could not deal with a session lost with its node yet; trying again",
        );
      }
    }
  }

  /**
   * The job's session is on a node that stopped sending heartbeats. One
   * never heard from whose token proves it never reached a model
   * (#revokeProvesUnused) starts on a live node instead. Any other died with
   * its node (resuming a session elsewhere is not supported), and the job
   * fails with the loss's reason. Whoever notices first (the node watch, the
   * session's stream) deals with it; the other does nothing. A job not
   * followed here yet is being resumed (a takeover): its re-attach meets the
   * silent node and comes back here.
   */
  async #handleLostSession(jobId: string, lost: LostSession, follower?: ActiveJob): Promise<void> {
    const active = this.#o.active.get(jobId);
    // A follower let go of (its lease lost, the job perhaps taken again here) speaks for nobody: the job's
    // follower now, if any, deals with the loss itself.
    if (!active || active.lostHandled || (follower && follower !== active) || this.#o.active.stopped(active)) return;
    active.lostHandled = true;
    try {
      const job = await this.#o.store.getJob(jobId);
      if (!job || isTerminal(job.state)) return;
      if (job.sessionId !== lost.sessionId) {
        // Its session renewed meanwhile (started afresh elsewhere): the old one's loss is not the new one's.
        active.lostHandled = false;
        return;
      }
      // A job that ends already (cancelled, or its failure stored) is not started again elsewhere: it ends now.
      if (job.error || job.cancelRequestedAt) {
        await this.#o.finish(jobId, {});
        return;
      }
      if (job.state === "pending" && job.sandboxSeq === 0 && active.sandboxSeq === 0) {
        // Still this replica's job (a paused replica must not revoke or move a session its successor started):
        // a fenced write of nothing throws LeaseLostError once another replica took the job over.
        await this.#o.store.append({ jobId, events: [] });
        if (await this.#revokeProvesUnused(job)) {
          if (this.#o.active.stopped(active) || this.#o.active.get(jobId) !== active) return;
          await this.#startElsewhere(job, active, lost);
          return;
        }
      }
      await this.#o.finish(jobId, { failure: lost.reason });
    } catch (error) {
      active.lostHandled = false;
      // Another replica runs it now (or this one, under a new lease): nothing is left to do here.
      if (error instanceof LeaseLostError) return;
      throw error;
    }
  }

  /** Stops following the session on its silent node (its stream's loop ends without finishing the job) and starts it on a live one. */
  async #startElsewhere(job: JobRecord, active: ActiveJob, lost: LostSession): Promise<void> {
    active.abandoned = true;
    active.channel?.close();
    this.#o.active.delete(job.id);
    try {
      const renewed = await this.#renewSession(job, lost);
      this.#o.logger.info(
        { jobId: job.id, sessionId: renewed.sessionId, was: job.sessionId, node: lost.nodeId },
        "the session's node went silent before the session reached a model: starting it afresh on another node",
      );
      await this.resume(renewed);
    } catch (error) {
      // Another replica runs it now.
      if (error instanceof LeaseLostError) return;
      // Neither followed nor failed here: its lease is given up, so the next sweep (here or at another replica) resumes it.
      this.#o.logger.warn(
        { jobId: job.id, err: String(error) },
        "could not start the session on another node; leaving the job to the next sweep",
      );
      await this.#o.ownership.release(job.id).catch(() => undefined);
    }
  }

  /**
   * The job's session, proven never to have reached a model, gives way to a
   * new one: a new session id, no node and no token yet, written under the
   * job's lease (a replica that lost the job is refused here). Nothing done
   * later to the old session (its token revoked again, its slot freed, by a
   * replica still acting on it) can touch the new one. Its slot on the
   * silent node is freed.
   */
  async #renewSession(job: JobRecord, lost: LostSession): Promise<JobRecord> {
    const renewed = await this.#o.store.updateJob(job.id, { sessionId: newSessionId(), sandboxUrl: "", tokenId: "" });
    await this.#o.placement.release(job.sessionId, { fromNode: lost.nodeId });
    return renewed;
  }

  /** Checks for lost nodes every `intervalMs` until close. */
  watchNodes(options: { intervalMs: number }): void {
    if (this.#nodeWatch) return;
    let checking = false;
    this.#nodeWatch = setInterval(() => {
      if (checking) return;
      checking = true;
      this.handleLostSessions()
        .catch((error: unknown) =>
          this.#o.logger.warn({ err: String(error) }, "could not check for lost sandbox nodes"),
        )
        .finally(() => (checking = false));
    }, options.intervalMs);
    this.#nodeWatch.unref();
  }

  close(): void {
    clearInterval(this.#nodeWatch);
  }
}
