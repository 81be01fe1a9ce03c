// Where a session's files live on the node, and their life: created empty
// per session, attachments copied in, removed once the artifacts are out.
//
//   <root>/sessions/<id>/work    the working directory (unless the request names one)
//   <root>/sessions/<id>/state   the private state directory (idem)
//   <root>/internal/<id>/        the sandbox's own files for the session (the
//                                artifact snapshot, the LLM sockets); never
//                                visible inside bubblewrap
//
// The root, `sessions/` and every directory made on the way to a session's
// own are 0711: a session running under a uid of its own (the `user`
// isolation mode) passes through them to its directories but cannot list
// which other sessions there are; `internal/` is root's alone (0700).
import { randomUUID } from "node:crypto";
import { chmod, cp, lstat, mkdir, readdir, realpath, rmdir, unlink, writeFile } from "node:fs/promises";
import {
  closeSync,
  constants as fs,
  existsSync,
  lstatSync,
  mkdirSync,
  open as openCallback,
  readdirSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  type Dirent,
} from "node:fs";
import path from "node:path";
import type { Attachment } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { spreadSubfolders } from "./directory-spread.js";
import { invalidField, SandboxError } from "./sandbox-errors.js";
import { handOver, handOverMade, removeAsUser } from "./session-user-files.js";
import { removeSessionTree } from "./tree-removal.js";
import type { SessionUser } from "./session-user-processes.js";

const SESSION_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
/** The LLM forwarder's sockets, in the session's internal folder (bound into bubblewrap as /run/oz0). */
const SOCKET_DIR = "run";

export interface SessionPaths {
  sessionDir: string;
  workingDir: string;
  stateDir: string;
  internalDir: string;
  /** The snapshot repository the artifact patch is computed against. */
  gitDir: string;
  /** Unix sockets of the LLM forwarder (bound into bubblewrap as /run/oz0). */
  socketDir: string;
  /** What createSessionDirectories made, so a failed start never removes another session's directory. */
  created: string[];
  /** The working directory belongs to another live session (start.share_working_dir_of): never created, snapshotted or removed here. */
  sharesWorkingDir: boolean;
}

export function validateSessionId(sessionId: string, field: string): void {
  if (!SESSION_ID.test(sessionId)) {
    throw invalidField(field, "use 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit");
  }
}

/**
 * The sandbox's own folders under the root, which no session may ask for as
 * its working or state directory: `internal/` (each session's keeper files,
 * log and record), `recycled/` (emptied internal folders waiting for a
 * later session, InternalDirectoryPool) and `forward/` (the LLM origins'
 * sockets every session using them shares, llm-forwarder.ts).
 */
export const SANDBOX_OWN_DIRS = ["internal", "recycled", "forward"] as const;
/** Where the node's shared LLM sockets live, under the root. */
export const FORWARD_DIR: (typeof SANDBOX_OWN_DIRS)[number] = "forward";
/** Where InternalDirectoryPool keeps its spares, under the root. */
export const RECYCLED_DIR: (typeof SANDBOX_OWN_DIRS)[number] = "recycled";

/** Resolves and checks where the session's directories go; creates nothing. */
export function resolveSessionPaths(options: {
  root: string;
  sessionId: string;
  workingDir: string;
  stateDir: string;
  /** Another live session's working directory, to run in instead of a new one. */
  sharedWorkingDir?: string;
}): SessionPaths {
  const root = realpathSync.native(options.root);
  const sessionDir = path.join(root, "sessions", options.sessionId);
  const internalDir = path.join(root, "internal", options.sessionId);
  const chosen = (requested: string, fallback: string, field: string): string => {
    if (requested === "") return fallback;
    if (!path.isAbsolute(requested))
      throw invalidField(
        field,
        "must be an absolute path inside the node's sandbox root, or empty to let the sandbox choose",
      );
    const resolved = path.resolve(requested);
    if (!isInside(root, realAncestor(resolved)) || !isInside(root, resolved) || resolved === root) {
      throw invalidField(
        field,
        "is outside the node's sandbox root (OZ0_SANDBOX_ROOT); leave it empty to let the sandbox choose",
      );
    }
    // The sandbox's own folders: a requested directory there could be swapped for (or emptied as) another session's.
    for (const own of SANDBOX_OWN_DIRS) {
      if (isInside(path.join(root, own), resolved))
        throw invalidField(
          field,
          `is inside the sandbox's own directory ${own}/; leave it empty to let the sandbox choose`,
        );
    }
    if (existsSync(resolved))
      throw invalidField(field, "already exists; a session starts with an empty directory of its own");
    return resolved;
  };
  const workingDir =
    options.sharedWorkingDir ?? chosen(options.workingDir, path.join(sessionDir, "work"), "start.request.working_dir");
  const stateDir = chosen(options.stateDir, path.join(sessionDir, "state"), "start.request.state_dir");
  if (isInside(workingDir, stateDir) || isInside(stateDir, workingDir)) {
    throw invalidField("start.request.state_dir", "must not overlap the working directory");
  }
  if (existsSync(sessionDir) || existsSync(internalDir)) {
    throw new SandboxError(
      "already_exists",
      `a session ${options.sessionId} already has directories on this node; use another session id`,
    );
  }
  return {
    sessionDir,
    workingDir,
    stateDir,
    internalDir,
    gitDir: path.join(internalDir, "snapshot.git"),
    socketDir: path.join(internalDir, SOCKET_DIR),
    created: [],
    sharesWorkingDir: options.sharedWorkingDir !== undefined,
  };
}

/** Checks attachment paths and sources before anything is created. */
export function validateAttachments(attachments: readonly Attachment[]): void {
  attachments.forEach((attachment, index) => {
    const field = `start.attachments[${index}]`;
    relativeInside(attachment.path, `${field}.path`);
    if (attachment.source.case === undefined) throw invalidField(`${field}.source`, "set content or node_path");
    if (attachment.source.case === "nodePath" && !path.isAbsolute(attachment.source.value)) {
      throw invalidField(`${field}.node_path`, "must be an absolute path on the node");
    }
  });
}

/** A path relative to the working directory that stays inside it; returns it normalized. */
export function relativeInside(relative: string, field: string): string {
  if (relative === "") throw invalidField(field, "is empty; give a path relative to the working directory");
  if (path.isAbsolute(relative)) throw invalidField(field, "must be relative to the working directory");
  const normalized = path.normalize(relative);
  if (normalized === ".." || normalized.startsWith(`..${path.sep}`))
    throw invalidField(field, "leaves the working directory");
  return normalized;
}

/**
 * Makes the session's directories; the state directory's subdirectories at
 * once. In the thread pool, not the main thread: on a disk that discards
 * freed blocks, or an allocator that scans, one mkdir can take a
 * millisecond, which would stall every session's stream.
 */
export async function createSessionDirectories(
  paths: SessionPaths,
  stateSubdirectories: readonly string[],
  options: { internalDirs?: InternalDirectoryPool | undefined } = {},
): Promise<void> {
  // The last step of each is not recursive: if another start raced us to the
  // same directory, this one fails instead of sharing it.
  const parentsMade = new Set<string>();
  const exclusive = async (dir: string, mode: number): Promise<void> => {
    // The working and state directories' parent (sessions/<id>) is made once, not asked for again.
    if (!parentsMade.has(path.dirname(dir))) await makePassableParents(dir);
    parentsMade.add(path.dirname(dir));
    try {
      await mkdir(dir, { mode });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EEXIST") {
        throw new SandboxError(
          "already_exists",
          `${dir === paths.internalDir ? "the session's directories" : "the requested directory"} already exist; start with another session id or directory`,
        );
      }
      throw error;
    }
    paths.created.push(dir);
  };
  // A reused internal folder keeps its emptied socket folder (InternalDirectoryPool.give).
  let socketDir: string[] = [paths.socketDir];
  if (options.internalDirs?.take(paths.internalDir) === true) {
    paths.created.push(paths.internalDir);
    if (existsSync(paths.socketDir)) socketDir = [];
  } else await exclusive(paths.internalDir, 0o700);
  if (!paths.sharesWorkingDir) await exclusive(paths.workingDir, 0o755);
  await exclusive(paths.stateDir, 0o700);
  await Promise.all([...stateSubdirectories, ...socketDir].map((dir) => mkdir(dir, { recursive: true, mode: 0o700 })));
}

/**
 * Copies the attachments into the working directory, as the sandbox (outside
 * any isolation). A `node_path` is a file of this node, so one that leads
 * (its links resolved) into `neverFrom`, or holds one of them, is refused:
 * the sessions' directories, the suite's data and the hidden paths are not
 * the orchestrator's to hand to an agent, whoever asked it to.
 */
export async function copyAttachments(
  workingDir: string,
  attachments: readonly Attachment[],
  neverFrom: readonly string[],
): Promise<void> {
  // Resolved only for node paths to check: most sessions attach nothing, and each realpath is a thread-pool round trip.
  const guarded = attachments.some((attachment) => attachment.source.case === "nodePath")
    ? await Promise.all(neverFrom.map((p) => realpath(p).catch(() => path.resolve(p))))
    : [];
  for (const [index, attachment] of attachments.entries()) {
    const target = path.join(workingDir, path.normalize(attachment.path));
    await mkdir(path.dirname(target), { recursive: true });
    if (attachment.source.case === "content") {
      await writeFile(target, attachment.source.value);
    } else if (attachment.source.case === "nodePath") {
      const source = attachment.source.value;
      try {
        await lstat(source);
      } catch {
        throw invalidField(`start.attachments[${index}].node_path`, "does not exist on this node");
      }
      // A dangling link is copied as the link it is: nothing is read through it.
      const real = await realpath(source).catch(() => undefined);
      const guard = real === undefined ? undefined : guarded.find((g) => isInside(g, real) || isInside(real, g));
      if (guard !== undefined)
        throw invalidField(
          `start.attachments[${index}].node_path`,
          `leads into or holds ${guard}, which the sandbox never hands to a session (its sessions, the suite's data, the hidden paths); attach files from elsewhere`,
        );
      await cp(source, target, { recursive: true, dereference: false, errorOnExist: false });
    }
  }
}

/**
 * The parents of `dir` that do not exist yet, made 0711 whatever the umask:
 * passable for a session's uid, not listable.
 */
async function makePassableParents(dir: string): Promise<void> {
  const parent = path.dirname(dir);
  const first = await mkdir(parent, { recursive: true, mode: 0o711 });
  if (first === undefined) return;
  for (let made = parent; ; made = path.dirname(made)) {
    await chmod(made, 0o711);
    if (made === first || made === path.dirname(made)) break;
  }
}

/**
 * Gives the session's own directories (not a shared working directory) to its uid, after the attachments were copied
 * in. The state directory holds only the subdirectories createSessionDirectories made in it, and the working directory
 * nothing when no attachment was copied: those are handed over by name; a working directory with attachments is walked.
 */
export async function handOverSessionDirectories(
  paths: SessionPaths,
  user: SessionUser,
  made: { stateSubdirectories: readonly string[]; emptyWorkingDir: boolean },
): Promise<void> {
  if (!paths.sharesWorkingDir) {
    if (made.emptyWorkingDir) handOverMade(paths.workingDir, [], user);
    else await handOver(paths.workingDir, user);
  }
  handOverMade(paths.stateDir, made.stateSubdirectories, user);
}

/**
 * Removes everything the session had on disk; what its uid owns (the `user`
 * mode) is removed as that uid. Throws when something is left, after trying
 * everything; the caller logs it.
 */
export async function removeSessionDirectories(
  paths: SessionPaths,
  options: {
    user?: SessionUser;
    internalDirs?: InternalDirectoryPool | undefined;
    /**
     * The session could not write its socket folder (read-only inside bubblewrap, bubblewrap-launcher.ts) and never held the
     * keeper's output files (session-keeper.ts): a reused internal folder keeps them, emptied.
     */
    sealed?: boolean;
    /** The state directory's subdirectories it was made with: removed first, by name, so the state directory goes with one rmdir. */
    stateSubdirectories?: readonly string[];
  } = {},
): Promise<void> {
  const { user, internalDirs } = options;
  const problems: unknown[] = [];
  const ownedByUser = user === undefined ? [] : paths.created.filter((dir) => dir !== paths.internalDir);
  const budget = { entries: REMOVAL_ENTRIES };
  for (const dir of paths.created) {
    if (ownedByUser.includes(dir)) continue;
    if (dir === paths.internalDir && (await internalDirs?.give(dir, { sealed: options.sealed === true })) === true)
      continue;
    // Usually all empty at the end: an rmdir each, where the state directory's failed rmdir and readdir took two round trips more.
    if (dir === paths.stateDir && options.stateSubdirectories !== undefined)
      await Promise.all(options.stateSubdirectories.map((sub) => rmdir(sub).catch(() => undefined)));
    if (await removeDirectory(dir, budget)) continue;
    await removeSessionTree(dir).catch((error: unknown) => problems.push(error));
  }
  if (user !== undefined) await removeAsUser(ownedByUser, user).catch((error: unknown) => problems.push(error));
  // The default parent of work/ and state/, once empty; rmdir leaves it if a requested directory sits in it.
  await rmdir(paths.sessionDir).catch(() => undefined);
  if (problems.length > 0) throw problems[0];
}

/**
 * How many entries a session's removal walks itself. A session's own tree is
 * a dozen directories and the keeper's files, and the harness's work is
 * usually small: removed by the types readdir gives, an unlink or rmdir per
 * entry, all of a directory's at once, where rm -r's walk costs an lstat
 * and an rmdir attempt more per entry, one after the other (issue 24). A
 * larger tree (a checkout, a node_modules) goes to rm -r, which walks it
 * without a promise per entry pending at once.
 */
const REMOVAL_ENTRIES = 256;

/**
 * Removes `dir` and everything in it, by the entry types readdir gives (a
 * symlink is unlinked, never followed); true when it is gone. False, having
 * removed part of it, when the tree has more entries than the budget left or
 * an entry cannot be removed this way: rm -r then finishes it and reports
 * what it cannot remove.
 */
async function removeSmallTree(dir: string, budget: { entries: number }): Promise<boolean> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ENOENT";
  }
  try {
    if (!(await removeEntries(dir, entries, budget))) return false;
    await rmdir(dir);
    return true;
  } catch {
    return false;
  }
}

/**
 * {@link removeSmallTree}, trying rmdir first: most of a session's folders
 * (the state directory's seven, often the working directory) are empty at
 * its end, and go with one call instead of a readdir and an rmdir.
 */
async function removeDirectory(dir: string, budget: { entries: number }): Promise<boolean> {
  try {
    await rmdir(dir);
    return true;
  } catch {
    // Not empty (or not removable so): walked.
  }
  return removeSmallTree(dir, budget);
}

/** Removes `entries` of `dir`, all at once, by their types (a link is unlinked, never followed); false past the budget. */
async function removeEntries(dir: string, entries: Dirent[], budget: { entries: number }): Promise<boolean> {
  budget.entries -= entries.length;
  if (budget.entries < 0) return false;
  const removed = await Promise.all(
    entries.map((entry) => {
      const child = path.join(dir, entry.name);
      return entry.isDirectory() ? removeDirectory(child, budget) : unlink(child).then(() => true);
    }),
  );
  return !removed.includes(false);
}

/**
 * Truncates a file of the sandbox's own to nothing: one left empty (often
 * stderr, the answers) needs no call at all, another an open with O_TRUNC in
 * the thread pool (it frees the file's blocks, which on a disk mounted with
 * `discard` waits for the device) and a close in the main thread, one
 * thread-pool round trip where a FileHandle's close was a second and
 * truncate() takes three (an open, an ftruncate, a close).
 */
async function emptyFile(file: string): Promise<void> {
  if (lstatSync(file).size === 0) return;
  const fd = await new Promise<number>((resolve, reject) =>
    openCallback(file, fs.O_WRONLY | fs.O_TRUNC | fs.O_NOFOLLOW, (error, opened) =>
      error === null ? resolve(opened) : reject(error),
    ),
  );
  closeSync(fd);
}

/** Removes what `dir` holds, keeping `dir`; false when something could not be removed this way. */
async function emptyDirectory(dir: string): Promise<boolean> {
  return removeEntries(dir, readdirSync(dir, { withFileTypes: true }), { entries: REMOVAL_ENTRIES });
}

/**
 * The sandbox's own files in a kept session's internal directory that the
 * next session there writes again: emptied, not removed.
 */
const REUSED_FILES = new Set(["exit.tmp", "session.json", "log.bin", "answers"]);
/**
 * The keeper's output files, emptied and reused too when the session was
 * sealed from them: its keeper copied the harness's stdout and stderr into
 * them from pipes, and bwrap writes fd3 (its --info-fd) outside the sandbox,
 * so the harness never held one (a harness holding one could change its mode
 * or set an extended attribute through its descriptor, which emptying keeps,
 * for a later session, another job's, to read back from its own). Otherwise
 * (a session a previous run started, whose keeper may have handed the harness
 * the files themselves) they are removed and made anew. The keeper's stdin
 * FIFO, which it relays to the harness through a pipe, is kept as it is in a
 * sealed folder: nobody holds it open once the keeper wrote `exit` and the
 * sandbox closed its end (KeptChild.exited), and a FIFO's data goes with its
 * last open descriptor.
 */
const SEALED_KEEPER_FILES = new Set(["stdout", "stderr", "fd3"]);

/**
 * Internal directories of ended sessions, emptied and kept for the next
 * sessions (under bubblewrap, with keepers). On this machine's ext4 most of
 * the sandbox's system time per session went to making inodes (the
 * allocator steps over every inode freed in the last seconds, so churn makes
 * each new one dearer) and freeing them: a session's internal directory and
 * the six files the keeper and the sandbox write there are made once and
 * reused instead (issue 24). The keeper's files are truncated, its `exit`
 * renamed back to the `exit.tmp` it writes first; anything else is removed.
 * The folder is never visible inside bubblewrap, and only a directory whose
 * keeper wrote `exit` is taken: bwrap was reaped then, and with its PID
 * namespace gone nothing still holds the files. Spares live in `dir`,
 * emptied at start, as a restart finds them.
 */
export class InternalDirectoryPool {
  readonly #dir: string;
  readonly #max: number;
  readonly #spares: string[] = [];
  /** give() calls between their check of the count and their spare's rename. */
  #giving = 0;

  constructor(options: { dir: string; max: number }) {
    this.#dir = options.dir;
    let usable = true;
    try {
      rmSync(this.#dir, { recursive: true, force: true, maxRetries: 2 });
      mkdirSync(this.#dir, { recursive: true, mode: 0o700 });
    } catch {
      // No folder for spares: every session makes and removes its own, as without the pool.
      usable = false;
    }
    this.#max = usable ? options.max : 0;
  }

  /**
   * Moves a spare to `target` (which must not exist); false when there is
   * none. In the main thread, unlike the rest of a session's directories: one
   * rename, where making the folder and its files would be eight inodes.
   */
  take(target: string): boolean {
    const spare = this.#spares.pop();
    if (spare === undefined) return false;
    // rename(2) would replace an empty directory: a start racing this one to the same path fails instead.
    if (existsSync(target)) {
      this.#spares.push(spare);
      return false;
    }
    try {
      renameSync(spare, target);
      return true;
    } catch {
      rmSync(spare, { recursive: true, force: true });
      return false;
    }
  }

  /**
   * Empties an ended session's internal directory and keeps it; false (the
   * caller removes it) when it cannot be reused. With `sealed` (a session
   * this run started under bubblewrap) its socket folder `run/` (read-only
   * inside, so nothing but the sandbox wrote there) is emptied and kept too,
   * and so are the keeper's output files and stdin FIFO (SEALED_KEEPER_FILES):
   * five inodes fewer made and freed per session.
   */
  async give(internalDir: string, options: { sealed?: boolean } = {}): Promise<boolean> {
    // A place is held from here, so sessions ending together never keep more than `max`.
    if (this.#spares.length + this.#giving >= this.#max || !existsSync(path.join(internalDir, "exit"))) return false;
    this.#giving += 1;
    try {
      // The folder is the sandbox's own and holds a dozen names: listed, renamed and closed in the main thread, each a
      // few microseconds where a thread-pool round trip costs the sandbox tens (issue 24). What frees blocks (a
      // truncation, a removal) stays in the pool.
      const emptied = await Promise.all(
        readdirSync(internalDir, { withFileTypes: true }).map(async (entry) => {
          const file = path.join(internalDir, entry.name);
          if (entry.isFile() && entry.name === "exit") renameSync(file, path.join(internalDir, "exit.tmp"));
          else if (entry.isFile() && REUSED_FILES.has(entry.name)) await emptyFile(file);
          else if (entry.isFile() && SEALED_KEEPER_FILES.has(entry.name) && options.sealed === true)
            await emptyFile(file);
          else if (entry.isFIFO() && entry.name === "stdin" && options.sealed === true) return true;
          else if (!entry.isDirectory()) await unlink(file);
          else if (entry.name === SOCKET_DIR && options.sealed === true) return emptyDirectory(file);
          else return removeSmallTree(file, { entries: REMOVAL_ENTRIES });
          return true;
        }),
      );
      if (emptied.includes(false)) return false;
      // A name nobody can predict: rename(2) would replace an empty directory made there.
      const spare = path.join(this.#dir, randomUUID());
      renameSync(internalDir, spare);
      this.#spares.push(spare);
      return true;
    } catch {
      return false;
    } finally {
      this.#giving -= 1;
    }
  }
}

/**
 * Creates the node root and its `sessions/` and `internal/` if needed, with
 * their modes, and returns the root's real path.
 */
export async function prepareRoot(root: string): Promise<string> {
  await mkdir(root, { recursive: true, mode: 0o711 });
  assertOwnFolder(root, root, { link: true });
  assertSafeWay(root);
  // A root root owns keeps its mode where the sandbox is not root: whether sessions' uids can pass it is then found out by trying (session-user-detection).
  await chmod(root, 0o711).catch((error: NodeJS.ErrnoException) => {
    if (error.code !== "EPERM") throw error;
  });
  for (const [name, mode] of [
    ["sessions", 0o711],
    ["internal", 0o700],
  ] as const) {
    const dir = path.join(root, name);
    await mkdir(dir, { recursive: true, mode });
    assertOwnFolder(dir, root, { link: false });
    await chmod(dir, mode);
  }
  // Each session's folders, made and removed a second later, spread over the disk's inode groups (directory-spread.ts).
  spreadSubfolders([path.join(root, "sessions"), path.join(root, "internal")]);
  return realpath(root);
}

/** The refusals' advice where the root is not the operator's to set: `oz0 dev` and `npm start` put it in their home. */
const LOCAL_STACK_ROOT =
  " (under oz0 dev or npm start, whose sandbox root is $OZ0_HOME/sandbox: set OZ0_HOME to a folder of yours)";

/**
 * Refuses a folder of the root that a user other than the sandbox's own and root owns where another user could have
 * put it (in a folder every user may write, or one of theirs), or (`link` false) a link. The default root,
 * <tmpdir>/oz0-sandbox, is anybody's to make before the sandbox first starts (a local user, a `user`-mode session of
 * another sandbox on the host): in a root of theirs they could swap internal/ or sessions/ for a link to a node
 * folder, which the sandbox, as root, emptied at its start as a previous run's leftovers, and made 0700 (attacker
 * review). The root itself may be a link, on the same terms. A root of another uid in a folder only root or this user
 * may write is someone's choice: a volume whose owner a pod's user namespace shows as another uid (an emptyDir under
 * `hostUsers: false` may show as the overflow uid, 65534).
 */
function assertOwnFolder(dir: string, root: string, options: { link: boolean }): void {
  const own = process.geteuid?.();
  if (own === undefined) return;
  const strangers = (uid: number): boolean => uid !== own && uid !== 0;
  const openToOthers = (folder: string): boolean => {
    const stat = statSync(folder);
    return (stat.mode & 0o002) !== 0 || strangers(stat.uid);
  };
  const entry = lstatSync(dir);
  const target = statSync(dir);
  const squatted = (
    [
      [entry, path.dirname(dir)],
      [target, path.dirname(realpathSync.native(dir))],
    ] as const
  ).find(([stat, parent]) => strangers(stat.uid) && openToOthers(parent));
  const problem = !target.isDirectory()
    ? "is not a directory"
    : entry.isSymbolicLink() && !options.link
      ? "is a link"
      : squatted !== undefined
        ? `belongs to uid ${squatted[0].uid}, neither this sandbox's (${own}) nor root's, in ${squatted[1]}, which other users may write`
        : undefined;
  if (problem === undefined) return;
  throw new SandboxError(
    "failed_precondition",
    `the sandbox root ${root} is unsafe: ${dir} ${problem}, so another user could lead what the sandbox makes and removes there to a node folder; remove it, or set OZ0_SANDBOX_ROOT to a folder of this user's or root's (such as /var/lib/oz0-sandbox)${LOCAL_STACK_ROOT}`,
  );
}

/**
 * Refuses a root reached through a folder another user may write: one they own, or every user may write (without the
 * sticky bit, or with it, for an entry of theirs), at any step of resolving the root's path, the links it follows
 * included. Whoever may write such a folder swaps what follows it whenever they like: a link of theirs higher up aimed
 * the sandbox at a node folder of the root's name (made 0711, its internal/ emptied), and a root the sandbox made
 * itself in a folder of theirs was theirs to replace between the checks and the start's removal of leftovers
 * (attacker review). The root itself is assertOwnFolder's: a volume may show as another uid, or be open to every user.
 */
function assertSafeWay(root: string): void {
  const own = process.geteuid?.();
  if (own === undefined) return;
  const ours = (uid: number): boolean => uid === own || uid === 0;
  let links = 0;
  const refuse = (problem: string): SandboxError =>
    new SandboxError(
      "failed_precondition",
      `the sandbox root ${root} is unsafe: ${problem}, so that user could swap the root, or a folder on its way, for a link to a node folder the sandbox would make and empty; set OZ0_SANDBOX_ROOT to a folder reached only through folders of this user's or root's (such as /var/lib/oz0-sandbox)${LOCAL_STACK_ROOT}`,
    );
  /** The real path of `target` (absolute), each folder a name is looked up in checked. */
  const resolve = (target: string): string => {
    let dir = path.parse(target).root;
    for (const name of target.split(path.sep)) {
      if (name === "" || name === ".") continue;
      if (name === "..") {
        dir = path.dirname(dir);
        continue;
      }
      const folder = lstatSync(dir);
      const next = path.join(dir, name);
      const entry = lstatSync(next);
      if (!ours(folder.uid)) throw refuse(`${dir} belongs to uid ${folder.uid}`);
      if ((folder.mode & 0o002) !== 0 && ((folder.mode & 0o1000) === 0 || !ours(entry.uid)))
        throw refuse(`${dir} may be written by every user`);
      if (!entry.isSymbolicLink()) dir = next;
      else if (++links > 40) throw refuse(`${next} is one link too many`);
      else dir = resolve(path.resolve(dir, readlinkSync(next)));
    }
    return dir;
  };
  resolve(path.resolve(root));
}

/**
 * Removes what a previous run left under `sessions/` and `internal/`, and
 * returns how many sessions that was: all but the sessions in `keep`, which
 * were taken over (under bubblewrap a session's keeper outlives the sandbox).
 * The others belong to nobody: their harnesses died with the sandbox, and in
 * the `user` mode what they left running is killed before this. One sandbox
 * per root.
 */
export async function removeStaleSessions(root: string, options: { keep?: ReadonlySet<string> } = {}): Promise<number> {
  let removedStale = 0;
  for (const name of ["sessions", "internal"]) {
    const dir = path.join(root, name);
    for (const entry of await readdir(dir)) {
      if (options.keep?.has(entry)) continue;
      await removeSessionTree(path.join(dir, entry));
      if (name === "internal") removedStale++;
    }
  }
  return removedStale;
}

function isInside(parent: string, child: string): boolean {
  const relative = path.relative(parent, child);
  return relative === "" || (!relative.startsWith(`..${path.sep}`) && relative !== ".." && !path.isAbsolute(relative));
}

/** The real path of the deepest existing ancestor, so a symlink cannot lead a "child" outside the root. */
function realAncestor(target: string): string {
  let current = target;
  for (;;) {
    try {
      return path.join(realpathSync.native(current), path.relative(current, target));
    } catch {
      const parent = path.dirname(current);
      if (parent === current) return target;
      current = parent;
    }
  }
}
