// The processes of a session's uid. Everything a session starts runs under
// its uid, whatever process group or session it moves to, so the uid is the
// one handle that reaches a harness's escaped descendants: a process running
// as that uid calls kill(-1, SIGKILL), and the kernel signals every process
// of the uid in one pass that a fork cannot slip past (a process with a
// pending SIGKILL cannot complete a fork).
import { listProcesses } from "./process-list.js";
import type { SessionUidRange } from "./sandbox-config.js";
import { runAsSessionUser } from "./session-user-helper.js";

/** A session's uid and its gid (of the same number in this sandbox). */
export interface SessionUser {
  readonly uid: number;
  readonly gid: number;
}

/** The uids in the range whose processes are still alive (zombies aside), by real uid, read from /proc. */
export function uidsWithProcesses(range: SessionUidRange): Set<number> {
  const found = new Set<number>();
  for (const { uid } of listProcesses()) if (uid >= range.base && uid < range.base + range.count) found.add(uid);
  return found;
}

/** How long the processes of a uid may take to die once killed; past it the caller logs an error. */
const KILL_WAIT_MS = 5000;
/** How long a killer may run at all, past which the sandbox ends it: one stopped (SIGSTOP) never ends by itself. */
const KILLER_DEADLINE_MS = KILL_WAIT_MS + 3000;
/** How often a killer of the uid may be ended by another (each kills every process of the uid but itself) before this gives up. */
const KILLER_ATTEMPTS = 5;
const POLL_MS = 10;

/**
 * SIGKILLs every process of the uid (the killer itself aside) and resolves
 * once none is left alive, so nothing of the session runs when the caller
 * goes on (reads its directory, reports its end). Never rejects: resolves
 * with the error when the killer could not run, did not finish (a process of
 * the uid can signal it: stop it, or kill it, where the session's Landlock
 * domain does not scope its signals), or a process outlived the wait; the
 * caller then keeps the uid from the next sessions. The killer waits itself,
 * reading /proc: the sandbox's event loop reads nothing (a node's thousand
 * processes took it 20-50 ms a reading, every 10 ms while the uid's died),
 * unless /proc hides other users' processes from the uid (hidepid), where
 * the sandbox reads it as before.
 */
export async function killAllProcessesOf(user: SessionUser): Promise<Error | undefined> {
  for (let attempt = 0; attempt < KILLER_ATTEMPTS; attempt++) {
    let result;
    try {
      // As the uid, but never ptrace-able by its processes (session-user-helper.ts).
      result = await runAsSessionUser({
        user,
        script: KILL_ALL,
        args: [String(KILL_WAIT_MS)],
        deadlineMs: KILLER_DEADLINE_MS,
      });
    } catch (error) {
      return error instanceof Error ? error : new Error(String(error));
    }
    const { status, stderr } = result;
    if (status === 0) return undefined;
    if (result.pastDeadline)
      return new Error(`the killer of uid ${user.uid}'s processes did not finish in ${KILLER_DEADLINE_MS} ms`);
    if (status === OUTLIVED)
      return new Error(`processes of uid ${user.uid} were still alive ${KILL_WAIT_MS} ms after SIGKILL`);
    if (status === BLIND) return await waitForNoneOf(user);
    // Killed (status null) by another killer of the same uid running at once: again, to see what is left.
    if (status !== null)
      return new Error(`the killer of uid ${user.uid}'s processes failed (${stderr || `status ${status}`})`);
  }
  return new Error(`the killer of uid ${user.uid}'s processes was killed ${KILLER_ATTEMPTS} times over`);
}

/** Where the killer cannot see every process: killed, then waited for from the sandbox, reading /proc as root. */
async function waitForNoneOf(user: SessionUser): Promise<Error | undefined> {
  const range = { base: user.uid, count: 1 };
  for (let waited = 0; ; waited += POLL_MS) {
    if (uidsWithProcesses(range).size === 0) return undefined;
    if (waited >= KILL_WAIT_MS)
      return new Error(`processes of uid ${user.uid} were still alive ${KILL_WAIT_MS} ms after SIGKILL`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** The killer's exit status when a process of the uid outlived the wait. */
const OUTLIVED = 3;
/** Its exit status when it killed, but /proc hides other users' processes from it (hidepid): waitForNoneOf. */
const BLIND = 4;

/**
 * Every process of the uid but the killer itself (kill(2) fails only when there was none left to signal), again
 * every 10 ms until none is alive, read from /proc by real uid, or the wait (its argument, in ms; by the clock, in
 * whole seconds) is over: exit 0, or OUTLIVED. SIGKILL is carried out as each process next runs. Zombies are not
 * alive, but a leader that exited alone while its other threads run is; so is one whose status cannot be read for
 * a reason other than being gone (ENOENT, ESRCH: 2 and 3 on x86-64 and arm64; %! would load Errno). A /proc that
 * hides init (pid 1) from the killer hides the uid's non-dumpable processes too: BLIND, once killed.
 */
const KILL_ALL = String.raw`
my $wait_ms = shift @ARGV;
my $deadline = time + int($wait_ms / 1000) + 1;
while (1) {
  kill 'KILL', -1;
  exit ${BLIND} unless -e "/proc/1/status";
  my $alive = 0;
  opendir(my $proc, "/proc") or die "cannot read /proc: $!";
  for my $pid (grep { /^\d+$/ && $_ != $$ } readdir $proc) {
    my $status;
    unless (open($status, "<", "/proc/$pid/status")) {
      next if $! == 2 || $! == 3;
      $alive = 1;
      last;
    }
    my ($state, $threads, $uid) = ("", 1);
    while (<$status>) {
      $state = $1 if /^State:\s+(\S)/;
      $uid = $1 if /^Uid:\s+(\d+)/;
      if (/^Threads:\s+(\d+)/) { $threads = $1; last }
    }
    close $status;
    next unless defined $uid && $uid == $<;
    next if ($state eq "Z" || $state eq "X") && $threads <= 1;
    $alive = 1;
    last;
  }
  closedir $proc;
  exit 0 unless $alive;
  exit ${OUTLIVED} if time >= $deadline;
  select(undef, undef, undef, 0.01);
}
`;
