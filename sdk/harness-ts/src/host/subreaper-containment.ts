// The child-subreaper mechanism: where no cgroup of its own can be had, the
// harness runs under a small wrapper that made itself a child subreaper
// (prctl PR_SET_CHILD_SUBREAPER). The kernel then hands it every orphan
// among its descendants instead of init, so a process that left the process
// group (setsid, a double fork) is still below the wrapper, and the wrapper
// finds all of them by walking /proc from its own pid. When the harness
// exits, the wrapper waits up to the linger for them to end by themselves,
// lists the ones still there, kills them and exits only once it has no child
// left (then it has no descendant at all), with the harness's own status.
// Only what stayed in the harness's process group is waited for: a process
// that left the group has no reason to end with the harness.
//
// Node cannot call prctl, and this package writes no native code: the
// wrapper is Perl (perl-base is essential on Debian and its images), which
// reaches prctl through its `syscall` builtin. The syscall's number is
// per-architecture: known here for x86-64 and arm64.
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { findCommand } from "./command-lookup.js";
import type { HarnessLauncher, LaunchedHarness } from "./process-launcher.js";
import { signalGroup } from "./process-launcher.js";
import { LINUX_SYSCALLS } from "./linux-syscalls.js";
import { onHostExit } from "./process-table.js";
import type { SessionProcess } from "./process-table.js";

/**
 * The wrapper. Arguments: prctl's syscall number, the pid of the process that
 * spawns it, the linger in ms, the report file ("" for none), the command.
 *
 * - It is the leader of the session's process group and the harness stays in
 *   it: SIGTERM to the group reaches the harness and leaves the wrapper
 *   waiting (a no-op handler, which exec resets for the harness).
 * - SIGUSR1: SIGKILL the process group (the harness and what stayed in its
 *   group), the wrapper aside; the host's "kill now".
 * - SIGUSR2, also its parent-death signal: kill everything at once and exit.
 * - Never dumpable, so dying of the harness's own signal (to report it
 *   faithfully) dumps no core into the working directory.
 * - Its own stdio goes to /dev/null once the harness runs: the pipes are the
 *   harness's alone, and close when the harness and its descendants are gone.
 */
const WRAPPER = String.raw`
my ($nr, $parent, $linger, $report, @cmd) = @ARGV;
my ($harness, $status);
# Every process: [pid, ppid, pgid, state].
sub table { my @t; opendir(my $d, "/proc") or return @t; for my $p (grep { /^\d+$/ } readdir $d) { open(my $f, "<", "/proc/$p/stat") or next; my $s = <$f>; push @t, [$p, $2, $3, $1] if defined $s && $s =~ /.*\) (\S) (\d+) (\d+)/s } @t }
# The live processes below this one.
sub descendants { my %kids; push @{$kids{$_->[1]}}, $_ for table(); my @out; my @todo = ($$); while (defined(my $p = shift @todo)) { for my $k (@{$kids{$p} || []}) { push @todo, $k->[0]; push @out, $k if $k->[3] ne "Z" } } @out }
# Reaps what has ended; returns 0 while children remain, -1 when none is left.
sub reap { for (;;) { my $w = waitpid(-1, 1); return $w if $w <= 0; $status = $? if $w == $harness } }
# Kills until no child is left (so no descendant is), then ends as the harness did.
sub finish { for (;;) { kill "KILL", map { $_->[0] } descendants(); last if reap() < 0; select(undef, undef, undef, 0.01) } $SIG{$_} = "DEFAULT" for qw(TERM INT HUP USR1 USR2); my $sig = ($status // 0) & 127; if ($sig) { kill $sig, $$; exit 128 + $sig } exit(defined $status ? $status >> 8 : 127) }
$SIG{$_} = sub {} for qw(TERM INT HUP);
$SIG{USR1} = sub { kill "KILL", map { $_->[0] } grep { $_->[2] == $$ } descendants() };
$SIG{USR2} = sub { finish() };
syscall($nr, 36, 1, 0, 0, 0) == 0 or do { print STDERR "oz0 subreaper: prctl(PR_SET_CHILD_SUBREAPER) failed: $!\n"; exit 125 };
syscall($nr, 4, 0, 0, 0, 0);
syscall($nr, 1, 12, 0, 0, 0);
exit 125 if getppid() != $parent;
$harness = fork() // do { print STDERR "oz0 subreaper: fork failed: $!\n"; exit 125 };
if ($harness == 0) { $SIG{$_} = "DEFAULT" for qw(TERM INT HUP USR1 USR2); exec { $cmd[0] } @cmd; print STDERR "oz0 subreaper: cannot run $cmd[0]: $!\n"; exit 127 }
open(STDIN, "<", "/dev/null"); open(STDOUT, ">", "/dev/null"); open(STDERR, ">", "/dev/null");
for (;;) { my $w = waitpid(-1, 0); if ($w == $harness) { $status = $?; last } last if $w < 0 }
for (my $i = 0; $i * 20 < $linger && grep { $_->[2] == $$ } descendants(); $i++) { reap(); select(undef, undef, undef, 0.02) }
if ($report ne "" && open(my $r, ">", $report)) { for my $p (descendants()) { my $c = ""; if (open(my $f, "<", "/proc/$p->[0]/cmdline")) { local $/; $c = <$f> // ""; $c =~ tr/\0/ /; $c =~ s/ +$//; } print $r "$p->[0]\t$p->[2]\t$c\n" } close $r }
finish();
`;

/** Where the wrapper can run: a perl, and prctl's number on this architecture. */
export interface Subreaper {
  perlPath: string;
  prctl: number;
}

/** A working subreaper wrapper here, or why not (tried once, with a harness that exits at once). */
export function detectSubreaper():
  { subreaper: Subreaper; reason?: undefined } | { subreaper?: undefined; reason: string } {
  if (process.platform !== "linux") return { reason: `prctl is Linux's (this is ${process.platform})` };
  const prctl = LINUX_SYSCALLS[process.arch]?.prctl;
  if (prctl === undefined)
    return { reason: `prctl's syscall number is not known for ${process.arch} (only x64 and arm64)` };
  const perlPath = findCommand({ command: ["perl"], cwd: "/", env: { PATH: "/usr/bin:/bin:/usr/local/bin" } });
  if (perlPath === undefined) return { reason: "no perl in /usr/bin, /bin or /usr/local/bin (Debian's perl-base)" };
  const trial = spawnSync(
    perlPath,
    ["-e", WRAPPER, String(prctl), String(process.pid), "0", "", "/bin/sh", "-c", "exit 7"],
    { encoding: "utf8", stdio: ["ignore", "ignore", "pipe"] },
  );
  if (trial.status !== 7)
    return {
      reason: `a trial wrapper did not work (${trial.error?.message ?? (trial.stderr.trim() || `exit ${trial.status ?? trial.signal}`)})`,
    };
  return { subreaper: { perlPath, prctl } };
}

function readReport(file: string | undefined): SessionProcess[] {
  if (file === undefined) return [];
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return [];
  }
  return text
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      const [pid, pgid, ...command] = line.split("\t");
      const joined = command.join("\t");
      return {
        pid: Number(pid),
        pgid: Number(pgid),
        command: joined.length > 120 ? `${joined.slice(0, 117)}…` : joined,
      };
    });
}

/** One session under its own wrapper. */
export class SubreaperContainer {
  readonly #subreaper: Subreaper;
  readonly #lingerMs: number;
  readonly #reportFile: string | undefined;
  #launched: LaunchedHarness | undefined;
  #ended: Promise<SessionProcess[]> | undefined;

  constructor(options: { subreaper: Subreaper; lingerMs: number; reportFile: string | undefined }) {
    this.#subreaper = options.subreaper;
    this.#lingerMs = options.lingerMs;
    this.#reportFile = options.reportFile;
  }

  /** The wrapper is spawned here, not through `inner` (which only starts a command that cannot run, for spawn_failed): it takes the parent-death role itself. */
  launcher(inner: HarnessLauncher): HarnessLauncher {
    return {
      launch: (spec) => {
        if (findCommand(spec) === undefined) return inner.launch(spec);
        const { perlPath, prctl } = this.#subreaper;
        const args = [
          "-e",
          WRAPPER,
          String(prctl),
          String(process.pid),
          String(this.#lingerMs),
          this.#reportFile ?? "",
          ...spec.command,
        ];
        const child = spawn(perlPath, args, {
          cwd: spec.cwd,
          env: spec.env,
          detached: true,
          stdio: ["pipe", "pipe", "pipe"],
        });
        const pid = child.pid;
        if (pid !== undefined) {
          // Not SIGKILL: the wrapper outlives this process just long enough to kill what is below it.
          const forget = onHostExit(() => process.kill(pid, "SIGUSR2"));
          child.once("exit", forget);
        }
        const alive = (): boolean => child.exitCode === null && child.signalCode === null;
        const launched: LaunchedHarness = {
          child,
          terminate() {
            if (pid !== undefined) signalGroup(pid, "SIGTERM");
          },
          kill() {
            if (pid !== undefined && alive()) process.kill(pid, "SIGUSR1");
          },
          // Asked when the wrapper exits: by then its report is written.
          hasLiveProcesses: () => readReport(this.#reportFile).length > 0,
        };
        this.#launched = launched;
        return launched;
      },
    };
  }

  /** What the wrapper found and killed once the harness had exited, after it exited itself (told to end everything at once if it still runs). */
  end(): Promise<SessionProcess[]> {
    this.#ended ??= (async () => {
      const child = this.#launched?.child;
      if (child !== undefined && child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
        const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
        process.kill(child.pid, "SIGUSR2");
        await exited;
      }
      const found = readReport(this.#reportFile);
      if (this.#reportFile !== undefined) rmSync(this.#reportFile, { force: true });
      return found;
    })();
    return this.#ended;
  }
}
