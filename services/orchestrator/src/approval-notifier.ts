// "An approval answered at any replica reaches the session": the replica that
// takes the answer stores it and publishes a NOTIFY; the replica owning the
// job's lease LISTENs and writes the answer to its session. NOTIFY is
// delivered only to connected listeners and only on commit, so it is a
// wake-up, not the record: the permission row is the record, and an owner
// that (re)connects or takes a job over reads undelivered answers from the
// store (`listPermissions({ undeliveredOnly: true })`) before relying on
// notifications.
import { createHash } from "node:crypto";
import pg from "pg";
import { checkSchemaName } from "./postgres-migrations.js";

/** What a notification says: which request of which job was answered, and how. */
export interface ApprovalAnswered {
  jobId: string;
  permissionId: string;
  /** The answer's PermissionStatus (approved, denied, cancelled, timed_out). */
  status: string;
}

export interface ApprovalNotifierOptions {
  connectionString: string;
  /** The store's schema: channels are per database, so the name scopes them per deployment (and per test). */
  schema?: string;
  /** Called when the listening connection fails; the owner should re-read undelivered answers after `listen()` again. */
  onError?: (error: unknown) => void;
}

export class ApprovalNotifier {
  readonly channel: string;
  readonly #connectionString: string;
  readonly #onError: ((error: unknown) => void) | undefined;
  readonly #handlers = new Set<(answer: ApprovalAnswered) => void>();
  #listener: pg.Client | undefined;

  constructor(options: ApprovalNotifierOptions) {
    this.#connectionString = options.connectionString;
    this.channel = channelName(checkSchemaName(options.schema ?? "oz0"));
    this.#onError = options.onError;
  }

  /**
   * Publishes an answer. Pass the client of the transaction that stores the
   * answer so listeners are woken only if (and when) it commits; with a pool
   * it is sent at once.
   */
  async publish(db: pg.Pool | pg.PoolClient | pg.Client, answer: ApprovalAnswered): Promise<void> {
    // pg_notify takes the channel as a parameter, unlike the NOTIFY statement.
    await db.query("SELECT pg_notify($1, $2)", [this.channel, JSON.stringify(answer)]);
  }

  /** Calls `handler` for every answer published from now on (after `listen()` resolved). Returns the unsubscribe. */
  subscribe(handler: (answer: ApprovalAnswered) => void): () => void {
    this.#handlers.add(handler);
    return () => this.#handlers.delete(handler);
  }

  /** Opens the dedicated listening connection (a pooled one would be handed to other queries). */
  async listen(): Promise<void> {
    if (this.#listener) return;
    const client = new pg.Client({ connectionString: this.#connectionString });
    client.on("notification", (message) => {
      if (message.channel !== this.channel || !message.payload) return;
      let answer: ApprovalAnswered;
      try {
        answer = JSON.parse(message.payload) as ApprovalAnswered;
      } catch (error) {
        this.#onError?.(error);
        return;
      }
      for (const handler of this.#handlers) handler(answer);
    });
    client.on("error", (error) => {
      // The connection is gone; notifications sent meanwhile are lost, so the owner re-reads the store.
      this.#listener = undefined;
      this.#onError?.(error);
    });
    await client.connect();
    // The channel name is checked (letters, digits, underscores), so it is safe as an identifier.
    await client.query(`LISTEN ${this.channel}`);
    this.#listener = client;
  }

  async close(): Promise<void> {
    const client = this.#listener;
    this.#listener = undefined;
    this.#handlers.clear();
    await client?.end();
  }
}

// Channel names are identifiers (at most 63 bytes): a long schema name is hashed to fit.
function channelName(schema: string): string {
  const plain = `${schema}_approval_answered`;
  return plain.length <= 63 ? plain : `oz0_approval_answered_${createHash("sha256").update(schema).digest("hex").slice(0, 32)}`;
}
