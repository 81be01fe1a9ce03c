// Programs the sandbox runs from the system's own folders, /usr/bin or /bin:
// perl (the session keeper, the LLM forwarder inside bubblewrap, the `user`
// mode's helpers that work as a session's uid; perl-base
// is essential on Debian), setpriv and prlimit (util-linux, essential too).
// Looked up once per process.
import { findCommand } from "@oz0/harness/host";

const found = new Map<string, string | undefined>();

/** The program `name` in /usr/bin or /bin, or undefined when there is none. */
export function systemCommand(name: "perl" | "setpriv" | "prlimit"): string | undefined {
  if (!found.has(name)) found.set(name, findCommand({ command: [name], cwd: "/", env: { PATH: "/usr/bin:/bin" } }));
  return found.get(name);
}
