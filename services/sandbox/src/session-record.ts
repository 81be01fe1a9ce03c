// What a restarted sandbox needs to take over a session it did not start: the
// session's record (its request and directories, its keeper; bwrap's init is in the keeper's info file),
// its event log as sent so far (each message as it is appended, so seqs are
// the same after the restart), and the ids of the requests already answered.
// All of it lives in the session's internal directory, readable by the
// sandbox alone, and goes with it when the session is removed.
import {
  appendFileSync,
  closeSync,
  constants as fs,
  fstatSync,
  ftruncateSync,
  openSync,
  readFileSync,
  writeSync,
  writevSync,
} from "node:fs";
import path from "node:path";
import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { BinaryWriter, sizeDelimitedPeek } from "@bufbuild/protobuf/wire";
import { fromBinary } from "@bufbuild/protobuf";
import { SessionRequestSchema, type SessionRequest } from "@oz0/proto/oz0/harness/v1/harness_pb";
import {
  RunSessionResponseSchema,
  StartSessionSchema,
  type RunSessionResponse,
  type StartSession,
} from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import type { SessionPaths } from "./session-directories.js";

export interface SessionRecord {
  start: StartSession;
  request: SessionRequest;
  command: string[];
  paths: SessionPaths;
  keeper: { pid: number; startTime: string };
  /** The pid of bwrap's namespace init (SIGTERM goes to its group), in records written before the keeper's info file (fd3) held it. */
  initPid?: number;
  baseline: "snapshot" | "empty" | "none";
  startTime: string;
  /** The session's LLM sockets are the node's shared ones (llm-forwarder.ts); records written before those were its own. */
  sharedForwards?: boolean;
  /** The uid the session runs under (bubblewrap run by a root sandbox); absent: the sandbox's own. */
  uid?: number;
}

/** The record as written: the messages as their JSON. */
type RecordFile = Omit<SessionRecord, "start" | "request"> & { version: 1; start: JsonValue; request: JsonValue };

function files(internalDir: string): { record: string; log: string; answers: string } {
  return {
    record: path.join(internalDir, "session.json"),
    log: path.join(internalDir, "log.bin"),
    answers: path.join(internalDir, "answers"),
  };
}

/**
 * Writes the record, once per session, before its first message is logged.
 * Straight to its name, with no temporary file renamed into place (one
 * metadata write less per session, issue 24): a record a crash tore does
 * not parse and reads as none, as a record not yet renamed did. Opened
 * without O_TRUNC: in a reused internal folder the file is there, emptied,
 * and ext4 (auto_da_alloc) starts writing back a file truncated to nothing
 * and written again when it is closed, a block allocated and written per
 * session in the main thread where a new file's pages would have waited (and
 * mostly been gone before writeback). A longer leftover is cut to the record.
 */
export function writeSessionRecord(record: SessionRecord): void {
  const file: RecordFile = {
    version: 1,
    // Attachments were copied in at the start; their bytes are not needed again.
    start: toJson(StartSessionSchema, create(StartSessionSchema, { ...record.start, attachments: [] })),
    request: toJson(SessionRequestSchema, record.request),
    command: record.command,
    paths: record.paths,
    keeper: record.keeper,
    ...(record.initPid !== undefined ? { initPid: record.initPid } : {}),
    baseline: record.baseline,
    startTime: record.startTime,
    ...(record.sharedForwards === true ? { sharedForwards: true } : {}),
    ...(record.uid !== undefined ? { uid: record.uid } : {}),
  };
  const target = files(record.paths.internalDir).record;
  const bytes = Buffer.from(JSON.stringify(file));
  const fd = openSync(target, fs.O_WRONLY | fs.O_CREAT, 0o600);
  try {
    for (let at = 0; at < bytes.length;) at += writeSync(fd, bytes, at, bytes.length - at, at);
    if (fstatSync(fd).size > bytes.length) ftruncateSync(fd, bytes.length);
  } finally {
    closeSync(fd);
  }
}

/** The record in `internalDir`, or undefined when there is none (or it is unreadable). */
export function readSessionRecord(internalDir: string): SessionRecord | undefined {
  let file: RecordFile;
  try {
    file = JSON.parse(readFileSync(files(internalDir).record, "utf8")) as RecordFile;
  } catch {
    return undefined;
  }
  if (file.version !== 1) return undefined;
  return {
    start: fromJson(StartSessionSchema, file.start),
    request: fromJson(SessionRequestSchema, file.request),
    command: file.command,
    paths: file.paths,
    keeper: file.keeper,
    ...(file.initPid !== undefined ? { initPid: file.initPid } : {}),
    baseline: file.baseline,
    startTime: file.startTime,
    ...(file.sharedForwards === true ? { sharedForwards: true } : {}),
    ...(Number.isSafeInteger(file.uid) ? { uid: file.uid } : {}),
  };
}

/**
 * The session's log on disk, appended message by message. Every harness event
 * passes here: the file is opened once, not per message. Once closed (the
 * session's folder is about to go) appends are dropped.
 */
export class SessionLogFile {
  readonly #path: string;
  #fd: number | undefined;
  #closed = false;

  constructor(internalDir: string) {
    this.#path = files(internalDir).log;
  }

  /** Appends a message given as its encoding (the log's, shared with the streams), with its size before it. */
  append(encoded: Uint8Array): void {
    if (this.#closed) return;
    this.#fd ??= openSync(this.#path, "a", 0o600);
    const size = new BinaryWriter().uint32(encoded.byteLength).finish();
    writevSync(this.#fd, [size, encoded]);
  }

  close(): void {
    this.#closed = true;
    if (this.#fd !== undefined) closeSync(this.#fd);
    this.#fd = undefined;
  }
}

/** The log's messages in order (a torn last one, from a crash mid-write, is left out). */
export function readLogMessages(internalDir: string): RunSessionResponse[] {
  let data: Uint8Array;
  try {
    data = readFileSync(files(internalDir).log);
  } catch {
    return [];
  }
  const messages: RunSessionResponse[] = [];
  while (data.length > 0) {
    const { size, offset } = sizeDelimitedPeek(data);
    if (size === null || offset === null || offset + size > data.length) break;
    messages.push(fromBinary(RunSessionResponseSchema, data.subarray(offset, offset + size)));
    data = data.subarray(offset + size);
  }
  return messages;
}

/** Records that a request was answered (after the answer went to the harness). */
export function appendAnswered(internalDir: string, kind: "permission" | "tool", id: string): void {
  appendFileSync(files(internalDir).answers, `${JSON.stringify({ kind, id })}\n`, { mode: 0o600 });
}

export function readAnswered(internalDir: string): {
  answeredPermissions: Set<string>;
  answeredToolCalls: Set<string>;
} {
  const answered = { answeredPermissions: new Set<string>(), answeredToolCalls: new Set<string>() };
  let text = "";
  try {
    text = readFileSync(files(internalDir).answers, "utf8");
  } catch {
    return answered;
  }
  for (const line of text.split("\n")) {
    try {
      const { kind, id } = JSON.parse(line) as { kind: string; id: string };
      (kind === "permission" ? answered.answeredPermissions : answered.answeredToolCalls).add(id);
    } catch {
      // A torn last line: that answer may not have been recorded; the orchestrator sends it again.
    }
  }
  return answered;
}
