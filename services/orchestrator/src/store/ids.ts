// Ids of what the orchestrator stores and starts: a prefix that names the
// kind (`job_`, `ses_`, `graph_`, `opi_`), then 20 random hex digits, so an id
// in a log or a URL says what it is and ids never collide across replicas.
import { randomUUID } from "node:crypto";

export function newId(prefix: string): string {
  return `${prefix}${randomUUID().replaceAll("-", "").slice(0, 20)}`;
}

/** A new job's id. */
export function newJobId(): string {
  return newId("job_");
}

/** A session's id: a job gets one, and a new one whenever its session is started afresh elsewhere. */
export function newSessionId(): string {
  return newId("ses_");
}
