// How proxy replicas on one PostgreSQL hear of each other's changes to what
// they cache: a secret set or deleted (KeyVault keeps encrypted rows), a token
// revoked (SessionTokens keeps live tokens). The store NOTIFYs in the same
// statement as the change, so listeners hear of it when it commits. NOTIFY
// reaches only connected listeners: when the listening connection drops, the
// feed says `reset` (drop every cache) at once and again when it is back.
import { NotificationListener } from "@oz0/postgres";
import type { StoreChange } from "./proxy-store.js";

export class PostgresChangeFeed {
  readonly #listeners = new Set<(change: StoreChange) => void>();
  readonly #connection: NotificationListener;

  constructor(options: { connectionString: string; channel: string; onError: (error: unknown) => void }) {
    const reset = (): void => this.#emit({ kind: "reset" });
    this.#connection = new NotificationListener({
      connectionString: options.connectionString,
      channel: options.channel,
      onNotification: (payload) => {
        try {
          this.#emit(JSON.parse(payload) as StoreChange);
        } catch (error) {
          options.onError(error);
          reset();
        }
      },
      onError: options.onError,
      // Changes made from the loss until listening resumes are missed: nothing cached may be trusted.
      onLost: reset,
      onReconnect: reset,
    });
  }

  watch(listener: (change: StoreChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #emit(change: StoreChange): void {
    for (const listener of this.#listeners) listener(change);
  }

  /** Opens the listening connection; throws when it cannot. */
  async start(): Promise<void> {
    await this.#connection.start();
  }

  async close(): Promise<void> {
    this.#listeners.clear();
    await this.#connection.close();
  }
}
