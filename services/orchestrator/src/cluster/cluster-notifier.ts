// How orchestrator replicas on one PostgreSQL hear of each other's writes,
// through NOTIFY on one channel per schema:
// - "An approval answered at any replica reaches the session": the replica
//   that takes the answer stores it and publishes `answered`; the replica
//   owning the job's lease writes the answer to its session.
// - A job's events appended at one replica (its owner) reach watchers at
//   every replica: the store publishes `appended` with the job's last seq,
//   and each replica's JobFeed reads the new events from the store.
// - A job cancelled at any replica stops, even behind a node that lets its
//   session run on: the store publishes `cancelRequested`, and the replica
//   owning the job starts its wait for the session's end (session-stops.ts).
// NOTIFY is delivered only to connected listeners and only on commit, so it
// is a wake-up, not the record: the rows are the record, and a replica that
// (re)connects or takes a job over reads undelivered answers from the store
// (`listPermissions({ undeliveredOnly: true })`) before relying on notices.
import { channelName, NotificationListener } from "@oz0/postgres";
import type { SqlClient } from "../store/postgres-locks.js";

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

/** A cancel of the job is stored. */
export interface CancelRequested {
  jobId: string;
}

type Notice =
  | ({ kind: "answered" } & ApprovalAnswered)
  | ({ kind: "appended" } & EventsAppended)
  | ({ kind: "cancelRequested" } & CancelRequested);

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

export class ClusterNotifier {
  readonly channel: string;
  readonly #answered = new Set<(answer: ApprovalAnswered) => void>();
  readonly #appended = new Set<(appended: EventsAppended) => void>();
  readonly #cancelled = new Set<(cancel: CancelRequested) => void>();
  readonly #listener: NotificationListener;

  constructor(options: ClusterNotifierOptions) {
    this.channel = channelName(options.schema ?? "oz0", "cluster");
    this.#listener = new NotificationListener({
      connectionString: options.connectionString,
      channel: this.channel,
      onNotification: (payload) => this.#deliver(payload, options.onError),
      ...(options.onError ? { onError: options.onError } : {}),
      ...(options.onReconnect ? { onReconnect: options.onReconnect } : {}),
    });
  }

  /**
   * Publishes an answer. Pass the client of the transaction that stores the
   * answer so listeners are woken only if (and when) it commits; with a pool
   * it is sent at once.
   */
  async publish(db: SqlClient, answer: ApprovalAnswered): Promise<void> {
    await this.#notify(db, {
      kind: "answered",
      jobId: answer.jobId,
      permissionId: answer.permissionId,
      status: answer.status,
    });
  }

  /** Publishes that a job's events up to `seq` are stored; pass the appending transaction's client. */
  async publishAppended(db: SqlClient, appended: EventsAppended): Promise<void> {
    await this.#notify(db, { kind: "appended", jobId: appended.jobId, fromSeq: appended.fromSeq, seq: appended.seq });
  }

  /** Publishes that a cancel of the job is stored; pass the cancelling transaction's client. */
  async publishCancelRequested(db: SqlClient, cancel: CancelRequested): Promise<void> {
    await this.#notify(db, { kind: "cancelRequested", jobId: cancel.jobId });
  }

  async #notify(db: SqlClient, notice: Notice): Promise<void> {
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

  /** Calls `handler` whenever any replica stored a job's cancel. Returns the unsubscribe. */
  subscribeCancelRequested(handler: (cancel: CancelRequested) => void): () => void {
    this.#cancelled.add(handler);
    return () => this.#cancelled.delete(handler);
  }

  /** Opens the dedicated listening connection and keeps it open (reconnecting) until `close()`. */
  async listen(): Promise<void> {
    await this.#listener.start();
  }

  #deliver(payload: string, onError: ((error: unknown) => void) | undefined): void {
    let notice: Notice;
    try {
      notice = JSON.parse(payload) as Notice;
    } catch (error) {
      onError?.(error);
      return;
    }
    if (notice.kind === "appended") {
      for (const handler of this.#appended) handler({ jobId: notice.jobId, fromSeq: notice.fromSeq, seq: notice.seq });
    } else if (notice.kind === "cancelRequested") {
      for (const handler of this.#cancelled) handler({ jobId: notice.jobId });
    } else {
      for (const handler of this.#answered)
        handler({ jobId: notice.jobId, permissionId: notice.permissionId, status: notice.status });
    }
  }

  async close(): Promise<void> {
    this.#answered.clear();
    this.#appended.clear();
    this.#cancelled.clear();
    await this.#listener.close();
  }
}
