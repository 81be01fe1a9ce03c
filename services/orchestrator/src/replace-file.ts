// A file other processes read while this one rewrites it (the dev stack's
// record and ports, the console's sessions) is replaced whole: written beside
// it, then renamed over it, so a reader sees the old text or the new one and
// never a truncated file. (writeFileSync truncates first, and a reader in
// between parsed an empty or half-written JSON.)
// A write that fails (a full disk) leaves the old file as it was, and no
// partial one beside it.
import { renameSync, rmSync, writeFileSync } from "node:fs";

export function replaceFile(file: string, content: string | Uint8Array, options: { mode?: number } = {}): void {
  const temporary = `${file}.${process.pid}.tmp`;
  try {
    writeFileSync(temporary, content, options.mode === undefined ? {} : { mode: options.mode });
    renameSync(temporary, file);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw error;
  }
}
