// What ends everything a session started, also a process that left its
// process group (setsid, a daemon): bubblewrap's PID namespace, the session's
// own uid in the `user` mode, and in the `none` mode the host side's
// containment (a cgroup v2 per session, else a child-subreaper wrapper, else
// a best-effort search by the session's OZ0_SESSION_ID), chosen once at
// start-up and named in the start-up line.
import { createHash } from "node:crypto";
import {
  chooseContainment,
  ContainmentUnavailableError,
  type Containment,
  type ContainmentMechanism,
  type ContainmentSetting,
} from "@oz0/harness/host";
import type { IsolationName } from "./isolation-choice.js";

/** How a node's sessions are contained, as the start-up line names it. */
export type ContainmentName = ContainmentMechanism | "uid" | "pid-namespace";

export interface ContainmentChoice {
  name: ContainmentName;
  /** The `none` mode's mechanism; undefined under bubblewrap and in the `user` mode. */
  containment: Containment | undefined;
  /** Why no stronger mechanism runs, or that OZ0_CONTAINMENT chose it; empty when there is nothing to say. */
  reason: string;
}

/**
 * Chooses the `none` mode's mechanism (the other modes have theirs). Its
 * session cgroups go in a directory named for the root below the sandbox's
 * own cgroup: one sandbox per root, so what a killed run left there is this
 * run's to remove.
 */
export function chooseSessionContainment(options: {
  isolation: IsolationName;
  setting: ContainmentSetting;
  root: string;
}): ContainmentChoice {
  if (options.isolation === "bwrap") return { name: "pid-namespace", containment: undefined, reason: "" };
  if (options.isolation === "user") return { name: "uid", containment: undefined, reason: "" };
  const name = `oz0-sandbox-${createHash("sha256").update(options.root).digest("hex").slice(0, 12)}`;
  try {
    const containment = chooseContainment({ setting: options.setting, name });
    return {
      name: containment.mechanism,
      containment,
      reason: options.setting === "auto" ? containment.reason : `OZ0_CONTAINMENT=${options.setting}`,
    };
  } catch (error) {
    if (error instanceof ContainmentUnavailableError)
      throw new Error(
        `OZ0_CONTAINMENT=${options.setting}: ${error.message}; set OZ0_CONTAINMENT=auto to take the strongest that works here`,
        { cause: error },
      );
    throw error;
  }
}
