/**
 * The context bag: one per run. Steps and parallel branches work on overlays
 * (writes stay local until committed), which is how the engine knows exactly
 * what a step changed and checkpoints that delta instead of the whole bag, and
 * how branches all see the bag as it was at the fork.
 */

/** Turns a bag copy into what logs and the manager may see. */
export type RedactFn = (bag: Record<string, unknown>) => Record<string, unknown>;

/**
 * The default redaction: nothing is hidden. Supply `redact` to the runner to
 * drop or mask keys (secrets pasted into prompts, personal data) before a
 * snapshot leaves the engine for logs or the manager agent.
 */
export const redactNothing: RedactFn = (bag) => bag;

/** What a secret key's value reads as in a snapshot. */
export const SECRET_MASK = "[secret]";

/** A redaction that shows each of `keys` that is set as {@link SECRET_MASK}, then applies `then`. */
export function maskKeys(keys: readonly string[], then: RedactFn = redactNothing): RedactFn {
  if (keys.length === 0) return then;
  return (bag) => {
    const masked = { ...bag };
    for (const key of keys) if (Object.hasOwn(masked, key) && masked[key] !== null) masked[key] = SECRET_MASK;
    return then(masked);
  };
}

/** Keys set during one step (or branch) and their final values. */
export type BagDelta = Record<string, unknown>;

/** Options for {@link HarnessContext}. */
export interface HarnessContextOptions {
  /** Initial contents. */
  initial?: Record<string, unknown>;
  /** Applied by {@link HarnessContext.snapshot}; defaults to {@link redactNothing}. */
  redact?: RedactFn;
}

/**
 * The bag steps read and write. Missing keys read as `null`. Values must be
 * JSON-serialisable and treated as immutable: `set` a new value rather than
 * mutating one you got, or the change is not checkpointed.
 */
export class HarnessContext {
  readonly #values: Map<string, unknown>;
  readonly #redact: RedactFn;
  #parent: HarnessContext | null;

  public constructor(options: HarnessContextOptions = {}) {
    this.#values = new Map(Object.entries(options.initial ?? {}));
    this.#redact = options.redact ?? redactNothing;
    this.#parent = null;
  }

  /** The value of `key`, or `null` when it was never set. */
  public get(key: string): unknown {
    if (this.#values.has(key)) return this.#values.get(key);
    return this.#parent ? this.#parent.get(key) : null;
  }

  /** The value of `key` as text (JSON for non-strings), or `null` when unset. */
  public getString(key: string): string | null {
    const v = this.get(key);
    if (v === null || v === undefined) return null;
    return typeof v === "string" ? v : JSON.stringify(v);
  }

  /** Sets `key`; `undefined` is stored as `null`. */
  public set(key: string, value: unknown): void {
    this.#values.set(key, value === undefined ? null : value);
  }

  /** Keys currently set. */
  public keys(): string[] {
    if (!this.#parent) return [...this.#values.keys()];
    const all = new Set(this.#parent.keys());
    for (const k of this.#values.keys()) all.add(k);
    return [...all];
  }

  /** A redacted deep copy, for logs and the manager agent. */
  public snapshot(): Record<string, unknown> {
    return this.#redact(this.toJSON());
  }

  /** An unredacted deep copy of the whole bag. */
  public toJSON(): Record<string, unknown> {
    const own = Object.fromEntries(this.#values);
    return structuredClone(this.#parent ? { ...this.#parent.toJSON(), ...own } : own);
  }

  /**
   * @internal A view whose writes stay local until {@link HarnessContext.writes}
   * are applied to this bag; reads fall through to this bag.
   */
  public overlay(): HarnessContext {
    const child = new HarnessContext({ redact: this.#redact });
    child.#parent = this;
    return child;
  }

  /** @internal The keys written to this overlay and their values. */
  public writes(): BagDelta {
    return Object.fromEntries(this.#values);
  }

  /** @internal Applies recorded or merged writes. */
  public apply(delta: BagDelta): void {
    for (const [k, v] of Object.entries(delta)) this.#values.set(k, v);
  }
}
