// How orchestrator replicas on one PostgreSQL hear of each other's writes,
// through NOTIFY on one channel per schema:
// - "An approval answered at any replica reaches the session": the replica
//   that takes the answer stores it and publishes `answered`; the replica
//   owning the job's lease writes the answer to its session.
// - A job's events appended at one replica (its owner) reach watchers at
//   every replica: the store publishes `appended` with the job's last seq,
//   and each replica's JobFeed reads the new events from the store.
// NOTIFY is delivered only to connected listeners and only on commit, so it
// is a wake-up, not the record: the rows are the record, and a replica that
// (re)connects or takes a job over reads undelivered answers from the store
// (`listPermissions({ undeliveredOnly: true })`) before relying on notices.
import { createHash } from "node:crypto";
import pg from "pg";
import { checkSchemaName } from "./postgres-migrations.js";

/** Which request of which job was answered, and how. */
export interface ApprovalAnswered {
  jobId: string;
  permissionId: string;
  /** The answer's PermissionStatus (approved, denied, cancelled, timed_out). */
  status: string;
}

/** A job's events `fromSeq` to `seq` are stored. */
export interface EventsAppended {
  jobId: string;
  fromSeq: number;
  seq: number;
}

type Notice = ({ kind: "answered" } & ApprovalAnswered) | ({ kind: "appended" } & EventsAppended);

export interface ClusterNotifierOptions {
  connectionString: string;
  /** The store's schema: channels are per database, so the name scopes them per deployment (and per test). */
  schema?: string;
  /** Called when the listening connection fails (it is then reopened) or a payload is unreadable. */
  onError?: (error: unknown) => void;
  /**
   * Called each time listening resumes after the connection was lost: answers
   * published meanwhile were missed, so the owner re-reads undelivered
   * answers from the store (`listPermissions({ undeliveredOnly: true })`).
   */
  onReconnect?: () => void;
}

// Reconnection backs off from 100 ms to 5 s, so a database restart is not hammered.
const RETRY_FIRST_MS = 100;
const RETRY_MAX_MS = 5_000;

export class ClusterNotifier {
  readonly channel: string;
  readonly #connectionString: string;
  readonly #onError: ((error: unknown) => void) | undefined;
  readonly #onReconnect: (() => void) | undefined;
  readonly #answered = new Set<(answer: ApprovalAnswered) => void>();
  readonly #appended = new Set<(appended: EventsAppended) => void>();
  #listener: pg.Client | undefined;
  #listening = false;
  #retryTimer: NodeJS.Timeout | undefined;
  #retryMs = RETRY_FIRST_MS;

  constructor(options: ClusterNotifierOptions) {
    this.#connectionString = options.connectionString;
    this.channel = channelName(checkSchemaName(options.schema ?? "oz0"));
    this.#onError = options.onError;
    this.#onReconnect = options.onReconnect;
  }

  /**
   * Publishes an answer. Pass the client of the transaction that stores the
   * answer so listeners are woken only if (and when) it commits; with a pool
   * it is sent at once.
   */
  async publish(db: pg.Pool | pg.PoolClient | pg.Client, answer: ApprovalAnswered): Promise<void> {
    await this.#notify(db, { kind: "answered", jobId: answer.jobId, permissionId: answer.permissionId, status: answer.status });
  }

  /** Publishes that a job's events up to `seq` are stored; pass the appending transaction's client. */
  async publishAppended(db: pg.Pool | pg.PoolClient | pg.Client, appended: EventsAppended): Promise<void> {
    await this.#notify(db, { kind: "appended", jobId: appended.jobId, fromSeq: appended.fromSeq, seq: appended.seq });
  }

  async #notify(db: pg.Pool | pg.PoolClient | pg.Client, notice: Notice): Promise<void> {
    // pg_notify takes the channel as a parameter, unlike the NOTIFY statement.
    await db.query("SELECT pg_notify($1, $2)", [this.channel, JSON.stringify(notice)]);
  }

  /** Calls `handler` for every answer published from now on (after `listen()` resolved). Returns the unsubscribe. */
  subscribe(handler: (answer: ApprovalAnswered) => void): () => void {
    this.#answered.add(handler);
    return () => this.#answered.delete(handler);
  }

  /** Calls `handler` whenever any replica stored events of a job. Returns the unsubscribe. */
  subscribeAppended(handler: (appended: EventsAppended) => void): () => void {
    this.#appended.add(handler);
    return () => this.#appended.delete(handler);
  }

  /** Opens the dedicated listening connection (a pooled one would be handed to other queries) and keeps it open until `close()`. */
  async listen(): Promise<void> {
    if (this.#listening) return;
    this.#listening = true;
    await this.#connect();
  }

  async #connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.#connectionString });
    client.on("notification", (message) => {
      if (message.channel !== this.channel || !message.payload) return;
      let notice: Notice;
      try {
        notice = JSON.parse(message.payload) as Notice;
      } catch (error) {
        this.#onError?.(error);
        return;
      }
      if (notice.kind === "appended") {
        for (const handler of this.#appended) handler({ jobId: notice.jobId, fromSeq: notice.fromSeq, seq: notice.seq });
      } else {
        for (const handler of this.#answered) handler({ jobId: notice.jobId, permissionId: notice.permissionId, status: notice.status });
      }
    });
    let lost = false;
    const onLost = (error: unknown): void => {
      if (lost) return;
      lost = true;
      if (this.#listener === client) this.#listener = undefined;
      client.end().catch(() => undefined);
      if (!this.#listening) return;
      this.#onError?.(error);
      this.#scheduleReconnect();
    };
    client.on("error", onLost);
    client.on("end", () => onLost(new Error("the listening connection to PostgreSQL ended")));
    try {
      await client.connect();
      // The channel name is checked (letters, digits, underscores), so it is safe as an identifier.
      await client.query(`LISTEN ${this.channel}`);
    } catch (error) {
      lost = true;
      await client.end().catch(() => undefined);
      throw error;
    }
    this.#listener = client;
    this.#retryMs = RETRY_FIRST_MS;
  }

  #scheduleReconnect(): void {
    if (this.#retryTimer || !this.#listening) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      if (!this.#listening) return;
      this.#connect().then(
        () => this.#onReconnect?.(),
        (error: unknown) => {
          this.#onError?.(error);
          this.#retryMs = Math.min(this.#retryMs * 2, RETRY_MAX_MS);
          this.#scheduleReconnect();
        },
      );
    }, this.#retryMs);
  }

  async close(): Promise<void> {
    this.#listening = false;
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    const client = this.#listener;
    this.#listener = undefined;
    this.#answered.clear();
    this.#appended.clear();
    await client?.end();
  }
}

// Channel names are identifiers (at most 63 bytes): a long schema name is hashed to fit.
function channelName(schema: string): string {
  const plain = `${schema}_cluster`;
  return plain.length <= 63 ? plain : `oz0_cluster_${createHash("sha256").update(schema).digest("hex").slice(0, 32)}`;
}
