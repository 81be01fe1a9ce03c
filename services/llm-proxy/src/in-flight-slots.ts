// Calls in flight for the SQLite store, in a file of fixed slots instead of a
// SQLite commit before each attempt. The record of a call in flight must be
// in the file before its attempt goes out; a SQLite commit there cost a call
// about 15 system calls (WAL frames, locks) and 60–120 µs one at a time, a
// `pwrite` of one slot costs one system call and a few µs. Both survive the
// process being killed (the page cache keeps them) and neither survives a
// power cut (SQLite runs with synchronous = NORMAL; an `fdatasync` per call
// measured 400–600 µs on this machine's disk, more than the whole call).
//
// Each process writes a file of its own (`in-flight/<owner>.slots`), so a
// later start tells a dead process's calls from its own. A slot is one page
// (a write within a page is never torn by a kill) holding the call's row as
// JSON after its length (its values in PENDING_COLUMNS order, as SQLite stores them). A retry takes a new slot before it frees the old
// one, so a kill mid-write leaves the attempt before it on record. A slot is
// freed only once the call's record is committed and is then overwritten by
// a later call; a freed slot still holding an old call is harmless, since
// reconciling skips every call whose record exists. A process that ends with
// nothing in flight removes its file.
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeSync } from "node:fs";
import path from "node:path";
import type { PendingAttempt } from "./proxy-store.js";
import { PENDING_COLUMNS, pendingFromRow, pendingValues, SQLITE_ENCODING, type PendingRow } from "./store-rows.js";

/** One page: a write of at most a page, at a page's start, is all there or not at all after a kill. */
const SLOT_BYTES = 4096;
const LENGTH_BYTES = 4;
/** Slots the file starts with (it grows by as many again when they are all taken). */
const INITIAL_SLOTS = 64;
const SUFFIX = ".slots";

/** A dead process's calls in flight, read from its slot file. */
export interface OrphanedSlots {
  /** Every call found, newest attempt of each call first. */
  calls: PendingAttempt[];
  /** Removes the files read; call once their calls are reconciled (committed). */
  remove(): void;
}

export class InFlightSlots {
  readonly #file: string;
  #fd: number;
  #capacity = 0;
  /** Slots not holding a call in flight, lowest first at the end (popped). */
  readonly #free: number[] = [];
  /** The slot of each call in flight, by operation id. */
  readonly #slotOf = new Map<string, number>();

  constructor(options: { dir: string; owner: string }) {
    mkdirSync(options.dir, { recursive: true, mode: 0o700 });
    this.#file = path.join(options.dir, options.owner + SUFFIX);
    this.#fd = openSync(this.#file, "wx", 0o600);
    this.#grow(INITIAL_SLOTS);
  }

  /**
   * Writes a call's row in flight (a retry's replaces the one before); false
   * when it does not fit a slot (a model name of kilobytes), and the caller
   * records it another way.
   */
  begin(pending: PendingAttempt): boolean {
    const { operationId } = pending;
    const json = JSON.stringify(pendingValues(pending, SQLITE_ENCODING));
    const length = Buffer.byteLength(json);
    if (length > SLOT_BYTES - LENGTH_BYTES) return false;
    const bytes = Buffer.allocUnsafe(LENGTH_BYTES + length);
    bytes.writeUInt32LE(bytes.length - LENGTH_BYTES, 0);
    bytes.write(json, LENGTH_BYTES);
    if (this.#free.length === 0) this.#grow(this.#capacity);
    const slot = this.#free.pop()!;
    writeSync(this.#fd, bytes, 0, bytes.length, slot * SLOT_BYTES);
    const before = this.#slotOf.get(operationId);
    this.#slotOf.set(operationId, slot);
    // Only now: until the new row was written, the one before stood for the call.
    if (before !== undefined) this.#free.push(before);
    return true;
  }

  /** The call's record is committed: its slot may take another call. */
  end(operationId: string): void {
    const slot = this.#slotOf.get(operationId);
    if (slot === undefined) return;
    this.#slotOf.delete(operationId);
    this.#free.push(slot);
  }

  /** Closes the file, and removes it when no call is in flight (else a later start reconciles them). */
  close(): void {
    if (this.#fd < 0) return;
    closeSync(this.#fd);
    this.#fd = -1;
    if (this.#slotOf.size === 0) rmSync(this.#file, { force: true });
  }

  /** Zeroed slots (a zero length is an empty slot), taken lowest first. */
  #grow(slots: number): void {
    const from = this.#capacity;
    writeSync(this.#fd, Buffer.alloc(slots * SLOT_BYTES), 0, slots * SLOT_BYTES, from * SLOT_BYTES);
    this.#capacity += slots;
    for (let slot = this.#capacity - 1; slot >= from; slot -= 1) this.#free.push(slot);
  }

  /** The rows in the slot files of `dir` other than `owner`'s: processes that are gone. */
  static orphaned(options: { dir: string; owner: string }): OrphanedSlots {
    let names: string[];
    try {
      names = readdirSync(options.dir).filter((name) => name.endsWith(SUFFIX) && name !== options.owner + SUFFIX);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      names = [];
    }
    const files = names.map((name) => path.join(options.dir, name));
    const calls: PendingAttempt[] = [];
    for (const file of files) {
      const bytes = readFileSync(file);
      for (let at = 0; at + LENGTH_BYTES <= bytes.length; at += SLOT_BYTES) {
        const length = bytes.readUInt32LE(at);
        if (length === 0 || length > SLOT_BYTES - LENGTH_BYTES) continue;
        const row = parseRow(bytes.toString("utf8", at + LENGTH_BYTES, at + LENGTH_BYTES + length));
        if (row) calls.push(pendingFromRow(row));
      }
    }
    // A retry's slot and the one it replaced may both be there: the newest attempt stands for the call.
    calls.sort((a, b) => b.attempt - a.attempt);
    return {
      calls,
      remove: () => {
        for (const file of files) rmSync(file, { force: true });
      },
    };
  }
}

function parseRow(text: string): PendingRow | undefined {
  try {
    const values = JSON.parse(text) as unknown;
    if (!Array.isArray(values) || values.length !== PENDING_COLUMNS.length) return undefined;
    const row = Object.fromEntries(PENDING_COLUMNS.map((column, i) => [column, values[i]])) as unknown as PendingRow;
    return typeof row.operation_id === "string" && typeof row.attempt === "number" ? row : undefined;
  } catch {
    // Not a row this store wrote (a file cut short by a full disk): nothing to reconcile from it.
    return undefined;
  }
}
