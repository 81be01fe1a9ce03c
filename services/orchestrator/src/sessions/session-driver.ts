// The one session lifecycle: place a session on a sandbox node with room,
// start it, follow its stream, re-attach with backoff when the stream breaks,
// place it again when its node was full before it started, and say how it
// ended when it cannot be followed any more (its node does not know it, the
// node refused this orchestrator, the node went silent, re-attaching gave
// up, the node sent more about the session than its byte budget). Jobs,
// harness operations' scratch sessions and graphs' custom steps all run
// their sessions through it; what an ending means for each (fail the job,
// start the session again, fail the step) is theirs to decide.
import type { Logger } from "@oz0/serving";
import { messageBursts } from "./message-bursts.js";
import type { LostSession, SandboxPlacement } from "./sandbox-placement.js";
import {
  SandboxAnswerTooLargeError,
  SandboxFullError,
  SandboxRefusedError,
  SessionNotFoundError,
  SessionTooLargeError,
  type SandboxMessage,
  type SessionChannel,
  type SessionRunner,
} from "./session-runner.js";

/** How following a session ended. */
export type SessionEnd =
  /** Its stream ended: the session is over, its last messages handled. */
  | { kind: "ended" }
  /** The follower said stop (the orchestrator closes, another replica took the job, it ended meanwhile). */
  | { kind: "stopped" }
  /** It had to be placed again and placing gave up (`PlaceOptions.stop`). */
  | { kind: "gave_up" }
  /** Its node does not know it: the start never reached the node, or the node restarted. */
  | { kind: "unknown"; error: SessionNotFoundError }
  /**
   * Its node refused this orchestrator's credential, answered more than it reads in one message, or sent more about
   * the session than its byte budget (then the session was cancelled there): trying again does not mend that.
   */
  | { kind: "refused"; error: SandboxRefusedError | SandboxAnswerTooLargeError | SessionTooLargeError }
  /** Its node stopped sending heartbeats. */
  | { kind: "lost"; lost: LostSession }
  /** Its stream broke and could not be re-attached (or re-attaching is not wanted). */
  | { kind: "broken"; error: Error };

/** Where a followed session is: its node, its current stream, and the sandbox's sequence number of the last message handled. */
export interface SessionState {
  sandbox?: SessionRunner;
  channel?: SessionChannel;
  sandboxSeq: number;
  /**
   * What its node has sent about it so far, in bytes as decoded, over every stream of it (kept here, not per stream,
   * so a node that breaks its stream does not start its count again at the re-attach). Undefined: nothing yet.
   */
  receivedBytes?: number;
}

export interface PlaceOptions {
  jobId: string;
  sessionId: string;
  /** Stop waiting for room (undefined is returned): checked before each attempt. */
  stop(): boolean | Promise<boolean>;
  /** Every node is full: called before each wait. */
  waiting?(): Promise<void>;
  /**
   * A node took it, before the session starts there (a job records its node, so a restart re-attaches there).
   * False: it is not to start after all (its job ended or was cancelled meanwhile); placing gives up as with `stop`.
   */
  placed?(sandbox: SessionRunner): Promise<boolean>;
}

/**
 * How a follower takes the session's new messages (never one at or below
 * `state.sandboxSeq`); a throw counts as a broken stream, re-attached after
 * `state.sandboxSeq` as it is then. One at a time, or the messages that
 * arrived together in one call (message-bursts.ts), in order.
 */
export type MessageHandling =
  | { handle(message: SandboxMessage): Promise<void>; handleBurst?: never }
  | { handleBurst(messages: SandboxMessage[]): Promise<void>; handle?: never };

export type FollowOptions = FollowSettings & MessageHandling;

export interface FollowSettings {
  jobId: string;
  sessionId: string;
  state: SessionState;
  /** Whether the follower stopped following (checked when the stream ends or breaks). */
  stopped(): boolean;
  /** Re-attach a broken stream with backoff. False: a broken stream ends following (`broken`). Default true. */
  reattach?: boolean;
  /** Before each re-attach: whether the session is still to be followed. */
  stillFollowed?(): Promise<boolean>;
  /** After each re-attach: write again what the session waits for that the broken stream may never have carried. */
  reattached?(): Promise<void>;
  /**
   * The session's exit, heard before the messages ahead of it are handled: with them in one burst, or read while an
   * earlier burst is handled (a hook deciding a call). `why` says so, for what waits on the session to stop with:
   * nothing is left to run the call a hook decides. It may be heard more than once.
   */
  exitHeard?(why: string): void;
  /**
   * How to start the session again on another node when its node was full
   * and never took it (`SandboxFullError` before its first message); with
   * `place`, the placement's wait. Without it a full node breaks the stream
   * like any error.
   */
  restart?: { start(sandbox: SessionRunner): SessionChannel; place: PlaceOptions };
}

export interface SessionDriverOptions {
  /** Where sessions are placed; without it sessions are only followed (a scratch session runs on its parent's node). */
  placement?: SandboxPlacement;
  logger?: Logger;
  /** How often in a row a lost stream is re-attached before the node is suspected. Default 5. */
  reattachAttempts?: number;
  /**
   * Without heartbeats to tell whether a node lives (one sandbox, no
   * registry): how long a lost stream is re-attached, the attempts done,
   * before following gives up. A sandbox that restarts (`oz0 dev`'s
   * supervisor, a container's restart) takes its kept sessions over once it
   * listens, which on a loaded machine takes longer than the attempts' few
   * seconds. Default 30 s.
   */
  reattachWindowMs?: number;
  /**
   * With heartbeats (a registry): how long a node that keeps sending them may leave a session's stream unanswered
   * before following gives up. Heartbeats alone kept the job waiting for ever, its model token alive, behind a node
   * registered at an address where nothing answers (attacker review). Default 5 minutes.
   */
  unansweredNodeMs?: number;
  /** The most a node may send about one session (OZ0_MAX_SESSION_BYTES). Default DEFAULT_MAX_SESSION_BYTES. */
  maxSessionBytes?: number;
}

/**
 * What a node may send about one session by default: 1 GiB. An honest session sends its transcript (each harness
 * line at most 1 MiB), its stderr (at most the sandbox's OZ0_MAX_SESSION_STDERR_WRITTEN_BYTES, 256 MiB, of which the
 * orchestrator keeps the last 1 MiB) and its artifacts once (twice the sandbox's OZ0_MAX_ARTIFACT_BYTES, 16 MiB):
 * far less. A node that sends without end then fills 1 GiB of the store a session at most, rather than the disk.
 */
export const DEFAULT_MAX_SESSION_BYTES = 1024 * 1024 * 1024;

/** How long a session waits before it asks the nodes for room again. */
const ROOM_POLL_MS = 500;
/** A stream that ran this long after its node answered, then broke: a new outage, timed afresh. */
const NEW_OUTAGE_MS = 10_000;

/** Why what waits on a session stops once its exit is heard. */
function exitHeardReason(exit: Extract<SandboxMessage, { kind: "exited" }>): string {
  const how = exit.error || `code ${exit.exitCode}${exit.signal ? `, signal ${exit.signal}` : ""}`;
  return `the session ended before its call was decided (${how})`;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class SessionDriver {
  readonly #o: SessionDriverOptions;

  constructor(options: SessionDriverOptions) {
    this.#o = options;
  }

  /**
   * A node with room for the session, waiting while every node is full;
   * undefined once `stop` says so. `refusedBy`: the node that just refused it
   * for want of room (another is chosen when there is one).
   */
  async place(o: PlaceOptions, refusedBy?: string): Promise<SessionRunner | undefined> {
    const placement = this.#o.placement;
    if (!placement) throw new Error("this session driver places no sessions: give it a placement");
    for (;;) {
      if (await o.stop()) return undefined;
      const sandbox = await placement.place({
        jobId: o.jobId,
        sessionId: o.sessionId,
        ...(refusedBy ? { refusedBy } : {}),
      });
      if (sandbox) return (await (o.placed?.(sandbox) ?? true)) ? sandbox : undefined;
      await o.waiting?.();
      await sleep(ROOM_POLL_MS);
    }
  }

  /** Places the session, starts it there and follows it (re-placed while nodes are full). */
  async start(
    o: Omit<FollowSettings, "restart"> &
      MessageHandling & { place: PlaceOptions; start(sandbox: SessionRunner): SessionChannel },
  ): Promise<SessionEnd> {
    const sandbox = await this.place(o.place);
    if (!sandbox) return { kind: "gave_up" };
    o.state.sandbox = sandbox;
    o.state.channel = o.start(sandbox);
    return this.follow({ ...o, restart: { start: o.start, place: o.place } });
  }

  /** Follows the session's stream (`state.channel` on `state.sandbox`) until it cannot be followed any more. */
  async follow(o: FollowOptions): Promise<SessionEnd> {
    const attempts = this.#o.reattachAttempts ?? 5;
    const windowMs = this.#o.reattachWindowMs ?? 30_000;
    const unansweredMs = this.#o.unansweredNodeMs ?? 5 * 60_000;
    const maxBytes = this.#o.maxSessionBytes ?? DEFAULT_MAX_SESSION_BYTES;
    const { state } = o;
    /**
     * How many of `messages` fit the session's byte budget, counted into it; fewer than all once it is passed. What
     * is counted is what the node sent: a message it sends again after a re-attach counts again.
     */
    const withinBudget = (messages: SandboxMessage[]): number => {
      for (let i = 0; i < messages.length; i++) {
        state.receivedBytes = (state.receivedBytes ?? 0) + (messages[i]!.bytes ?? 0);
        if (state.receivedBytes > maxBytes) return i;
      }
      return messages.length;
    };
    // When this outage began. A session waiting for a person sends nothing after a re-attach, so a mended
    // stream is told by its node having answered the call and the stream then running a while. A call never
    // answered (a refused connect, or one that hangs until the system's connect timeout) or a stream that broke
    // soon after its answer does not end the outage, so an unreachable or flapping node still ends the window.
    let outageSince: number | undefined;
    for (let attempt = 0; ; attempt++) {
      try {
        const heard = (message: SandboxMessage): void => {
          if (message.kind === "exited") o.exitHeard?.(exitHeardReason(message));
        };
        for await (const burst of messageBursts(state.channel!, { readAhead: heard })) {
          // Before what came with it is handled: a call it asked is then decided knowing nobody will run it.
          burst.forEach(heard);
          // What came before the message that passed the budget is handled; that one and the rest are not. Nor
          // are those handled before a re-attach.
          const within = withinBudget(burst);
          const fresh = burst.slice(0, within).filter((message) => message.seq > state.sandboxSeq);
          if (fresh.length > 0) {
            if (o.handleBurst) await o.handleBurst(fresh);
            else for (const message of fresh) await o.handle(message);
          }
          if (within < burst.length) return this.#tooLarge(o, maxBytes);
          attempt = 0;
        }
        return o.stopped() ? { kind: "stopped" } : { kind: "ended" };
      } catch (error) {
        if (o.stopped()) return { kind: "stopped" };
        if (error instanceof SandboxFullError && state.sandboxSeq === 0 && o.restart) {
          // The node never took the session: it waits (unless told to stop) and is placed again, on whichever node has room.
          const { place, start } = o.restart;
          if (await place.stop()) return { kind: "gave_up" };
          this.#o.logger?.info(
            { jobId: o.jobId, sandbox: state.sandbox?.url },
            "the sandbox is full; the job waits for a free session",
          );
          await place.waiting?.();
          // Its slot there is given back first.
          await this.#o.placement?.release(o.sessionId);
          await sleep(ROOM_POLL_MS);
          const sandbox = await this.place(place, state.sandbox?.url);
          if (!sandbox) return { kind: "gave_up" };
          state.sandbox = sandbox;
          state.channel = start(sandbox);
          attempt = -1;
          continue;
        }
        if (error instanceof SessionNotFoundError) return { kind: "unknown", error };
        if (error instanceof SandboxRefusedError || error instanceof SandboxAnswerTooLargeError)
          return { kind: "refused", error };
        if (o.reattach === false) return { kind: "broken", error: error as Error };
        const now = Date.now();
        const answeredAt = state.channel?.answeredAt;
        if (outageSince === undefined || (answeredAt !== undefined && now - answeredAt >= NEW_OUTAGE_MS))
          outageSince = now;
        if (attempt + 1 >= attempts) {
          const lost = await this.#o.placement?.lostSession(o.sessionId);
          // Let go of while it asked (its lease lost): whoever follows the session now says what became of it.
          if (o.stopped()) return { kind: "stopped" };
          if (lost) return { kind: "lost", lost };
          if (!this.#o.placement?.tracksNodes && now - outageSince >= windowMs)
            return { kind: "broken", error: error as Error };
          if (this.#o.placement?.tracksNodes && now - outageSince >= unansweredMs)
            return {
              kind: "broken",
              error: new Error(
                `the sandbox node at ${state.sandbox?.url ?? "?"} sends heartbeats but has not answered this session's stream for ${Math.round((now - outageSince) / 1000)} s (${(error as Error).message})`,
              ),
            };
          // The node still sends heartbeats (a network blip, a restart), or without heartbeats the window is not
          // over: keep trying at the longest interval until it answers (or goes silent, or the window ends).
          attempt = attempts - 2;
        }
        this.#o.logger?.warn({ jobId: o.jobId, err: String(error), attempt }, "session stream lost; re-attaching");
        await sleep(200 * 2 ** attempt);
        if (o.stillFollowed && !(await o.stillFollowed())) return { kind: "stopped" };
        // Its node may have come back at another address: found again by the session.
        if (this.#o.placement?.tracksNodes)
          state.sandbox = await this.#o.placement.runnerForSession({
            sessionId: o.sessionId,
            sandboxUrl: state.sandbox!.url,
          });
        state.channel = state.sandbox!.reattach({ sessionId: o.sessionId, afterSeq: state.sandboxSeq });
        await o.reattached?.();
      }
    }
  }

  /**
   * The node sent more about the session than its budget: its stream is closed, and the session is cancelled at its
   * node, which is told and not waited for, as a job's stop is: the follower ends now, whatever the node does.
   */
  #tooLarge(o: FollowOptions, maxBytes: number): SessionEnd {
    if (o.stopped()) return { kind: "stopped" };
    const { state } = o;
    const error = new SessionTooLargeError({
      url: state.sandbox?.url ?? "?",
      sessionId: o.sessionId,
      receivedBytes: state.receivedBytes ?? 0,
      maxBytes,
    });
    state.channel?.close();
    this.#o.logger?.warn({ jobId: o.jobId, sessionId: o.sessionId, sandbox: state.sandbox?.url }, error.message);
    void state.sandbox
      ?.cancel({ sessionId: o.sessionId, reason: `the node sent more than ${maxBytes} bytes about the session` })
      .catch((cancelError: unknown) => {
        // It ended meanwhile: nothing is left to stop.
        if (cancelError instanceof SessionNotFoundError) return;
        this.#o.logger?.warn(
          { jobId: o.jobId, sessionId: o.sessionId, err: String(cancelError) },
          "could not cancel a session that sent more than its byte budget at its node",
        );
      });
    return { kind: "refused", error };
  }
}
