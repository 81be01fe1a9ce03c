// What the memory, open files and disk guards read of /proc, read on a thread of its own
// (guard-readings-thread.ts), and the entries the `user`-mode sessions' uids own in the
// node's shared tmpfs places. A reading is synchronous work proportional to
// what the sessions hold: every process's status, every descriptor and
// mapping of theirs looked at for files with no name, the files of the
// node's tmpfs places. A session decides how much that is (a million
// descriptors, a thousand processes, fifty thousand files in /dev/shm) and
// can make a guard look (its own memfd raises the node's Shmem, its own
// files bring the disk near its floor): on the event loop every check then
// stalled every session's stream, the node's heartbeat and every RPC for as
// long as it took. On the thread a slow reading delays only the guards (one
// reading at a time: the next checks wait for it), each is bounded where a
// session decides its size (held-deleted-files.ts, MAX_LOOKED_AT_PER_CHECK;
// session-open-files-guard.ts lists no further than its limit), and one that
// has not ended within a minute ends its thread.
import { Worker } from "node:worker_threads";
import type { ProcessFinder } from "./process-list.js";
import type { Usage } from "./session-disk-guard.js";
import type { MemoryOverLimit } from "./session-memory-guard.js";
import type { OpenFilesOverLimit } from "./session-open-files-guard.js";

/** What the thread is asked: a function of guard-readings-thread.ts and its input. */
export type GuardReadingTask =
  | {
      readonly kind: "sessionsOverMemory";
      readonly input: {
        sessions: ReadonlyMap<string, ProcessFinder>;
        maxBytes: number;
        sharedTmpfs: readonly string[];
      };
    }
  | {
      readonly kind: "sessionsOverOpenFiles";
      readonly input: { sessions: ReadonlyMap<string, ProcessFinder>; max: number };
    }
  | {
      readonly kind: "sessionsOverPtys";
      readonly input: { sessions: ReadonlyMap<string, ProcessFinder>; max: number };
    }
  | {
      readonly kind: "entriesByUid";
      readonly input: { place: string; uids: readonly number[]; budget: number };
    }
  | {
      readonly kind: "heldDeletedFiles";
      readonly input: { device: number; sessions: ReadonlyMap<string, ProcessFinder>; budget: number };
    };

export type GuardReadingReply = { id: number; result: unknown } | { id: number; error: string };

/** The thread's module, beside this one: the .ts source under tsx (tests), the .js file once built. */
const THREAD = new URL(
  import.meta.url.endsWith(".ts") ? "./guard-readings-thread.ts" : "./guard-readings-thread.js",
  import.meta.url,
);

/**
 * How long a reading may take before its thread is ended (and started again at the next reading): /proc reads
 * wait on the locks of the processes read, which a session holds, and a reading that never ends would stop every
 * guard for good.
 */
const READING_DEADLINE_MS = 60_000;

interface PendingReading {
  readonly worker: Worker;
  readonly resolve: (result: unknown) => void;
  readonly reject: (error: Error) => void;
  readonly deadline: NodeJS.Timeout;
}

export class GuardReadings {
  readonly #deadlineMs: number;
  #worker: Worker | undefined;
  #nextId = 0;
  #closed = false;
  readonly #pending = new Map<number, PendingReading>();

  constructor(options: { deadlineMs?: number } = {}) {
    this.#deadlineMs = options.deadlineMs ?? READING_DEADLINE_MS;
  }

  /** The sessions above `maxBytes` now (session-memory-guard.ts, sessionsOverMemory). */
  sessionsOverMemory(
    input: Extract<GuardReadingTask, { kind: "sessionsOverMemory" }>["input"],
  ): Promise<MemoryOverLimit[]> {
    return this.#ask({ kind: "sessionsOverMemory", input }) as Promise<MemoryOverLimit[]>;
  }

  /** The sessions whose processes hold more than `max` descriptors now (session-open-files-guard.ts). */
  sessionsOverOpenFiles(
    input: Extract<GuardReadingTask, { kind: "sessionsOverOpenFiles" }>["input"],
  ): Promise<OpenFilesOverLimit[]> {
    return this.#ask({ kind: "sessionsOverOpenFiles", input }) as Promise<OpenFilesOverLimit[]>;
  }

  /** The sessions whose processes hold more than `max` pty masters now (session-open-files-guard.ts). */
  sessionsOverPtys(
    input: Extract<GuardReadingTask, { kind: "sessionsOverPtys" }>["input"],
  ): Promise<{ sessionId: string; ptys: number }[]> {
    return this.#ask({ kind: "sessionsOverPtys", input }) as Promise<{ sessionId: string; ptys: number }[]>;
  }

  /** How many entries each uid owns in a shared tmpfs place (shared-place-entries.ts, entriesByUid). */
  entriesByUid(input: Extract<GuardReadingTask, { kind: "entriesByUid" }>["input"]): Promise<Map<number, number>> {
    return this.#ask({ kind: "entriesByUid", input }) as Promise<Map<number, number>>;
  }

  /** What each session holds deleted on the filesystem `device` (held-deleted-files.ts, heldDeletedFiles). */
  heldDeletedFiles(
    input: Extract<GuardReadingTask, { kind: "heldDeletedFiles" }>["input"],
  ): Promise<Map<string, Usage>> {
    return this.#ask({ kind: "heldDeletedFiles", input }) as Promise<Map<string, Usage>>;
  }

  /** Ends the thread; a reading still running, and any asked for later, is answered with an error. */
  async close(): Promise<void> {
    this.#closed = true;
    const worker = this.#worker;
    this.#worker = undefined;
    if (worker !== undefined) {
      this.#fail(worker, new Error("the guards' reading thread was closed"));
      await worker.terminate();
    }
  }

  #ask(task: GuardReadingTask): Promise<unknown> {
    if (this.#closed) return Promise.reject(new Error("the guards' reading thread was closed"));
    const worker = this.#started();
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const deadline = setTimeout(() => {
        this.#fail(
          worker,
          new Error(`a reading of /proc took longer than ${this.#deadlineMs} ms; its thread was ended`),
        );
        if (this.#worker === worker) this.#worker = undefined;
        void worker.terminate();
      }, this.#deadlineMs);
      deadline.unref();
      this.#pending.set(id, { worker, resolve, reject, deadline });
      // Waited for: the process stays up while a reading runs (the guards' timers do not hold it).
      worker.ref();
      try {
        worker.postMessage({ id, task });
      } catch (error) {
        this.#settle(id);
        reject(error instanceof Error ? error : new Error(String(error)));
      }
    });
  }

  /** The thread, started at the first reading (a sandbox whose guards never look starts none). */
  #started(): Worker {
    if (this.#worker !== undefined) return this.#worker;
    const worker = new Worker(THREAD);
    worker.unref();
    worker.on("message", (reply: GuardReadingReply) => {
      const pending = this.#settle(reply.id);
      if (pending === undefined) return;
      if ("error" in reply) pending.reject(new Error(reply.error));
      else pending.resolve(reply.result);
    });
    // A thread that failed is started again at the next reading; only its own readings fail with it.
    worker.on("error", (error) => {
      if (this.#worker === worker) this.#worker = undefined;
      this.#fail(worker, error);
    });
    worker.on("exit", () => {
      if (this.#worker === worker) this.#worker = undefined;
      this.#fail(worker, new Error("the guards' reading thread exited"));
    });
    this.#worker = worker;
    return worker;
  }

  /** Forgets the reading; its thread no longer holds the process up when none of its readings is left. */
  #settle(id: number): PendingReading | undefined {
    const pending = this.#pending.get(id);
    if (pending === undefined) return undefined;
    this.#pending.delete(id);
    clearTimeout(pending.deadline);
    if (![...this.#pending.values()].some((other) => other.worker === pending.worker)) pending.worker.unref();
    return pending;
  }

  #fail(worker: Worker, error: Error): void {
    for (const [id, pending] of [...this.#pending]) {
      if (pending.worker !== worker) continue;
      this.#settle(id);
      pending.reject(error);
    }
  }
}
