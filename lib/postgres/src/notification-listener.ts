// One LISTEN connection that comes back by itself. NOTIFY reaches only
// connected listeners, and only on commit: a notice is a wake-up, never the
// record. So a listener says when its connection is lost (notices from then
// until it is back are missed) and when it is back, and the caller re-reads
// what it relies on from the tables.
//
// A listening connection only reads, so a peer that vanished without a FIN or
// RST (a node failure, a NAT forgetting the mapping) would go unnoticed for
// good: nothing is written, so nothing fails. Hence TCP keepalive, and a
// periodic `SELECT 1` that must be answered in time: when it is not, the
// connection counts as lost and is replaced like any other.
import pg from "pg";

// Reconnection backs off from 100 ms to 5 s, so a database restart is not hammered.
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 5_000;
// TCP keepalive probes start after this much silence (the probes' interval and count are the system's).
const KEEPALIVE_IDLE_MS = 10_000;
const LIVENESS_INTERVAL_MS = 30_000;
const LIVENESS_TIMEOUT_MS = 10_000;

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
  /** How long the connection may sit between liveness checks (`SELECT 1`). Default 30 s; both must be positive. */
  livenessIntervalMs?: number;
  /**
   * How long the server may take to answer a liveness check, or to open a
   * connection and `LISTEN` on it; longer and the connection counts as lost
   * (and `start()` fails). Default 10 s.
   */
  livenessTimeoutMs?: number;
}

function positive(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (!Number.isFinite(value) || value <= 0)
    throw new Error(`${name} must be a positive number of milliseconds, not ${value}`);
  return value;
}

/** `promise`, or an error saying what did not answer once `ms` have passed. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer from PostgreSQL within ${ms} ms`)), ms);
    // What keeps the process alive is the connection, not the wait for its answer.
    timer.unref();
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Ends `client`: with a goodbye to the server when it answers, else (a query
 * unanswered, or no answer within `ms`) by destroying the socket, since a
 * silent peer never finishes closing.
 */
async function endClient(client: pg.Client, ms: number): Promise<void> {
  await within(client.end(), ms, "ending the listening connection").catch(() => client.connection.stream.destroy());
}

export class NotificationListener {
  readonly #options: NotificationListenerOptions;
  readonly #livenessIntervalMs: number;
  readonly #livenessTimeoutMs: number;
  #client: pg.Client | undefined;
  #open = false;
  #retryTimer: NodeJS.Timeout | undefined;
  #livenessTimer: NodeJS.Timeout | undefined;
  #retryMs = RETRY_FIRST_MS;

  constructor(options: NotificationListenerOptions) {
    this.#options = options;
    this.#livenessIntervalMs = positive(options.livenessIntervalMs, LIVENESS_INTERVAL_MS, "livenessIntervalMs");
    this.#livenessTimeoutMs = positive(options.livenessTimeoutMs, LIVENESS_TIMEOUT_MS, "livenessTimeoutMs");
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
    const client = new pg.Client({
      connectionString: this.#options.connectionString,
      keepAlive: true,
      keepAliveInitialDelayMillis: KEEPALIVE_IDLE_MS,
      connectionTimeoutMillis: this.#livenessTimeoutMs,
    });
    client.on("notification", (message) => {
      if (message.channel === channel && message.payload) this.#options.onNotification(message.payload);
    });
    let lost = false;
    const onLost = (error: unknown): void => {
      if (lost) return;
      lost = true;
      if (this.#client === client) {
        this.#client = undefined;
        clearTimeout(this.#livenessTimer);
        this.#livenessTimer = undefined;
      }
      void endClient(client, this.#livenessTimeoutMs);
      if (!this.#open) return;
      this.#options.onError?.(error);
      this.#options.onLost?.();
      this.#reconnectLater();
    };
    client.on("error", onLost);
    client.on("end", () => onLost(new Error("the listening connection to PostgreSQL ended")));
    try {
      await client.connect();
      await within(client.query(`LISTEN ${channel}`), this.#livenessTimeoutMs, `LISTEN ${channel}`);
    } catch (error) {
      lost = true;
      void endClient(client, this.#livenessTimeoutMs);
      throw error;
    }
    if (!this.#open) {
      // Closed while this connection was being opened: it must not outlive the listener.
      lost = true;
      await endClient(client, this.#livenessTimeoutMs);
      return;
    }
    this.#client = client;
    this.#retryMs = RETRY_FIRST_MS;
    this.#checkLater(client, onLost);
  }

  /** Asks `client` for `SELECT 1` after the interval, and again after each answer; no answer in time is a loss. */
  #checkLater(client: pg.Client, onLost: (error: unknown) => void): void {
    this.#livenessTimer = setTimeout(() => {
      this.#livenessTimer = undefined;
      if (this.#client !== client) return;
      within(client.query("SELECT 1"), this.#livenessTimeoutMs, "the listening connection's liveness check").then(
        () => {
          if (this.#client === client) this.#checkLater(client, onLost);
        },
        onLost,
      );
    }, this.#livenessIntervalMs);
    // The connection, not its checks, is what keeps the process alive while listening.
    this.#livenessTimer.unref();
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
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    clearTimeout(this.#livenessTimer);
    this.#livenessTimer = undefined;
    const client = this.#client;
    this.#client = undefined;
    if (client) await endClient(client, this.#livenessTimeoutMs);
  }
}
