// One LISTEN connection that comes back by itself. NOTIFY reaches only
// connected listeners, and only on commit: a notice is a wake-up, never the
// record. So a listener says when its connection is lost (notices from then
// until it is back are missed) and when it is back, and the caller re-reads
// what it relies on from the tables.
import pg from "pg";

// Reconnection backs off from 100 ms to 5 s, so a database restart is not hammered.
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 5_000;

export interface NotificationListenerOptions {
  connectionString: string;
  /** A checked identifier (see `channelName`): it is written into `LISTEN` as is. */
  channel: string;
  /** Each notice's payload on the channel. */
  onNotification: (payload: string) => void;
  /** The connection failed or could not be reopened (it is tried again). */
  onError?: (error: unknown) => void;
  /** The connection was lost: notices are missed until `onReconnect`. */
  onLost?: () => void;
  /** Listening again after a loss. */
  onReconnect?: () => void;
}

export class NotificationListener {
  readonly #options: NotificationListenerOptions;
  #client: pg.Client | undefined;
  #open = false;
  #retryTimer: NodeJS.Timeout | undefined;
  #retryMs = RETRY_FIRST_MS;

  constructor(options: NotificationListenerOptions) {
    this.#options = options;
  }

  /** Opens the listening connection (its own, never a pooled one: a pool would hand it to other queries); throws when it cannot. */
  async start(): Promise<void> {
    if (this.#open) return;
    this.#open = true;
    try {
      await this.#connect();
    } catch (error) {
      // Not listening: a later start() tries again.
      this.#open = false;
      throw error;
    }
  }

  async #connect(): Promise<void> {
    const { channel } = this.#options;
    const client = new pg.Client({ connectionString: this.#options.connectionString });
    client.on("notification", (message) => {
      if (message.channel === channel && message.payload) this.#options.onNotification(message.payload);
    });
    let lost = false;
    const onLost = (error: unknown): void => {
      if (lost) return;
      lost = true;
      if (this.#client === client) this.#client = undefined;
      client.end().catch(() => undefined);
      if (!this.#open) return;
      this.#options.onError?.(error);
      this.#options.onLost?.();
      this.#reconnectLater();
    };
    client.on("error", onLost);
    client.on("end", () => onLost(new Error("the listening connection to PostgreSQL ended")));
    try {
      await client.connect();
      await client.query(`LISTEN ${channel}`);
    } catch (error) {
      lost = true;
      await client.end().catch(() => undefined);
      throw error;
    }
    if (!this.#open) {
      // Closed while this connection was being opened: it must not outlive the listener.
      lost = true;
      await client.end().catch(() => undefined);
      return;
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
        () => {
          if (this.#open) this.#options.onReconnect?.();
        },
        (error: unknown) => {
          this.#options.onError?.(error);
          this.#retryMs = Math.min(this.#retryMs * 2, RETRY_MAX_MS);
          this.#reconnectLater();
        },
      );
    }, this.#retryMs);
    // What keeps a process alive is its server, not a listener waiting to reconnect.
    this.#retryTimer.unref();
  }

  async close(): Promise<void> {
    this.#open = false;
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => undefined);
  }
}
