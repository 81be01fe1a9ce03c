// In the `user` mode a session runs as a uid of its own on the node's file
// system, so it may write wherever every user may: the node's shared places
// (/tmp and the five others of SHARED_WRITABLE_PLACES, which the sandbox
// empties of the uid's files when the uid is given back), but also any other
// world-writable folder or file a node has (a cache an installer left 1777, a
// log file left 0666). What it leaves there outlives it, for the next session
// given the same uid to read (uids are reused), or for another service to take
// as its own; and no search for leftovers can know every such place.
//
// So each harness of the mode starts inside a Landlock domain (landlock-
// launcher.ts's sessionDomainCommand, Linux 5.19+) that lets it change the
// file system only beneath its working and state directories and the shared
// places, and write to the character devices in /dev and its terminals. That
// is what bubblewrap gives a session too (only those two directories are bound
// writable), but for the shared places, which the mode shares with the node as
// documented.
// Reading stays as it was: a user-mode session reads what every user may.
import { SHARED_WRITABLE_PLACES } from "./session-user-files.js";
import type { IsolationName } from "./isolation-choice.js";
import { detectWriteRuleDomain, type Landlock } from "./landlock-launcher.js";

/** The start-up line's fields: `confined`, or `anywhere` with the reason. */
export type SessionWritesFields =
  | { sessionWrites: "confined"; sessionWritesReason?: undefined }
  | { sessionWrites: "anywhere"; sessionWritesReason: string };

/**
 * Whether the `user` mode's sessions write only beneath their own directories and the shared places, with the
 * start-up line's fields; nothing for the other modes (bubblewrap binds only the session's directories writable;
 * the `none` mode's sessions write as the sandbox's own user).
 */
export function chooseSessionWrites(options: { mode: IsolationName; detect?: typeof detectWriteRuleDomain }): {
  rule?: Landlock;
  fields?: SessionWritesFields;
} {
  if (options.mode !== "user") return {};
  const found = (options.detect ?? detectWriteRuleDomain)();
  if (found.landlock !== undefined) return { rule: found.landlock, fields: { sessionWrites: "confined" } };
  return { fields: { sessionWrites: "anywhere", sessionWritesReason: found.reason } };
}

/** Where a `user`-mode session may change the file system: its own directories, then the node's shared places. */
export function sessionWritablePaths(paths: { workingDir: string; stateDir: string }): string[] {
  return [paths.workingDir, paths.stateDir, ...SHARED_WRITABLE_PLACES];
}
