// How proxy replicas on one PostgreSQL hear of each other's changes to what
// they cache: a secret set or deleted (KeyVault keeps encrypted rows), a token
// revoked (SessionTokens keeps live tokens). The store NOTIFYs in the same
// statement as the change, so listeners hear of it when it commits. NOTIFY
// reaches only connected listeners: when the listening connection drops, the
// feed says `reset` (drop every cache) at once and again when it is back.
import { createHash } from "node:crypto";
import pg from "pg";
import type { StoreChange } from "./proxy-store.js";

const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 5_000;

/** The NOTIFY channel of a schema's proxy tables (an identifier, at most 63 bytes). */
export function changeChannel(schema: string): string {
  const plain = `${schema}_llm_proxy`;
  return plain.length <= 63 ? plain : `oz0_llm_proxy_${createHash("sha256").update(schema).digest("hex").slice(0, 32)}`;
}

export class PostgresChangeFeed {
  readonly #connectionString: string;
  readonly #channel: string;
  readonly #onError: (error: unknown) => void;
  readonly #listeners = new Set<(change: StoreChange) => void>();
  #client: pg.Client | undefined;
  #open = false;
  #retryTimer: NodeJS.Timeout | undefined;
  #retryMs = RETRY_FIRST_MS;

  constructor(options: { connectionString: string; channel: string; onError: (error: unknown) => void }) {
    this.#connectionString = options.connectionString;
    this.#channel = options.channel;
    this.#onError = options.onError;
  }

  watch(listener: (change: StoreChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #emit(change: StoreChange): void {
    for (const listener of this.#listeners) listener(change);
  }

  /** Opens the listening connection (its own, never a pooled one); throws when it cannot. */
  async start(): Promise<void> {
    this.#open = true;
    await this.#connect();
  }

  async #connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.#connectionString });
    client.on("notification", (message) => {
      if (message.channel !== this.#channel || !message.payload) return;
      try {
        this.#emit(JSON.parse(message.payload) as StoreChange);
      } catch (error) {
        this.#onError(error);
        this.#emit({ kind: "reset" });
      }
    });
    let lost = false;
    const onLost = (error: unknown): void => {
      if (lost) return;
      lost = true;
      if (this.#client === client) this.#client = undefined;
      client.end().catch(() => undefined);
      if (!this.#open) return;
      this.#onError(error);
      // Changes made from now until listening resumes are missed: nothing cached may be trusted.
      this.#emit({ kind: "reset" });
      this.#reconnectLater();
    };
    client.on("error", onLost);
    client.on("end", () => onLost(new Error("the listening connection to PostgreSQL ended")));
    try {
      await client.connect();
      // The channel is letters, digits and underscores (checked schema name), so safe as an identifier.
      await client.query(`LISTEN ${this.#channel}`);
    } catch (error) {
      lost = true;
      await client.end().catch(() => undefined);
      throw error;
    }
    this.#client = client;
    this.#retryMs = RETRY_FIRST_MS;
  }

  #reconnectLater(): void {
    if (this.#retryTimer || !this.#open) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      if (!this.#open) return;
      this.#connect().then(
        () => this.#emit({ kind: "reset" }),
        (error: unknown) => {
          this.#onError(error);
          this.#retryMs = Math.min(this.#retryMs * 2, RETRY_MAX_MS);
          this.#reconnectLater();
        },
      );
    }, this.#retryMs);
    this.#retryTimer.unref();
  }

  async close(): Promise<void> {
    this.#open = false;
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    const client = this.#client;
    this.#client = undefined;
    this.#listeners.clear();
    await client?.end().catch(() => undefined);
  }
}
