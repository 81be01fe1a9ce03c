// `oz0 dev` keeps each service's port for good (ports.json) and starts a
// service that died again on it. While it is down, a port from the kernel's
// ephemeral range can be had by any process of the node that binds port 0
// until the kernel hands it that one (a few tens of thousands of binds), and
// a sandbox session in the `user` mode may bind only so (the sandbox README's
// "Listening ports"): listening there, it would be sent the service's
// callers' credentials. So the first start of a service listens on a port
// below that range, chosen at random; the kernel's choice only where the
// range leaves no room below it.
import { readFileSync } from "node:fs";

/** The lowest port the services are given: below it lie the ports people's own servers most often take. */
const LOWEST = 10_000;

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

/** A port between 10000 and the ephemeral range's start for a service's first start; 0 (the kernel's choice) where there is no room. */
export function portBelowEphemeralRange(options: { rangeStart?: number; random?: () => number } = {}): number {
  const end = options.rangeStart ?? ephemeralRangeStart();
  if (end - LOWEST < 1_000) return 0;
  return LOWEST + Math.floor((options.random ?? Math.random)() * (end - LOWEST));
}

/** Whether a service failed to start because its port is taken. */
export function portTaken(error: unknown): boolean {
  return /EADDRINUSE|address already in use/i.test((error as Error).message);
}
