// The filesystem a session sees under bubblewrap: bind mounts of what it
// needs, and over them the paths it must never see. A read-only path can
// hold more than it should (an installation folder with the stack's data
// directory inside, a plugin directory given as `/`): every hidden path that
// lies inside a bound one is covered (an empty tmpfs over a directory, the
// node's /dev/null over a file, which cannot even be opened there: bwrap
// binds with nodev), and whatever the session needs deeper inside a hidden
// path (its own directories inside the sandbox root) is bound again on top.
//
// bwrap applies mounts in order, so they are sorted by depth: a directory's
// mount comes before anything below it, and of two on the same path the
// later one listed wins (a hidden path over the bind it hides).
//
// Nothing a session may write is memory. A tmpfs is RAM (up to half the
// node's by default, and as many files as the node has pages), not counted
// to any process: a session filling one would bring the node (or its pod) to
// the OOM killer, which then ends other sessions' processes first, the largest
// first, while the tmpfs stays full for as long as one process of the filler
// lives. So /tmp and /dev/shm are the session's TMPDIR on disk, where the disk
// guard counts it and its end removes it, and the tmpfs mounts that remain
// (bwrap's root, /dev, the covers over hidden paths) are made read-only once
// everything is mounted in them (bwrap's --remount-ro, which leaves the mounts
// inside them as they are).
import { realpathSync, statSync } from "node:fs";
import path from "node:path";

export interface BindMount {
  /** The node path. */
  source: string;
  /** Where it appears inside; default the same path. */
  dest?: string;
  writable?: boolean;
  /** Skipped when it does not exist (system paths differ between distributions). */
  optional?: boolean;
}

type MountOp =
  | { kind: "bind"; source: string; realSource: string; dest: string; writable: boolean; optional: boolean }
  | { kind: "tmpfs" | "proc" | "proc-read-only" | "dev" | "hide-file" | "dir" | "remount-ro"; dest: string };

/**
 * The kernel's settings (sysctls), read-only inside. bwrap covers /proc/sys with a read-only bind only when it can
 * write it, and the directory refuses writes even to root, so it is never covered; its files are writable by their
 * owner, uid 0 of the node. A sandbox running as root runs its sessions as that uid (capabilities dropped), and a
 * session could otherwise set any of them: `kernel.core_pattern` names a program the kernel runs as root, on the
 * node, at the next crash. Bound from the node's /proc: a sysctl's value is that of the reader's namespaces either
 * way.
 */
export const PROC_READ_ONLY: readonly string[] = ["/proc/sys"];

export interface MountPlan {
  /** bwrap's mount arguments, in order. */
  readonly args: string[];
  /** Whether a node path can be reached inside under its own name. */
  visible(file: string): boolean;
}

export function isWithin(file: string, root: string): boolean {
  return root !== "" && (file === root || root === "/" || file.startsWith(root.endsWith("/") ? root : `${root}/`));
}

// Real paths by the C library's realpath(3) (realpathSync.native), here and
// wherever a session's paths are resolved: every session plans its mounts
// again, so a link changed since is followed where it now leads, and Node's
// JavaScript realpathSync walked each path component by component in cold
// code, an lstat and a cache entry apiece (issue 24).
function realOrSelf(file: string): string {
  try {
    return realpathSync.native(file);
  } catch {
    return file;
  }
}

function depth(dest: string): number {
  return dest.split("/").filter((part) => part !== "").length;
}

export function planMounts(options: {
  binds: readonly BindMount[];
  /** Never visible, whatever contains them. */
  hidden: readonly string[];
  /** Hidden too, unless one is itself bound (then hiding it would undo the bind that was asked for) or is `/`. */
  hiddenUnlessBound?: readonly string[];
  /** The node folder the session's /tmp and /dev/shm are (its TMPDIR); without it both are read-only and empty. */
  tmp?: string | undefined;
}): MountPlan {
  const tmp = (dest: string): MountOp =>
    options.tmp !== undefined
      ? {
          kind: "bind",
          source: options.tmp,
          realSource: realOrSelf(options.tmp),
          dest,
          writable: true,
          optional: false,
        }
      : { kind: "tmpfs", dest };
  const ops: MountOp[] = [
    tmp("/tmp"),
    { kind: "proc", dest: "/proc" },
    ...PROC_READ_ONLY.map((dest): MountOp => ({ kind: "proc-read-only", dest })),
    { kind: "dev", dest: "/dev" },
    tmp("/dev/shm"),
    ...options.binds.map((bind): MountOp => ({
      kind: "bind",
      source: bind.source,
      realSource: realOrSelf(bind.source),
      dest: bind.dest ?? bind.source,
      writable: bind.writable ?? false,
      optional: bind.optional ?? false,
    })),
  ];
  const binds = ops.filter((op): op is Extract<MountOp, { kind: "bind" }> => op.kind === "bind");
  const boundSources = new Set(binds.map((bind) => bind.realSource));
  const hidden = [
    ...options.hidden.map((file) => ({ file, always: true })),
    ...(options.hiddenUnlessBound ?? []).map((file) => ({ file, always: false })),
  ];
  const covered = new Set<string>();
  for (const { file, always } of hidden) {
    let real: string;
    let directory: boolean;
    try {
      real = realpathSync.native(file);
      directory = statSync(real).isDirectory();
    } catch {
      continue; // not there: nothing to hide
    }
    if (!always && (real === "/" || boundSources.has(real))) continue;
    for (const bind of binds) {
      if (!isWithin(real, bind.realSource)) continue;
      const dest = path.join(bind.dest, path.relative(bind.realSource, real));
      if (covered.has(dest)) continue;
      covered.add(dest);
      ops.push({ kind: directory ? "tmpfs" : "hide-file", dest });
    }
  }
  // The folders on the way to each mount that no mount makes, made 0755 first: bwrap makes them 0700, which a session
  // dropped to a uid of its own (bubblewrap-launcher.ts) could not pass. Where one exists already (inside a bind),
  // bwrap leaves it as it is.
  const dests = new Set(ops.map((op) => op.dest));
  const ways = new Set<string>();
  for (const op of ops)
    for (let dir = path.dirname(op.dest); dir !== path.dirname(dir); dir = path.dirname(dir))
      if (!dests.has(dir)) ways.add(dir);
  for (const dest of ways) ops.push({ kind: "dir", dest });
  // Array.prototype.sort is stable: on the same depth the order above holds. Each depth counted once, not in every
  // comparison (a few hundred a session, each splitting two paths: issue 24).
  const sorted = ops
    .map((op, index) => ({ op, index, depth: depth(op.dest) }))
    .sort((a, b) => a.depth - b.depth || a.index - b.index)
    .map(({ op }) => op);
  // Last, once every mount inside them is made: each tmpfs read-only (see the top).
  const readOnly = ["/", ...sorted.filter((op) => op.kind === "tmpfs" || op.kind === "dev").map((op) => op.dest)];
  sorted.push(...readOnly.map((dest): MountOp => ({ kind: "remount-ro", dest })));
  const args = sorted.flatMap((op): string[] => {
    switch (op.kind) {
      case "bind":
        return [op.writable ? "--bind" : op.optional ? "--ro-bind-try" : "--ro-bind", op.source, op.dest];
      case "hide-file":
        return ["--ro-bind", "/dev/null", op.dest];
      case "proc-read-only":
        return ["--ro-bind-try", op.dest, op.dest];
      default:
        return [`--${op.kind}`, op.dest];
    }
  });
  return {
    args,
    visible(file: string): boolean {
      let seen: { index: number; inside: string } | undefined;
      sorted.forEach((op, index) => {
        if (op.kind !== "bind") return;
        for (const source of [op.source, op.realSource]) {
          if (isWithin(file, source)) seen = { index, inside: path.join(op.dest, path.relative(source, file)) };
        }
      });
      if (seen === undefined) return false;
      const { index: boundAt, inside } = seen;
      // A later mount over it hides it; a remount changes only whether it is writable.
      return !sorted.some(
        (op, index) => index > boundAt && op.kind !== "bind" && op.kind !== "remount-ro" && isWithin(inside, op.dest),
      );
    },
  };
}
