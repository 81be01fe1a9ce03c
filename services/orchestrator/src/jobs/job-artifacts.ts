// A job's artifacts: the files its session handed back, stored under the
// data directory (jobs/<id>/artifacts) as they arrive, so a restart or a
// replica taking the job over after them loses none.
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { SessionArtifact } from "../sessions/session-runner.js";

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
 * write fail every time it is delivered.
 */
export function storeArtifacts(home: string, jobId: string, artifacts: SessionArtifact[]): StoredArtifact[] {
  if (artifacts.length === 0) return [];
  const dir = path.join(home, "jobs", jobId, "artifacts");
  mkdirSync(dir, { recursive: true });
  return artifacts.map((a) => {
    const last = fitFileName(path.basename(a.name).replaceAll("\u0000", "\uFFFD"));
    const name = last === "" || last === "." || last === ".." ? "artifact" : last;
    const file = path.join(dir, name);
    writeFileSync(file, a.content);
    return { name, path: file, sizeBytes: BigInt(a.content.byteLength), mediaType: a.mediaType };
  });
}

/** Most file systems take names of up to 255 bytes; a longer one is cut to its first 200 (whole characters). */
const MAX_FILE_NAME_BYTES = 200;

function fitFileName(name: string): string {
  if (Buffer.byteLength(name) <= 255) return name;
  let cut = "";
  for (const character of name) {
    if (Buffer.byteLength(cut + character) > MAX_FILE_NAME_BYTES) break;
    cut += character;
  }
  return cut;
}
