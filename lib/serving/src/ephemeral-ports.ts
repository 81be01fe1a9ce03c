// Ports below the kernel's ephemeral range. A process of the node that binds
// port 0 is handed a free port from that range (/proc/sys/net/ipv4/
// ip_local_port_range), and with IP_LOCAL_PORT_RANGE (Linux 6.3+) any one of
// them it names, in one bind. So a service listening in the range can, while
// it is down (a restart, a crash its supervisor mends), have its port taken
// by any such process, which its callers then send their credentials to: a
// sandbox session in the `user` mode may bind port 0 and nothing else (the
// sandbox README's "Listening ports"), which keeps it off the ports below.
import { readFileSync } from "node:fs";

/** The lowest port given to a service when there is room above it: below it lie the ports people's own servers most often take. */
const LOWEST = 10_000;
/** Where there is no room above LOWEST: the first port an unprivileged process may listen on. */
const FIRST_UNPRIVILEGED = 1_024;

/** The first port of the kernel's ephemeral range (Linux's ip_local_port_range; 32768 where it cannot be read). */
export function ephemeralRangeStart(
  read: () => string = () => readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8"),
): number {
  try {
    const low = Number(read().trim().split(/\s+/)[0]);
    if (Number.isInteger(low) && low > 0 && low < 65_536) return low;
  } catch {
    // Not Linux, or no /proc: the kernels' common default.
  }
  return 32_768;
}

/**
 * A random port below the ephemeral range for a service that may listen on any free one: from 10000 where the
 * range leaves a thousand ports above it, else from 1024; 0 (the kernel's choice, in the range) where even that
 * leaves fewer than a thousand.
 */
export function portBelowEphemeralRange(options: { rangeStart?: number; random?: () => number } = {}): number {
  const end = options.rangeStart ?? ephemeralRangeStart();
  const from = end - LOWEST >= 1_000 ? LOWEST : end - FIRST_UNPRIVILEGED >= 1_000 ? FIRST_UNPRIVILEGED : undefined;
  if (from === undefined) return 0;
  return from + Math.floor((options.random ?? Math.random)() * (end - from));
}
