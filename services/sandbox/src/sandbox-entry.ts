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
// Debian; the keeper and the subreaper wrapper use it too). It forks a
// process per connection, so a harness that stops reading one stream stalls
// nothing else. It shares the harness's process group: the sandbox's SIGTERM
// reaches the harness and leaves the forwarder (a no-op handler, which exec
// resets for the harness); it exits when the harness does, the same way, and
// the namespace's end takes its connection processes with it.
import { perlCommand } from "./perl-command.js";

const PROGRAM = String.raw`
use strict; use Socket; use POSIX ();
sub fail { print STDERR "oz0 sandbox entry: $_[0]\n"; exit 127 }
my ($at) = grep { $ARGV[$_] eq "--" } 0 .. $#ARGV;
fail("no harness command after --") unless defined $at && $at < $#ARGV;
my @forwards = @ARGV[0 .. $at - 1]; my @cmd = @ARGV[$at + 1 .. $#ARGV];
my @listeners;
for my $spec (@forwards) {
  my ($port, $path) = $spec =~ /^(\d+)=(.+)$/ or fail("bad forward '$spec'; expected <port>=<socket>");
  socket(my $l, PF_INET, SOCK_STREAM, 0) or fail("socket: $!");
  setsockopt($l, SOL_SOCKET, SO_REUSEADDR, 1);
  bind($l, pack_sockaddr_in($port, inet_aton("127.0.0.1"))) or fail("cannot listen for the LLM forwarder on $port: $!");
  listen($l, 128) or fail("listen: $!");
  push @listeners, [$l, $path];
}
$SIG{$_} = sub {} for qw(TERM INT);
$SIG{PIPE} = "IGNORE";
my $harness = fork() // fail("fork: $!");
if ($harness == 0) {
  $SIG{$_} = "DEFAULT" for qw(TERM INT PIPE);
  close $_->[0] for @listeners;
  exec { $cmd[0] } @cmd; print STDERR "oz0 sandbox entry: cannot start $cmd[0]: $!\n"; POSIX::_exit(127);
}
# The harness's end interrupts the wait below at once.
$SIG{CHLD} = sub {};
# One process per connection: both ways until both are done.
sub pipe_both {
  my ($in, $path) = @_;
  socket(my $up, PF_UNIX, SOCK_STREAM, 0) or POSIX::_exit(1);
  connect($up, pack_sockaddr_un($path)) or POSIX::_exit(1);
  my %to = (fileno($in) => $up, fileno($up) => $in);
  my %open = (fileno($in) => $in, fileno($up) => $up);
  while (%open) {
    my $rin = ""; vec($rin, $_, 1) = 1 for keys %open;
    next if select(my $rout = $rin, undef, undef, undef) <= 0;
    for my $fd (keys %open) {
      next unless vec($rout, $fd, 1);
      my $n = sysread($open{$fd}, my $buf, 65536);
      next if !defined $n && $!{EINTR};
      if (!$n) { shutdown($to{$fd}, 1); delete $open{$fd}; next }
      my $off = 0;
      while ($off < $n) { my $w = syswrite($to{$fd}, $buf, $n - $off, $off); if (!defined $w) { next if $!{EINTR}; POSIX::_exit(0) } $off += $w }
    }
  }
  POSIX::_exit(0);
}
my $status;
for (;;) {
  while ((my $w = waitpid(-1, POSIX::WNOHANG())) > 0) { if ($w == $harness) { $status = $?; last } }
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
  const perl = perlCommand();
  if (perl === undefined)
    throw new Error("no perl in /usr/bin or /bin (Debian's perl-base), which runs the LLM forwarder inside bubblewrap");
  return [perl, "-e", PROGRAM];
}
