// The temporary folder of one test run. The runner gives the tests, and the
// Kafka and PostgreSQL it starts for them, a folder of the run's own as
// TMPDIR (what os.tmpdir() returns), so nothing a test forgets can hide in
// the machine's /tmp among other people's files: when the run ends, whatever
// is left in it fails the run, by name and with the files that use that name,
// and the folder is removed either way.
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";

/** Caches the runner's own tools write there, not a test's: tsx's transforms, Node's compile cache (tsc). */
const TOOL_CACHES = [/^tsx-\d+$/, /^node-compile-cache$/];

/** A new folder for the run, in the TMPDIR the runner was given. */
export function openRunTmpdir() {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-run-"));
  // Open like /tmp itself: PostgreSQL (as nobody, under root) and sessions under uids of their own reach their folders in it.
  chmodSync(dir, 0o1777);
  return dir;
}

/** Removes the run's folder and returns what the tests left in it, tool caches aside. */
export function closeRunTmpdir(dir) {
  let left = [];
  try {
    left = readdirSync(dir).filter((name) => !TOOL_CACHES.some((cache) => cache.test(name)));
  } catch {
    // already gone
  }
  rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  return left.sort();
}

/**
 * The failure's text: each entry left, with the files whose text names it
 * (paths from `root`): the packages' `src`, `test` and `bin`, and their
 * READMEs, whose code tests run. `mkdtemp` names end in six random
 * characters; a name built from an id is looked up by ever shorter prefixes.
 */
export function describeLeftovers(left, { root, packageDirs }) {
  const files = packageDirs.flatMap((dir) => [
    ...["src", "test", "bin"].flatMap((sub) => sourceFiles(path.join(dir, sub))),
    ...readmeOf(dir),
  ]);
  const texts = new Map(files.map((file) => [path.relative(root, file), readFileSync(file, "utf8")]));
  const lines = left.map((name) => {
    const makers = whoNames(name, texts);
    return `  ${name}${makers.length > 0 ? `   (named in ${makers.join(", ")})` : ""}`;
  });
  return [
    `the tests left ${left.length} ${left.length === 1 ? "entry" : "entries"} in the run's temporary folder (TMPDIR):`,
    ...lines,
    "A test removes what it creates, even when it fails: t.after() or try/finally, and close() every service it starts.",
  ].join("\n");
}

function whoNames(name, texts) {
  let stem = name.replace(/[A-Za-z0-9]{6}$/, "");
  while (stem.length >= 6) {
    const found = [...texts].filter(([, text]) => text.includes(stem)).map(([file]) => file);
    if (found.length > 0) return found;
    const shorter = stem.replace(/[^-_.]*[-_.]?$/, "");
    if (shorter.length >= stem.length) break;
    stem = shorter;
  }
  return [];
}

function readmeOf(dir) {
  const readme = path.join(dir, "README.md");
  return existsSync(readme) ? [readme] : [];
}

function sourceFiles(dir) {
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  return entries.flatMap((e) => {
    if (e.name === "node_modules" || e.name === "dist") return [];
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(p);
    return /\.(ts|mts|mjs|js|py)$/.test(e.name) ? [p] : [];
  });
}
