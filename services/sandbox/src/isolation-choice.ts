// Which isolation sessions get on this node, decided once at start-up from
// OZ0_ISOLATION and what works here: `auto` takes the strongest that does
// (bubblewrap, else an unprivileged uid per session, else none); an explicit
// `bwrap` or `user` refuses to start without it; `none` is only ever chosen
// by `auto` when nothing else works, or by a person who set it.
import { detectBubblewrap, type BubblewrapDetection } from "./bubblewrap-launcher.js";
import type { IsolationSetting, SessionUidRange } from "./sandbox-config.js";
import { keeperAvailable } from "./session-keeper.js";
import { detectSessionUsers, type SessionUsersDetection } from "./session-user-detection.js";

/** How sessions are isolated, as logs, health and lifecycle events name it. */
export type IsolationName = "bwrap" | "user" | "none";

export interface IsolationChoice {
  mode: IsolationName;
  bubblewrap: BubblewrapDetection;
  sessionUsers: SessionUsersDetection;
  /** Why no stronger mode was taken (auto) or that a person chose this one; empty under bubblewrap. */
  reason: string;
}

export async function chooseIsolation(options: {
  setting: IsolationSetting;
  /** The prepared sandbox root (its `sessions/` exists). */
  root: string;
  uids: SessionUidRange;
  bwrapPath?: string;
  setprivPath?: string;
}): Promise<IsolationChoice> {
  const { setting } = options;
  if (setting === "none") {
    const chosen = { available: false, reason: "OZ0_ISOLATION=none" };
    return {
      mode: "none",
      bubblewrap: chosen,
      sessionUsers: { ...chosen, warnings: [] },
      reason: "OZ0_ISOLATION=none",
    };
  }
  const bubblewrap: BubblewrapDetection =
    setting === "user"
      ? { available: false, reason: "OZ0_ISOLATION=user" }
      : await detectBubblewrap({ bwrapPath: options.bwrapPath });
  if (setting === "bwrap" && !bubblewrap.available) {
    throw new Error(
      `OZ0_ISOLATION=bwrap requires bubblewrap, which does not work here: ${bubblewrap.reason ?? "unknown reason"}`,
    );
  }
  if (bubblewrap.available && bubblewrap.path !== undefined) {
    // As root, each session runs under a uid of its own: as uid 0 of the node it would own the kernel's files (see
    // the README's Isolation) and have no limit on its processes.
    // The sessions' keepers end what a uid still runs before a session starts under it (session-keeper.ts).
    const unavailable = (reason: string): SessionUsersDetection => ({ available: false, warnings: [], reason });
    const sessionUsers =
      process.getuid?.() !== 0
        ? unavailable("the sandbox does not run as root: its sessions run as its own user")
        : !keeperAvailable()
          ? unavailable("no perl or mkfifo for the sessions' keepers, which end what a uid ran before it is used")
          : await detectSessionUsers({
              root: options.root,
              range: options.uids,
              bwrapPath: bubblewrap.path,
              ...(options.setprivPath !== undefined ? { setprivPath: options.setprivPath } : {}),
            });
    return { mode: "bwrap", bubblewrap, sessionUsers, reason: "" };
  }
  const sessionUsers = await detectSessionUsers({
    root: options.root,
    range: options.uids,
    ...(options.setprivPath !== undefined ? { setprivPath: options.setprivPath } : {}),
  });
  if (setting === "user" && !sessionUsers.available) {
    throw new Error(
      `OZ0_ISOLATION=user requires running sessions under uids of their own, which does not work here: ${sessionUsers.reason ?? "unknown reason"}`,
    );
  }
  if (sessionUsers.available) {
    return {
      mode: "user",
      bubblewrap,
      sessionUsers,
      reason: setting === "user" ? "OZ0_ISOLATION=user" : `no bubblewrap: ${bubblewrap.reason ?? "unknown reason"}`,
    };
  }
  return {
    mode: "none",
    bubblewrap,
    sessionUsers,
    reason: `no bubblewrap (${bubblewrap.reason ?? "unknown reason"}) and no uid of their own for sessions (${sessionUsers.reason ?? "unknown reason"})`,
  };
}
