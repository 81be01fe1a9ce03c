// Whether a process recorded earlier (in a pid file, a discovery file) still runs.

/** True when a process with this pid exists (one of another user's counts: signalling it is refused, not unknown). */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}
