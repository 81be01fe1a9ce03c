// A job's artifacts: the files its session handed back, stored under the
// data directory (jobs/<id>/artifacts) as they arrive, so a restart or a
// replica taking the job over after them loses none.
import { mkdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { replaceFile } from "../replace-file.js";
import type { SessionArtifact } from "../sessions/session-runner.js";

/** Why a job that broke a rule has no artifacts (ArtifactsStored.error). */
export const ARTIFACTS_WITHHELD =
  "withheld: the session broke a rule (the job's error says which), so what it changed was not all allowed and is not handed out as the job's work; its tool calls are in the job's events";

export interface StoredArtifact {
  name: string;
  path: string;
  sizeBytes: bigint;
  mediaType: string;
}

/**
 * Writes the artifacts under `home`. A name is reduced to its last part, so none lands outside the job's
 * folder; one that names no file there (".", "..", empty) is "artifact", a NUL, which no file name may
 * hold, is U+FFFD, and a name longer than a file system takes is cut: a name from a node must not make the
 * write fail every time it is delivered. Two artifacts that end up with one name (two folders' `notes.md`, a
 * later session's `changes.patch`) are kept apart as `notes (2).md` and so on: each event's path keeps the
 * file it listed. A message delivered again finds its files as they were written, and writes nothing new.
 */
/**
 * The most files a job keeps of one artifacts message. An honest session sends its patch and the few files its
 * result names; a node that sent thousands of empty files of one name made this replica stat and write each (the
 * "(2)", "(3)" … names) for minutes, its event loop held (attacker review). The rest are dropped, and said so.
 */
export const MAX_ARTIFACT_FILES = 1_000;

export function storeArtifacts(home: string, jobId: string, artifacts: SessionArtifact[]): StoredArtifact[] {
  if (artifacts.length === 0) return [];
  const dir = path.join(home, "jobs", jobId, "artifacts");
  mkdirSync(dir, { recursive: true });
  const taken = new Set<string>();
  return artifacts.map((a) => {
    const last = fitFileName(path.basename(a.name).replaceAll("\u0000", "\uFFFD"));
    const name = freeName(dir, last === "" || last === "." || last === ".." ? "artifact" : last, a.content, taken);
    taken.add(name);
    const file = path.join(dir, name);
    // Whole or not at all: a partial file (a full disk) would hold other content when the message comes again,
    // and that delivery would write a "(2)" beside it.
    replaceFile(file, a.content);
    return { name, path: file, sizeBytes: BigInt(a.content.byteLength), mediaType: a.mediaType };
  });
}

/**
 * `name`, or `name (2)`, `name (3)`… (before its extension): the first not taken by another artifact of this
 * message, that is either free or holds `content` already (this artifact, written at an earlier delivery).
 */
function freeName(dir: string, name: string, content: Uint8Array, taken: Set<string>): string {
  const extension = path.extname(name);
  const stem = name.slice(0, name.length - extension.length);
  for (let n = 1; ; n++) {
    const candidate = n === 1 ? name : `${stem} (${n})${extension}`;
    if (taken.has(candidate)) continue;
    const file = path.join(dir, candidate);
    const size = statSync(file, { throwIfNoEntry: false })?.size;
    if (size === undefined) return candidate;
    if (
      size === content.byteLength &&
      Buffer.from(content.buffer, content.byteOffset, content.byteLength).equals(readFileSync(file))
    )
      return candidate;
  }
}

/**
 * Most file systems take names of up to 255 bytes: a name of more than 200 is cut to its first 200 (whole
 * characters), which leaves room for a " (1000)" that keeps it apart from others and for the ".<pid>.tmp" it
 * is written as first (replace-file.ts). Cut only past 240, a name of 240 bytes failed with ENAMETOOLONG once
 * it took a number, at every delivery, and the job never moved on.
 */
const MAX_FILE_NAME_BYTES = 200;

function fitFileName(name: string): string {
  if (Buffer.byteLength(name) <= MAX_FILE_NAME_BYTES) return name;
  let cut = "";
  for (const character of name) {
    if (Buffer.byteLength(cut + character) > MAX_FILE_NAME_BYTES) break;
    cut += character;
  }
  return cut;
}
