// What a session changed: the working directory is committed to a snapshot
// repository outside it before the harness starts (the attachments), and
// diffed against that commit when the session ends. The repository lives in
// the session's internal directory, never inside the sandbox, so a harness
// cannot rewrite the baseline.
//
// git runs here, in the sandbox's process and outside any isolation, over a
// tree the harness made. So it never reads a nested repository (a folder with
// a `.git` of its own): recording one as a gitlink means resolving its refs,
// which the harness controls, and a ref that is a link to a node file, or a
// `.git` file naming another repository, would copy 40 characters of it into
// the patch; a FIFO would hang git. Nested repositories are listed first and
// left out, and every git call has a time limit.
import { execFile, spawn } from "node:child_process";
import { constants } from "node:fs";
import { lstat, open, readdir, readlink, realpath } from "node:fs/promises";
import path from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { SessionArtifactsSchema } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";

export type SessionArtifactsInit = MessageInitShape<typeof SessionArtifactsSchema>;

interface GitOptions {
  gitDir: string;
  workingDir: string;
  /** Longest any one git call may take before it is killed and the patch given up (default 5 minutes). */
  gitTimeoutMs?: number;
  /** Kills the git call under way, and the patch is given up (the disk guard's: the copy is filling the disk). */
  signal?: AbortSignal | undefined;
}

const DEFAULT_GIT_TIMEOUT_MS = 5 * 60_000;

/** How git runs: no user or system configuration, no environment of the sandbox's. */
function gitInvocation(options: GitOptions, args: readonly string[]): { args: string[]; env: NodeJS.ProcessEnv } {
  return {
    args: [
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
  };
}

function timedOut(options: GitOptions, args: readonly string[]): Error {
  const seconds = Math.round((options.gitTimeoutMs ?? DEFAULT_GIT_TIMEOUT_MS) / 1000);
  return new Error(
    `git ${args[0] ?? ""} took longer than ${seconds} s and was stopped (a FIFO or a very large tree in the working directory?)`,
  );
}

function git(options: GitOptions, args: string[], maxBuffer: number, input?: string): Promise<string> {
  const invocation = gitInvocation(options, args);
  return new Promise((resolve, reject) => {
    const child = execFile(
      "git",
      invocation.args,
      {
        cwd: options.workingDir,
        maxBuffer,
        env: invocation.env,
        timeout: options.gitTimeoutMs ?? DEFAULT_GIT_TIMEOUT_MS,
        killSignal: "SIGKILL",
        signal: options.signal,
      },
      (error, stdout, stderr) => {
        if (error === null) resolve(stdout);
        else if (error.killed && error.signal === "SIGKILL") reject(timedOut(options, args));
        else reject(new Error(`git ${args[0] ?? ""} failed: ${(stderr || error.message).trim()}`));
      },
    );
    // git may exit before it reads (or without reading) its stdin: the pipe's EPIPE is no error of
    // ours, and unheard it would end the sandbox. What git did is in the callback above.
    child.stdin?.on("error", () => undefined);
    child.stdin?.end(input ?? "");
  });
}

/**
 * The nested repositories of the working directory, as `git ls-files
 * --others` names them (`sub/`, `a/b/`): git lists every untracked file but
 * stops at a folder it takes for a repository of its own. Read as a stream:
 * a tree of many untracked files is never held whole.
 */
function nestedRepositories(options: GitOptions): Promise<string[]> {
  const args = ["ls-files", "-z", "--others"];
  const invocation = gitInvocation(options, args);
  return new Promise((resolve, reject) => {
    const child = spawn("git", invocation.args, {
      cwd: options.workingDir,
      env: invocation.env,
      stdio: ["ignore", "pipe", "pipe"],
      timeout: options.gitTimeoutMs ?? DEFAULT_GIT_TIMEOUT_MS,
      killSignal: "SIGKILL",
      signal: options.signal,
    });
    const found: string[] = [];
    let partial = "";
    let stderr = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => {
      const entries = (partial + chunk).split("\0");
      partial = entries.pop() ?? "";
      for (const entry of entries) if (entry.endsWith("/")) found.push(entry);
    });
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk: string) => {
      if (stderr.length < 4096) stderr += chunk;
    });
    child.on("error", reject);
    child.on("close", (code, signal) => {
      if (signal === "SIGKILL") reject(timedOut(options, args));
      else if (code !== 0) reject(new Error(`git ls-files failed: ${stderr.trim() || `exit ${code}`}`));
      else resolve(found);
    });
  });
}

/**
 * Stages the whole working directory but its nested repositories, and returns
 * those. The pathspecs go in on stdin, so a tree with many nested
 * repositories never meets the command line's length limit.
 */
async function stageAllButNestedRepositories(options: GitOptions): Promise<string[]> {
  const nested = await nestedRepositories(options);
  const pathspecs = [".", ...nested.map((folder) => `:(exclude,literal)${folder}`)];
  await git(
    options,
    ["add", "-A", "-f", "--pathspec-from-file=-", "--pathspec-file-nul"],
    1 << 20,
    pathspecs.join("\0"),
  );
  return nested;
}

/** What to tell the job of nested repositories left out (at most ten named). */
function nestedRepositoriesLeftOut(nested: readonly string[]): string | undefined {
  if (nested.length === 0) return undefined;
  const named = nested.slice(0, 10).join(", ");
  const more = nested.length > 10 ? ` and ${nested.length - 10} more` : "";
  return `${named}${more} left out of the patch: a folder with a .git of its own is a separate repository, which the sandbox does not read`;
}

/** Commits the working directory's initial state (nested repositories left out, as in the patch). */
export async function snapshotInitialState(options: GitOptions): Promise<void> {
  await git(options, ["init", "-q"], 1 << 20);
  await stageAllButNestedRepositories(options);
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
      const leftOut = nestedRepositoriesLeftOut(await stageAllButNestedRepositories(options));
      if (leftOut !== undefined) problems.push(leftOut);
      const against = options.baseline === "snapshot" ? ["HEAD"] : [];
      // --ignore-submodules=all: a repository nested after the listing above
      // (a process still running in a shared directory) is staged as a
      // gitlink, but its commit never reaches the patch.
      patch = await git(
        options,
        ["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--ignore-submodules=all", ...against],
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
  // Most sessions name no files: no real path to resolve then (a thread-pool round trip and a readlink per component).
  if (options.artifactPaths.length === 0) return { patch, files, error: problems.join("; ") };
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
