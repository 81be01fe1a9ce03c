// Durable records of harness-operation invocations, one file per runtime tool
// call under <home>/jobs/<job>/operations/. A record is written when the call
// is accepted (so a restarted orchestrator knows the parent still waits for
// it) and again when its result validated: the step.do checkpoint. After a
// crash a validated result is delivered as recorded, never asked again; a
// call without one runs again (exactly-once recorded, at-least-once executed).
// Files are replaced atomically (write, fsync, rename), so a crash mid-write
// leaves the previous record.
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, writeSync } from "node:fs";
import path from "node:path";
import type { JsonObject } from "./job-store.js";

export type CheckpointStatus = "running" | "validated" | "failed";

export interface OperationCheckpoint {
  jobId: string;
  /** The RuntimeToolCall's id: the key, unique within the job's parent session. */
  callId: string;
  invocationId: string;
  operationKey: string;
  /** Kept (in the orchestrator's private data directory) so a crash before the checkpoint can run the operation again. */
  task: string;
  startedAt: string;
  status: CheckpointStatus;
  /** The validated result, once status is validated. */
  result?: JsonObject;
  /** What the parent's model was told, once status is failed. */
  error?: string;
  errorCode?: string;
  /** The answer reached the parent's session stream. */
  delivered: boolean;
  /** Scratch sessions started for it, so a restart can cancel leftovers. */
  scratchSessionIds: string[];
}

export class OperationCheckpoints {
  readonly #home: string;

  constructor(options: { home: string }) {
    this.#home = options.home;
  }

  #dir(jobId: string): string {
    return path.join(this.#home, "jobs", jobId, "operations");
  }

  #file(jobId: string, callId: string): string {
    // Call ids come from the harness: keep the file name to safe characters.
    return path.join(this.#dir(jobId), `${callId.replace(/[^A-Za-z0-9_.-]/g, "_")}.json`);
  }

  get(jobId: string, callId: string): OperationCheckpoint | undefined {
    try {
      return JSON.parse(readFileSync(this.#file(jobId, callId), "utf8")) as OperationCheckpoint;
    } catch {
      return undefined;
    }
  }

  put(record: OperationCheckpoint): void {
    mkdirSync(this.#dir(record.jobId), { recursive: true });
    const file = this.#file(record.jobId, record.callId);
    const temp = `${file}.${process.pid}.tmp`;
    const fd = openSync(temp, "w", 0o600);
    try {
      writeSync(fd, JSON.stringify(record));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, file);
  }

  /** Records of the job whose answer has not reached the parent yet. */
  undelivered(jobId: string): OperationCheckpoint[] {
    let names: string[];
    try {
      names = readdirSync(this.#dir(jobId)).filter((n) => n.endsWith(".json"));
    } catch {
      return [];
    }
    return names
      .map((n) => {
        try {
          return JSON.parse(readFileSync(path.join(this.#dir(jobId), n), "utf8")) as OperationCheckpoint;
        } catch {
          return undefined;
        }
      })
      .filter((r): r is OperationCheckpoint => r !== undefined && !r.delivered);
  }
}
