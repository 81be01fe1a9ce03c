// In the `user` mode a session shares the node's network namespace. While a
// service of the node is down (a restart, a crash its supervisor mends; its
// sessions' processes outlive the sandbox's own until the next one starts), a
// session could listen on that service's port, and the service's callers would
// send it their credentials: the orchestrator's, which every service takes as
// the orchestrator's, on its next call to the sandbox, the LLM proxy or the
// events service. A network namespace of the session's own would end that, but
// it takes CAP_SYS_ADMIN, which a root container lacks by default (where the
// `user` mode is most often chosen: bubblewrap cannot run there either).
//
// So each harness of the mode starts inside a Landlock domain (Linux 6.7+,
// Landlock ABI 4; landlock-launcher.ts's listenPortsCommand) that handles the
// right to bind a TCP socket and allows it for port 0 only: the session listens on a port the kernel picks from its
// ephemeral range (`ip_local_port_range`), as servers in tests mostly do, and
// on no port of its own choosing, IPv4 or IPv6. A service's port below that
// range (the defaults, 7700-7710; the stacks `oz0` starts choose theirs below
// it) cannot be had; one in it can (servicePortsInEphemeralRange warns). Landlock checks TCP sockets only: a Multipath TCP
// listener (IPPROTO_MPTCP), which takes plain TCP connections too, is bound
// unchecked, so the promise holds only with the seccomp filter, which refuses
// MPTCP sockets (syscall-filter/generate.py). The domain is entered as root,
// before setpriv drops to the session's uid; it stays through every exec and
// every change of uid after.
import type { IsolationName } from "./isolation-choice.js";
import { ephemeralRangeStart } from "@oz0/serving";
import { detectListenPortsDomain, type Landlock } from "./landlock-launcher.js";
import type { ListenPortsSetting } from "./sandbox-config.js";

/** The start-up line's fields: `ephemeral`, or `any` with the reason. */
export type ListenPortsFields =
  | { sessionListenPorts: "ephemeral"; sessionListenPortsReason?: undefined }
  | { sessionListenPorts: "any"; sessionListenPortsReason: string };

/**
 * The rule the `user` mode's sessions run under, from `setting` (OZ0_SESSION_LISTEN_PORTS) and what works here,
 * with the start-up line's fields; none in the other modes (bubblewrap gives each session a network of its own; the
 * `none` mode's sessions can read the stack's credentials as they are). `ephemeral` throws where there is none (the
 * `none` mode too): a guard that was asked for is never dropped in silence.
 */
export function chooseListenPorts(options: {
  setting: ListenPortsSetting;
  mode: IsolationName;
  /** Whether the sessions run under the seccomp filter, which refuses MPTCP sockets. */
  syscallFilter: boolean;
  detect?: typeof detectListenPortsDomain;
}): { rule?: Landlock; fields?: ListenPortsFields } {
  const { setting, mode } = options;
  if (mode === "none" && setting === "ephemeral")
    throw new Error(
      "OZ0_SESSION_LISTEN_PORTS=ephemeral, but sessions run without OS isolation (the none mode), on the node's network and as the sandbox's own user; run them under bubblewrap or in the user mode, or set OZ0_SESSION_LISTEN_PORTS=auto",
    );
  // Under bubblewrap a session listens in a network of its own.
  if (mode !== "user") return {};
  if (setting === "any")
    return { fields: { sessionListenPorts: "any", sessionListenPortsReason: "OZ0_SESSION_LISTEN_PORTS=any" } };
  const found = (options.detect ?? detectListenPortsDomain)();
  // Without the filter the domain still keeps TCP sockets off the ports; MPTCP ones may listen anywhere.
  const reason =
    found.landlock === undefined
      ? found.reason
      : options.syscallFilter
        ? undefined
        : "the seccomp filter is off, and Multipath TCP sockets, which Landlock does not check, listen where they like";
  if (reason === undefined) return { rule: found.landlock!, fields: { sessionListenPorts: "ephemeral" } };
  if (setting === "ephemeral")
    throw new Error(
      `OZ0_SESSION_LISTEN_PORTS=ephemeral, but sessions could listen on any port: ${reason}; run them under bubblewrap, on a kernel with Landlock's network rules and the seccomp filter, or set OZ0_SESSION_LISTEN_PORTS=auto`,
    );
  return {
    ...(found.landlock !== undefined ? { rule: found.landlock } : {}),
    fields: { sessionListenPorts: "any", sessionListenPortsReason: reason },
  };
}

/**
 * The node's service ports a user-mode session could still be handed while their service is down: those in the
 * kernel's ephemeral range among the sandbox's own and its peers' on loopback (the events service, the
 * orchestrators' node API), which a bind to port 0 may get (in one bind, with IP_LOCAL_PORT_RANGE).
 */
export function servicePortsInEphemeralRange(options: {
  /** The sandbox's own port; none for the peers alone. */
  own?: number;
  peers: readonly (string | undefined)[];
  rangeStart?: number;
}): { service: string; port: number }[] {
  const start = options.rangeStart ?? ephemeralRangeStart();
  const ports = options.own !== undefined ? [{ service: "sandbox", port: options.own }] : [];
  for (const peer of options.peers) {
    if (peer === undefined || peer === "") continue;
    let url: URL;
    try {
      url = new URL(peer);
    } catch {
      continue; // not a URL: refused where it is used
    }
    if (url.port !== "" && LOOPBACK.test(url.hostname)) ports.push({ service: url.origin, port: Number(url.port) });
  }
  return ports.filter(({ port }) => port >= start);
}

const LOOPBACK = /^(127(\.\d{1,3}){3}|localhost|\[::1\])$/;
