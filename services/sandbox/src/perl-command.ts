// perl, which the sandbox's small helper programs run on (the session keeper
// and the LLM forwarder inside bubblewrap): perl-base is essential on Debian.
// Looked up once per process.
import { findCommand } from "@oz0/harness/host";

let found: { path: string | undefined } | undefined;

/** The perl binary in /usr/bin or /bin, or undefined when there is none. */
export function perlCommand(): string | undefined {
  found ??= { path: findCommand({ command: ["perl"], cwd: "/", env: { PATH: "/usr/bin:/bin" } }) };
  return found.path;
}
