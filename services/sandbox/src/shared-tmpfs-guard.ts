// What keeps a `user`-mode session from taking the files (inodes) of the
// node's shared tmpfs places: /dev/shm everywhere, /tmp and /run/lock where
// they are one. A tmpfs has a fixed number of inodes (half the node's pages
// of memory by default); each entry takes one, an empty file too, and about
// 800 bytes of kernel memory no process is charged for, so the memory guard
// does not see it. A session making a few million empty files in /dev/shm
// left every user of the node (other sessions, the node's own services)
// unable to make one: shm_open and sem_open failed, Python's multiprocessing
// with them, until the session ended (attacker review).
//
// So the guard reads each place's free inodes (statfs, once a check) against
// a floor (OZ0_SANDBOX_MIN_FREE_SHARED_FILES); below it, it counts what each
// running session's uid owns there, on the guards' thread, and stops the
// session whose uid owns the most (at least a thousand entries: a session
// that made a few is not what filled it). Bubblewrap's sessions have a
// /dev/shm of their own, on disk (bubblewrap-mounts.ts), and are not its
// concern. Best effort, as the other guards: what a session makes between two
// checks lands, which is what the floor is for.
import { statfs } from "node:fs/promises";
import type { Logger } from "@oz0/serving";
import type { GuardReadings } from "./guard-readings.js";
import { PeriodicCheck } from "./periodic-check.js";
import { runningSessions, type SessionProcesses } from "./process-list.js";
import { DEFAULT_MIN_FREE_FILES } from "./session-disk-guard.js";
import { sharedTmpfsPlaces } from "./shared-place-entries.js";

/** A uid owning fewer entries of a place is not what filled it (a lock file, a semaphore, a few shared buffers). */
const SLACK_ENTRIES = 1000;
/**
 * The most entries one count looks at: more than a tmpfs of a large node holds (a 512 GiB node's /dev/shm has 64
 * million inodes), bounded so that a count always ends, within the thread's deadline.
 */
const MAX_COUNTED_ENTRIES = 100_000_000;

/** A session as the guard sees it. */
export interface SharedTmpfsGuardedSession {
  readonly id: string;
  readonly running: boolean;
  /** How its processes are found: `{ uid }` for a `user`-mode session, the only kind the guard counts. */
  readonly processes?: SessionProcesses | undefined;
  /** Stops it at once, saying why. */
  stopForDisk(message: string): void;
}

export interface SharedTmpfsGuardOptions {
  /** The places guarded; default the node's shared places that are a tmpfs ({@link sharedTmpfsPlaces}). */
  places?: readonly string[];
  /**
   * Below this many free files (inodes) in a place, the session whose uid owns the most entries there is stopped;
   * 0: no guard; undefined: DEFAULT_MIN_FREE_FILES, or a twentieth of the place's inodes when that is less.
   */
  minFreeFiles?: number | undefined;
  /** Between checks. Default 1000 ms. */
  intervalMs?: number;
  sessions: () => Iterable<SharedTmpfsGuardedSession>;
  /** Where the entries are counted, off the event loop. */
  readings: GuardReadings;
  logger: Logger;
}

export class SharedTmpfsGuard {
  readonly #options: SharedTmpfsGuardOptions;
  readonly #places: readonly string[];
  /** Its checks; none when it is off or there is nothing to guard. */
  readonly #checks: PeriodicCheck | undefined;
  /**
   * The places below their floor since they last had room whose shortfall was told: a session stopped for it, or a
   * warning that none could be (once, until they have room again).
   */
  readonly #told = new Set<string>();
  /**
   * Each place's free files when a count below its floor found no session to stop: it is not counted again until
   * they fall by SLACK_ENTRIES more (a count walks every entry, and below the floor through no session's doing it
   * would walk them all every check).
   */
  readonly #countedAt = new Map<string, number>();
  /** The sessions stopped already: their files go once their processes have (the uid's sweep), checks later. */
  readonly #stopped = new WeakSet<SharedTmpfsGuardedSession>();

  constructor(options: SharedTmpfsGuardOptions) {
    this.#options = options;
    this.#places = options.places ?? sharedTmpfsPlaces();
    if (options.minFreeFiles !== 0 && this.#places.length > 0)
      this.#checks = new PeriodicCheck({
        intervalMs: options.intervalMs,
        check: () => this.#check(),
        onError: (error) => options.logger.warn({ err: error }, "could not read the node's shared tmpfs places"),
      });
  }

  /** One check (the timer's); never throws. */
  async check(): Promise<void> {
    await this.#checks?.run();
  }

  close(): void {
    this.#checks?.close();
  }

  async #check(): Promise<void> {
    for (const place of this.#places) {
      const { files, ffree } = await statfs(place);
      if (files === 0) continue; // counts no inodes
      const floor = this.#options.minFreeFiles ?? Math.min(DEFAULT_MIN_FREE_FILES, Math.floor(files / 20));
      if (ffree >= floor) {
        this.#told.delete(place);
        this.#countedAt.delete(place);
        continue;
      }
      const counted = this.#countedAt.get(place);
      if (counted !== undefined && ffree > counted - SLACK_ENTRIES) continue;
      const shortfall = `${place} has room for ${ffree} more files, below its floor of ${floor} (OZ0_SANDBOX_MIN_FREE_SHARED_FILES)`;
      const { running, finders } = runningSessions(this.#options.sessions());
      const byUid = new Map<number, SharedTmpfsGuardedSession>();
      for (const [id, finder] of finders) {
        const session = running.get(id)!;
        if ("uid" in finder && !this.#stopped.has(session)) byUid.set(finder.uid, session);
      }
      const counts =
        byUid.size > 0
          ? await this.#options.readings.entriesByUid({ place, uids: [...byUid.keys()], budget: MAX_COUNTED_ENTRIES })
          : new Map<number, number>();
      const [uid, entries] = [...counts].reduce<[number | undefined, number]>(
        (most, [u, n]) => (n > most[1] ? [u, n] : most),
        [undefined, SLACK_ENTRIES - 1],
      );
      const session = uid !== undefined ? byUid.get(uid) : undefined;
      if (session === undefined || !session.running) {
        // A session stopped for it is gone once its processes are, and its files with the uid's sweep.
        if (!this.#told.has(place))
          this.#options.logger.warn({ place, ffree, floor }, `${shortfall}, and no running session made it so`);
        this.#told.add(place);
        this.#countedAt.set(place, ffree);
        continue;
      }
      this.#options.logger.warn(
        { sessionId: session.id, place, entries, ffree, floor },
        "session stopped: it was taking the files of a tmpfs the node shares",
      );
      this.#stopped.add(session);
      this.#told.add(place);
      this.#countedAt.delete(place);
      try {
        session.stopForDisk(
          `${shortfall} while this session's uid owns ${entries} entries there: it is a tmpfs every user of the node shares (with none left, every user's shm_open and sem_open fail); the session was stopped. Keep temporary files in $TMPDIR, the session's own`,
        );
      } catch (error) {
        this.#options.logger.error({ err: error, sessionId: session.id }, "could not stop a session filling a tmpfs");
      }
    }
  }
}
