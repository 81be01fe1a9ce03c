// The program bwrap starts INSIDE the sandbox when the session has an LLM
// endpoint. The sandbox has its own network namespace (loopback only), so the
// harness reaches the LLM proxy through this forwarder: it listens on
// 127.0.0.1:<port> inside the namespace and pipes each connection to a Unix
// socket bind-mounted from the node, which the sandbox service connects to the
// real proxy. Then it runs the harness with the same stdio.
//
//   perl -e <program> <port>=<unix socket> [...] -- <harness command...>
//
// It was a Node script: a second Node process per session, about 128 ms of
// every session's start under bubblewrap (bench/harness-session-overhead.ts).
// Perl starts in a few ms and is there anyway (perl-base is essential on
// Debian; the keeper and the subreaper wrapper use it too), but only without
// modules: `use Socket` and `use POSIX` (and `%!`, which loads Errno) took a
// bare start of about 3 ms of CPU to 15, on every session's start. So the
// program uses only builtins, and packs its addresses and names its
// constants itself, with Linux's numbers (the same on every architecture
// Node runs on but MIPS, where sandboxEntryCommand refuses; see
// ENTRY_CONSTANTS). It forks a
// process per connection, so a harness that stops reading one stream stalls
// nothing else. It shares the harness's process group: the sandbox's SIGTERM
// reaches the harness and leaves the forwarder (a no-op handler, which exec
// resets for the harness); it exits when the harness does, the same way, and
// the namespace's end takes its connection processes with it.
import { systemCommand } from "./system-command.js";

/**
 * Linux's numbers for what the program would otherwise take from Socket,
 * POSIX and Errno: <sys/socket.h>, <netinet/in.h>, <sys/wait.h> and
 * <errno.h>, as constant subs (`use constant` would load a module too). The
 * same on every Linux port Node runs on (x86, arm, arm64, ppc64, riscv64,
 * s390x, loong64) except MIPS, whose SOCK_STREAM is 2 and SOL_SOCKET 0xffff.
 */
const ENTRY_CONSTANTS = String.raw`
sub AF_UNIX () { 1 } sub AF_INET () { 2 } sub SOCK_STREAM () { 1 } sub SOL_SOCKET () { 1 } sub SO_REUSEADDR () { 2 }
sub WNOHANG () { 1 } sub EINTR () { 4 }
`;

const PROGRAM = String.raw`
use strict;${ENTRY_CONSTANTS}
sub fail { print STDERR "oz0 sandbox entry: $_[0]\n"; exit 127 }
# struct sockaddr_in (family, port in network order, 127.0.0.1, zero padding) and sockaddr_un (family, NUL-ended path).
sub loopback_address { pack("S n C4 x8", AF_INET, $_[0], 127, 0, 0, 1) }
sub unix_address { pack("S Z*", AF_UNIX, $_[0]) }
my ($at) = grep { $ARGV[$_] eq "--" } 0 .. $#ARGV;
fail("no harness command after --") unless defined $at && $at < $#ARGV;
my @forwards = @ARGV[0 .. $at - 1]; my @cmd = @ARGV[$at + 1 .. $#ARGV];
my @listeners;
for my $spec (@forwards) {
  my ($port, $path) = $spec =~ /^(\d+)=(.+)$/ or fail("bad forward '$spec'; expected <port>=<socket>");
  socket(my $l, AF_INET, SOCK_STREAM, 0) or fail("socket: $!");
  setsockopt($l, SOL_SOCKET, SO_REUSEADDR, 1);
  bind($l, loopback_address($port)) or fail("cannot listen for the LLM forwarder on $port: $!");
  listen($l, 128) or fail("listen: $!");
  push @listeners, [$l, $path];
}
$SIG{$_} = sub {} for qw(TERM INT);
$SIG{PIPE} = "IGNORE";
my $harness = fork() // fail("fork: $!");
if ($harness == 0) {
  $SIG{$_} = "DEFAULT" for qw(TERM INT PIPE);
  close $_->[0] for @listeners;
  # Nothing is buffered on STDOUT (the entry never prints to it), so exit's flush writes nothing twice.
  exec { $cmd[0] } @cmd; print STDERR "oz0 sandbox entry: cannot start $cmd[0]: $!\n"; exit 127;
}
# The harness's end interrupts the wait below at once.
$SIG{CHLD} = sub {};
# One process per connection: both ways until both are done.
sub pipe_both {
  my ($in, $path) = @_;
  socket(my $up, AF_UNIX, SOCK_STREAM, 0) or exit 1;
  connect($up, unix_address($path)) or exit 1;
  my %to = (fileno($in) => $up, fileno($up) => $in);
  my %open = (fileno($in) => $in, fileno($up) => $up);
  while (%open) {
    my $rin = ""; vec($rin, $_, 1) = 1 for keys %open;
    next if select(my $rout = $rin, undef, undef, undef) <= 0;
    for my $fd (keys %open) {
      next unless vec($rout, $fd, 1);
      my $n = sysread($open{$fd}, my $buf, 65536);
      next if !defined $n && $! == EINTR;
      if (!$n) { shutdown($to{$fd}, 1); delete $open{$fd}; next }
      my $off = 0;
      while ($off < $n) { my $w = syswrite($to{$fd}, $buf, $n - $off, $off); if (!defined $w) { next if $! == EINTR; exit 0 } $off += $w }
    }
  }
  exit 0;
}
my $status;
for (;;) {
  while ((my $w = waitpid(-1, WNOHANG)) > 0) { if ($w == $harness) { $status = $?; last } }
  last if defined $status;
  my $rin = ""; vec($rin, fileno($_->[0]), 1) = 1 for @listeners;
  next if select(my $rout = $rin, undef, undef, 0.2) <= 0;
  for my $l (@listeners) {
    next unless vec($rout, fileno($l->[0]), 1);
    accept(my $in, $l->[0]) or next;
    my $child = fork();
    if (defined $child && $child == 0) { close $_->[0] for @listeners; pipe_both($in, $l->[1]) }
    close $in;
  }
}
my $sig = $status & 127;
if ($sig) { $SIG{$_} = "DEFAULT" for qw(TERM INT); kill $sig, $$; exit 128 + $sig }
exit($status >> 8);
`;

/** The command bwrap runs first: the forwarder, to which the forwards and `--` and the harness's command are appended. Throws without perl. */
export function sandboxEntryCommand(): string[] {
  if (process.arch === "mips" || process.arch === "mipsel")
    throw new Error(
      "the sandbox's LLM forwarder does not know MIPS's socket numbers; run the sandbox without bubblewrap there",
    );
  const perl = systemCommand("perl");
  if (perl === undefined)
    throw new Error("no perl in /usr/bin or /bin (Debian's perl-base), which runs the LLM forwarder inside bubblewrap");
  return [perl, "-e", PROGRAM];
}
