// What a session changed: the working directory is committed to a snapshot
// repository outside it before the harness starts (the attachments), and
// diffed against that commit when the session ends. The repository lives in
// the session's internal directory, never inside the sandbox, so a harness
// cannot rewrite the baseline.
import { execFile } from "node:child_process";
import { constants } from "node:fs";
import { lstat, open, readdir, readlink, realpath } from "node:fs/promises";
import path from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { SessionArtifactsSchema } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";

export type SessionArtifactsInit = MessageInitShape<typeof SessionArtifactsSchema>;

interface GitOptions {
  gitDir: string;
  workingDir: string;
}

function git(options: GitOptions, args: string[], maxBuffer: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      "git",
      [
        "-c",
        "safe.directory=*",
        "-c",
        "core.autocrlf=false",
        "-c",
        "core.fileMode=true",
        `--git-dir=${options.gitDir}`,
        `--work-tree=${options.workingDir}`,
        ...args,
      ],
      {
        cwd: options.workingDir,
        maxBuffer,
        // git reads no user or system configuration and no environment of the sandbox's.
        env: {
          PATH: "/usr/local/bin:/usr/bin:/bin",
          HOME: path.dirname(options.gitDir),
          GIT_CONFIG_NOSYSTEM: "1",
          GIT_CONFIG_GLOBAL: "/dev/null",
          GIT_AUTHOR_NAME: "oz0-sandbox",
          GIT_AUTHOR_EMAIL: "sandbox@oz0.invalid",
          GIT_COMMITTER_NAME: "oz0-sandbox",
          GIT_COMMITTER_EMAIL: "sandbox@oz0.invalid",
        },
      },
      (error, stdout, stderr) => {
        if (error !== null) reject(new Error(`git ${args[0] ?? ""} failed: ${(stderr || error.message).trim()}`));
        else resolve(stdout);
      },
    );
  });
}

/** Commits the working directory's initial state. */
export async function snapshotInitialState(options: GitOptions): Promise<void> {
  await git(options, ["init", "-q"], 1 << 20);
  await git(options, ["add", "-A", "-f", "."], 1 << 20);
  await git(options, ["commit", "-q", "--allow-empty", "--no-verify", "-m", "initial state of the session"], 1 << 20);
}

export interface CollectOptions extends GitOptions {
  /** Relative paths the request named. */
  artifactPaths: readonly string[];
  /** Largest patch and total file bytes returned; past it the rest is cut and `error` says so. */
  maxBytes: number;
  /**
   * What the patch is against: `snapshot` (the commit snapshotInitialState
   * made), `empty` (the session started with an empty directory, so no
   * snapshot was needed), or `none` (the snapshot failed: files only).
   */
  baseline: "snapshot" | "empty" | "none";
}

export async function collectArtifacts(options: CollectOptions): Promise<SessionArtifactsInit> {
  const problems: string[] = [];
  let patch = "";
  if (options.baseline === "empty" && (await readdir(options.workingDir)).length === 0) {
    // Nothing was made: no git process at all (most sessions of a load).
  } else if (options.baseline !== "none") {
    try {
      // Against an empty start, a fresh repository's index diffed with no HEAD is the whole tree as added.
      if (options.baseline === "empty") await git(options, ["init", "-q"], 1 << 20);
      await git(options, ["add", "-A", "-f", "."], 1 << 20);
      const against = options.baseline === "snapshot" ? ["HEAD"] : [];
      patch = await git(
        options,
        ["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", ...against],
        options.maxBytes,
      );
    } catch (error) {
      problems.push(
        `the patch could not be made (it may be larger than ${options.maxBytes} bytes): ${(error as Error).message}`,
      );
    }
  } else {
    problems.push("no patch: the initial state could not be recorded (is git installed on the node?)");
  }
  const files: { path: string; content: Uint8Array }[] = [];
  let budget = options.maxBytes;
  const root = await realpath(options.workingDir);
  const addFile = async (relative: string): Promise<void> => {
    const absolute = path.join(root, relative);
    // The harness controls the tree: a symlink (here or in a parent) must not
    // make the sandbox read a node file for it.
    const real = await realpath(absolute);
    if (real !== root && !real.startsWith(`${root}${path.sep}`)) {
      problems.push(`${relative} left out: it leads outside the working directory`);
      return;
    }
    const info = await lstat(absolute);
    if (info.isDirectory()) {
      for (const entry of (await readdir(absolute)).sort()) await addFile(path.join(relative, entry));
      return;
    }
    if (!info.isFile()) return;
    if (info.size > budget) {
      problems.push(`${relative} left out: the artifacts exceed ${options.maxBytes} bytes`);
      return;
    }
    const content = await readFileInside(absolute, root);
    if (content === undefined) {
      problems.push(`${relative} left out: it leads outside the working directory`);
      return;
    }
    budget -= content.length;
    files.push({ path: relative, content });
  };
  for (const relative of options.artifactPaths) {
    try {
      await addFile(relative);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "ENOENT") continue; // a named file the harness did not make
      problems.push(`${relative}: ${(error as Error).message}`);
    }
  }
  return { patch, files, error: problems.join("; ") };
}

/**
 * Reads a regular file of the working directory as it is when opened: a
 * process of the session still running (one sharing the directory) could
 * swap it, or a directory above it, for a link between the checks above and
 * the read. The last step is never followed (O_NOFOLLOW), a FIFO never
 * blocks (O_NONBLOCK), and the file opened must still be inside `root`, as
 * the kernel names it. Undefined when it is not.
 */
async function readFileInside(absolute: string, root: string): Promise<Buffer | undefined> {
  const handle = await open(absolute, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    if (!(await handle.stat()).isFile()) return undefined;
    let opened: string | undefined;
    try {
      opened = await readlink(`/proc/self/fd/${handle.fd}`);
    } catch {
      opened = undefined; // no /proc (not Linux): the realpath check above stands alone
    }
    if (opened !== undefined && opened !== root && !opened.startsWith(`${root}${path.sep}`)) return undefined;
    return await handle.readFile();
  } finally {
    await handle.close();
  }
}
