// Where a harness's stderr goes on the orchestrator's side: each piece the
// sandbox logged (the session token already scrubbed there) is stored with
// the job, bounded per session, for `oz0 jobs logs`; and a failure message
// ends with the last few lines of it and says where the rest is.
import { escapeRefusedCharacters } from "@oz0/harness/host";
import type { JobStore, StderrAppend, StderrPiece } from "../store/job-store.js";
import type { SandboxMessage } from "./session-runner.js";

/** Default of what the store keeps of each session (OZ0_MAX_SESSION_STDERR_BYTES): its last 1 MiB. */
export const DEFAULT_MAX_STDERR_BYTES = 1024 * 1024;
/** A failure message carries at most this many of the last lines, */
const EXCERPT_LINES = 5;
/** and at most this many bytes of them. */
const EXCERPT_BYTES = 1024;
/** How much of a stored session's end an excerpt is taken from. */
const TAIL_CHARS = 4096;
/** Pieces read from the store at a time. */
const PAGE = 100;

/** A stderr piece of a session, as the store takes it. */
export function stderrAppend(message: Extract<SandboxMessage, { kind: "stderr" }>, maxBytes: number): StderrAppend {
  return {
    sessionId: message.sessionId,
    piece: { seq: message.seq, text: message.text, droppedBytes: message.droppedBytes },
    maxBytes,
  };
}

/**
 * `message` followed by the last lines of the harness's stderr (at most 5,
 * at most 1 KiB, on one line, inert as harness-text.ts says: an escape
 * sequence in them is a `\u001b` in the message), and, with `jobId`, the
 * command that prints all of it. Unchanged when the harness wrote nothing there.
 */
export function withStderr(message: string, options: { stderr: string; jobId?: string }): string {
  const lines = options.stderr
    .split("\n")
    .map((line) => line.trimEnd())
    .filter((line) => line.trim() !== "")
    .slice(-EXCERPT_LINES);
  if (lines.length === 0) return message;
  let excerpt = lines.join(" | ");
  if (Buffer.byteLength(excerpt) > EXCERPT_BYTES)
    excerpt = `…${Buffer.from(excerpt)
      .subarray(-EXCERPT_BYTES)
      .toString("utf8")
      .replace(/^\uFFFD+/, "")}`;
  return `${message}; its stderr ended with: ${escapeRefusedCharacters(excerpt)}${options.jobId ? ` (all of it: \`oz0 jobs logs ${options.jobId}\`)` : ""}`;
}

/** The last few KiB of a session's stored stderr ("" when it wrote none). */
export async function storedStderrTail(
  store: JobStore,
  options: { jobId: string; sessionId: string },
): Promise<string> {
  let tail = "";
  for await (const piece of storedPieces(store, options)) tail = (tail + piece.text).slice(-TAIL_CHARS);
  return tail;
}

/** A session's stored pieces in order, read a page at a time. */
async function* storedPieces(
  store: JobStore,
  options: { jobId: string; sessionId: string },
): AsyncGenerator<StderrPiece> {
  for (let after = 0; ;) {
    const page = await store.listStderrPieces(options.jobId, options.sessionId, after, PAGE);
    yield* page;
    if (page.length < PAGE) return;
    after = page[page.length - 1]!.seq;
  }
}

/** One piece of a job's stored stderr, as `GetJobLogs` sends it. */
export interface JobStderrPiece {
  sessionId: string;
  text: string;
  droppedBytes: number;
}

/**
 * Every session's stored stderr, sessions in the order they first wrote:
 * a piece with no text for what was dropped before its first kept piece,
 * its pieces, and one for what was dropped after its last.
 */
export async function* readJobStderr(store: JobStore, jobId: string): AsyncGenerator<JobStderrPiece> {
  for (const session of await store.listStderrSessions(jobId)) {
    const { sessionId } = session;
    if (session.droppedBytes > 0) yield { sessionId, text: "", droppedBytes: session.droppedBytes };
    for await (const piece of storedPieces(store, { jobId, sessionId }))
      yield { sessionId, text: piece.text, droppedBytes: piece.droppedBytes };
    if (session.trailingDroppedBytes > 0) yield { sessionId, text: "", droppedBytes: session.trailingDroppedBytes };
  }
}
