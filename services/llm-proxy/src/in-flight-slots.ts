// Calls in flight for the SQLite store, and rows not committed yet (metering
// records, session tokens minted and their first use), in a file of fixed
// slots instead of a SQLite commit before each attempt, another before each
// answer ends and one per token minted or first used. A call in flight must
// be in a file before its attempt goes out, its records before its answer
// ends, a token before it is handed out, its first use before its call goes
// upstream;
// a SQLite commit there cost a call about 15 system calls (WAL frames,
// locks) and 60–120 µs one at a time, a `pwrite` of one slot costs one system
// call and a few µs, and the records are committed to SQLite a little later,
// many calls' in one transaction, off every call's path. Both survive the
// process being killed (the page cache keeps them) and neither survives a
// power cut (SQLite runs with synchronous = NORMAL; an `fdatasync` per call
// measured 400–600 µs on this machine's disk, more than the whole call).
//
// Each process writes a file of its own (`in-flight/<owner>.v4.slots`), so a
// later start tells a dead process's calls from its own. The file's name
// carries the version of this layout: a start refuses (it does not serve) a
// file of a version it cannot read (it reads its own and those UPGRADES names),
// or with a row it cannot read, naming the file,
// rather than replay part of it; a file without a version is of version 1,
// the layout before it was named. A slot is one page
// (a write within a page is never torn by a kill) holding, after its length,
// one JSON array: its kind (`p`, a call in flight; `a`, an attempt's record;
// `c`, a call's record; `t`, a token; `u`, a token's first use), then the
// row's values as SQLite stores them (PENDING_COLUMNS, or as the statement
// that writes the row takes them). Slots are never written twice
// while they hold something: a retry takes a new slot before it frees the
// old one, so a kill mid-write leaves the attempt before it on record. A
// call's slot in flight is freed once its record is committed to SQLite, a
// record's once it is; a freed slot still holding an old row is harmless,
// since replaying skips every record already there and every call with a
// record. A process that ends with nothing left in its slots removes its file.
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
/** The layout of slots and rows this code writes and reads (a change to either is a new version). */
// Version 2: a token's row holds its budget session (7 values). Version 3: and its traceparent (8). Version 4: and its
// limit of model calls (9); a file of version 2 or 3 is read as one of 4 whose tokens have none of what came after.
const FORMAT_VERSION = 4;
/** Older versions read, with how each row of theirs becomes this version's. */
const UPGRADES: ReadonlyMap<number, (kind: HeldKind, values: unknown[]) => unknown[]> = new Map([
  [
    2,
    (kind: HeldKind, values: unknown[]) => (kind === "token" && values.length === 7 ? [...values, null, null] : values),
  ],
  [3, (kind: HeldKind, values: unknown[]) => (kind === "token" && values.length === 8 ? [...values, null] : values)],
]);
const VERSIONED = /\.v(\d+)\.slots$/;

/** Rows written to slots until they are committed, by kind (the values as the statement that writes each takes them). */
export type HeldKind = "token" | "use" | "attempt" | "call";
const KIND_CODES: Record<HeldKind, string> = { token: "t", use: "u", attempt: "a", call: "c" };
const KINDS = new Map(Object.entries(KIND_CODES).map(([kind, code]) => [code, kind as HeldKind]));

/** What dead processes left in their slot files. */
export interface OrphanedSlots {
  /** Calls in flight, newest attempt of each call first. */
  inFlight: PendingAttempt[];
  /** Rows of each kind, perhaps committed already. */
  held: Record<HeldKind, unknown[][]>;
  /** The file a row of `held` or a call of `inFlight` was read from (to name it when it cannot be replayed). */
  fileOf(row: object): string | undefined;
  /** Removes the files read; call once their calls are reconciled (committed). */
  remove(): void;
}

/** Values each kind of row holds (as its statement takes them): a row of another count is refused. */
export type HeldColumns = Record<HeldKind, number>;

/** What to do with a slot file a start cannot replay. */
export function slotFileAdvice(file: string): string {
  return `start the llm-proxy version that wrote ${file} on this data directory to replay it, or move the file out of ${path.dirname(file)} to give up its rows (metering records, tokens and first uses of a dead process)`;
}

export class InFlightSlots {
  readonly #file: string;
  #fd: number;
  #capacity = 0;
  /** Slots not holding a call in flight, lowest first at the end (popped). */
  readonly #free: number[] = [];
  /** The slot of each call in flight, by operation id. */
  readonly #slotOf = new Map<string, number>();
  /** Slots holding a record not committed yet. */
  #held = 0;

  constructor(options: { dir: string; owner: string }) {
    mkdirSync(options.dir, { recursive: true, mode: 0o700 });
    this.#file = path.join(options.dir, `${options.owner}.v${FORMAT_VERSION}${SUFFIX}`);
    this.#fd = openSync(this.#file, "wx", 0o600);
    this.#grow(INITIAL_SLOTS);
  }

  /** The file's path (to name it in an error). */
  get file(): string {
    return this.#file;
  }

  /**
   * Writes a call's row in flight (a retry's replaces the one before); false
   * when it does not fit a slot (a model name of kilobytes), and the caller
   * records it another way.
   */
  begin(pending: PendingAttempt): boolean {
    const { operationId } = pending;
    const slot = this.#write(["p", ...pendingValues(pending, SQLITE_ENCODING)]);
    if (slot === undefined) return false;
    const before = this.#slotOf.get(operationId);
    this.#slotOf.set(operationId, slot);
    // Only now: until the new row was written, the one before stood for the call.
    if (before !== undefined) this.#free.push(before);
    return true;
  }

  /** Whether the call is in flight in a slot. */
  holds(operationId: string): boolean {
    return this.#slotOf.has(operationId);
  }

  /** The call's record is committed: its slot may take another call. */
  end(operationId: string): void {
    const slot = this.#slotOf.get(operationId);
    if (slot === undefined) return;
    this.#slotOf.delete(operationId);
    this.#free.push(slot);
  }

  /**
   * Writes a row not yet committed (`values` as its statement takes them);
   * the slot to release once it is committed, or undefined when it does not
   * fit (the caller commits it at once instead).
   */
  hold(kind: HeldKind, values: readonly unknown[]): number | undefined {
    const slot = this.#write([KIND_CODES[kind], ...values]);
    if (slot !== undefined) this.#held += 1;
    return slot;
  }

  /** The row in `slot` (from `hold`) is committed. */
  release(slot: number): void {
    this.#held -= 1;
    this.#free.push(slot);
  }

  /** Closes the file, and removes it when it holds nothing (else a later start takes it up). */
  close(): void {
    if (this.#fd < 0) return;
    closeSync(this.#fd);
    this.#fd = -1;
    if (this.#slotOf.size === 0 && this.#held === 0) rmSync(this.#file, { force: true });
  }

  /** One entry in a free slot: the slot, or undefined when it does not fit one. */
  #write(entry: unknown[]): number | undefined {
    const json = JSON.stringify(entry);
    const length = Buffer.byteLength(json);
    if (length > SLOT_BYTES - LENGTH_BYTES) return undefined;
    const bytes = Buffer.allocUnsafe(LENGTH_BYTES + length);
    bytes.writeUInt32LE(length, 0);
    bytes.write(json, LENGTH_BYTES);
    if (this.#free.length === 0) this.#grow(this.#capacity);
    const slot = this.#free.pop()!;
    writeSync(this.#fd, bytes, 0, bytes.length, slot * SLOT_BYTES);
    return slot;
  }

  /** Zeroed slots (a zero length is an empty slot), taken lowest first. */
  #grow(slots: number): void {
    const from = this.#capacity;
    writeSync(this.#fd, Buffer.alloc(slots * SLOT_BYTES), 0, slots * SLOT_BYTES, from * SLOT_BYTES);
    this.#capacity += slots;
    for (let slot = this.#capacity - 1; slot >= from; slot -= 1) this.#free.push(slot);
  }

  /** The rows in the slot files of `dir` other than `owner`'s: processes that are gone. */
  static orphaned(options: { dir: string; owner: string; columns: HeldColumns }): OrphanedSlots {
    let names: string[];
    try {
      const own = `${options.owner}.v${FORMAT_VERSION}${SUFFIX}`;
      names = readdirSync(options.dir).filter((name) => name.endsWith(SUFFIX) && name !== own);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
      names = [];
    }
    const files = names.map((name) => path.join(options.dir, name));
    const fileOf = new WeakMap<object, string>();
    const orphaned: OrphanedSlots = {
      inFlight: [],
      held: { token: [], use: [], attempt: [], call: [] },
      fileOf: (row) => fileOf.get(row),
      remove: () => undefined,
    };
    for (const file of files) {
      const version = Number(VERSIONED.exec(file)?.[1] ?? 1);
      const upgrade = UPGRADES.get(version);
      if (version !== FORMAT_VERSION && upgrade === undefined)
        throw new Error(
          `the slot file ${file} is of version ${version} of their layout and this llm-proxy reads version ${FORMAT_VERSION}: ${slotFileAdvice(file)}`,
        );
      const bytes = readFileSync(file);
      for (let at = 0; at + LENGTH_BYTES <= bytes.length; at += SLOT_BYTES) {
        const length = bytes.readUInt32LE(at);
        if (length === 0 || length > SLOT_BYTES - LENGTH_BYTES) continue;
        const entry = parseEntry(bytes.toString("utf8", at + LENGTH_BYTES, at + LENGTH_BYTES + length));
        if (!entry) continue;
        const [code, ...stored] = entry;
        const kind = KINDS.get(code as string);
        const values = kind !== undefined && upgrade !== undefined ? upgrade(kind, stored) : stored;
        const refuse = (what: string): Error =>
          new Error(`the slot file ${file} holds ${what} in slot ${at / SLOT_BYTES}: ${slotFileAdvice(file)}`);
        if (kind) {
          if (values.length !== options.columns[kind])
            throw refuse(`a row of kind ${kind} with ${values.length} values, not ${options.columns[kind]}`);
          orphaned.held[kind].push(values);
          fileOf.set(values, file);
        } else if (code === "p") {
          const row = pendingRow(values);
          if (!row) throw refuse("a call in flight this llm-proxy cannot read");
          const pending = pendingFromRow(row);
          orphaned.inFlight.push(pending);
          fileOf.set(pending, file);
        } else throw refuse(`a row of unknown kind ${JSON.stringify(code)}`);
      }
    }
    // A retry's slot and the one it replaced may both be there: the newest attempt stands for the call.
    orphaned.inFlight.sort((a, b) => b.attempt - a.attempt);
    return {
      ...orphaned,
      remove: () => {
        for (const file of files) rmSync(file, { force: true });
      },
    };
  }
}

function parseEntry(text: string): unknown[] | undefined {
  try {
    const entry = JSON.parse(text) as unknown;
    return Array.isArray(entry) && entry.length > 1 ? entry : undefined;
  } catch {
    // Not an entry this store wrote (a file cut short by a full disk): nothing to take up from it.
    return undefined;
  }
}

function pendingRow(values: unknown[]): PendingRow | undefined {
  if (values.length !== PENDING_COLUMNS.length) return undefined;
  const row = Object.fromEntries(PENDING_COLUMNS.map((column, i) => [column, values[i]])) as unknown as PendingRow;
  return typeof row.operation_id === "string" && typeof row.attempt === "number" ? row : undefined;
}
