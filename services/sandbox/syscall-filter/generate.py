#!/usr/bin/python3
# Writes the sessions' seccomp filter, one classic-BPF program per
# architecture (x86_64.bpf, aarch64.bpf beside this file), with libseccomp
# (Debian's python3-seccomp): `/usr/bin/python3 generate.py [DIR]`. The
# programs are checked in, so a node needs neither; the sandbox's test
# regenerates them and fails when they differ (syscall-filter.test.ts).
#
# What a session may not do, all reachable by an unprivileged process and
# none needed to run a harness or the commands its tools run (Docker's
# default profile refuses each of them too):
# - make a user namespace (unshare, clone): inside one a process holds every
#   capability over what it then creates (mounts, network, more namespaces),
#   the way in to many of the kernel's local privilege escalations. clone3
#   passes its flags in memory a filter cannot read, so it is refused with
#   ENOSYS, on which glibc and others fall back to clone;
# - join a namespace (setns);
# - give a thread a descriptor table of its own (clone with CLONE_THREAD and
#   without CLONE_FILES; unshare with CLONE_FILES): the open files guard
#   (session-open-files-guard.ts) counts each process's table, the one its
#   first thread holds, and a thread's own would hold up to the session's
#   whole limit again, unseen, towards the node's one table of open files.
#   Every threads library shares the table (glibc's pthread_create, Go's
#   runtime, Rust's std through pthreads);
# - Multipath TCP sockets (socket with IPPROTO_MPTCP): Landlock's rule on
#   the ports a user-mode session may bind (session-listen-ports.ts) checks
#   TCP sockets only, and an MPTCP listener takes plain TCP connections too,
#   so one on a stopped service's port would be sent its callers'
#   credentials. Answered EPROTONOSUPPORT, as by a kernel without MPTCP, on
#   which programs that ask for it (Go's listeners) fall back to TCP. The same
#   holds for SMC (AF_SMC, and IPPROTO_SMC since Linux 6.11), whose listeners
#   fall back to TCP for TCP clients: refused with EPERM, which no kernel
#   answers on its own, so a test tells the filter's answer apart from a
#   kernel without SMC; only programs started through smc_run ask for it;
# - the kernel's keyrings (keyctl, add_key, request_key), eBPF (bpf),
#   performance counters (perf_event_open), userfaultfd and io_uring: large
#   attack surfaces with a long list of exploits and no use to a session
#   that a plain system call does not serve (libuv and others fall back);
# - System V IPC beyond what a program needs to coordinate: a segment of
#   shared memory above 64 KiB, a set of more than 32 semaphores, any message
#   queue. Under bubblewrap each session has its own IPC namespace, whose
#   limits are the kernel's defaults, all but unbounded (kernel.shmall), and
#   what a segment holds once detached, or a queue or a semaphore set at
#   all, is memory the node cannot reclaim and no process is charged for:
#   the memory guard (session-memory-guard.ts) cannot see it, and one
#   session could take the node's memory from all the others. With these
#   limits a namespace holds at most 4,096 segments (kernel.shmmni) of
#   64 KiB, 256 MiB, and 32,000 sets (kernel.semmni) of 32, about 70 MiB.
#   PostgreSQL's segment is a few hundred bytes (its memory is mmap'd) and
#   its semaphores POSIX ones on Linux; shared memory between processes is
#   /dev/shm's or mmap's, which count as the session's.
# - POSIX message queues (mq_open): a queue lives in the IPC namespace's own
#   mqueue filesystem, reached without a path, so it outlives the session
#   (in the user mode the node's namespace, where /dev/mqueue, which the
#   sandbox's sweep of a uid's leftovers walks, is often not mounted: what a
#   session made stayed for the next session of its uid, and 256 of them, the
#   default fs.mqueue.queues_max, left every other user of the node without
#   (attacker review)). Landlock already keeps a user-mode session from
#   writing to one (it is beneath none of its places). Answered ENOSYS, as by
#   a kernel without POSIX message queues.
# - Setting or removing extended attributes (setxattr and its l-, f- forms,
#   removexattr and its): Landlock, which walls a user-mode session's writes
#   in (session-write-rule.ts), has no right for them, and the kernel lets a
#   uid set `user.` attributes on any file, or folder without the sticky bit,
#   it may write: a session kept a few KiB on each world-writable file or
#   folder outside its places, for the next session of its uid to read
#   (attacker review). Answered EOPNOTSUPP, as by a file system without
#   them, which `cp -a` and Python's `shutil.copy2` pass over. Linux 6.13's
#   setxattrat and removexattrat (463, 466) are refused in the x86_64
#   program only: Debian's libseccomp 2.5.4 knows neither name and takes no
#   number for another architecture than its own, so an aarch64 node on
#   Linux 6.13+ keeps them (the sandbox README says so).
#
# Anything else is allowed. A system call of another architecture (a 32-bit
# x86 program, x32) kills the process: its numbers are not the ones checked.
import errno
import os
import sys

import seccomp

CLONE_NEWUSER = 0x10000000
CLONE_FILES = 0x400
CLONE_THREAD = 0x10000
IPPROTO_MPTCP = 262
IPPROTO_SMC = 256
AF_SMC = 43
MAX_SHM_SEGMENT_BYTES = 64 * 1024
MAX_SEMAPHORES_PER_SET = 32

REFUSED = [
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "msgget",
]

XATTR_CHANGES = ["setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr"]
# setxattrat and removexattrat (Linux 6.13), by number: libseccomp 2.5.4 has no names for them.
XATTR_AT_CHANGES = [463, 466]

ARCHITECTURES = {"x86_64": seccomp.Arch.X86_64, "aarch64": seccomp.Arch.AARCH64}


def write_filter(arch, path):
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    if not f.exist_arch(arch):
        f.add_arch(arch)
        f.remove_arch(seccomp.Arch.NATIVE)
    f.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    refuse = seccomp.ERRNO(errno.EPERM)
    new_user = seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
    f.add_rule(refuse, "unshare", new_user)
    f.add_rule(refuse, "clone", new_user)
    f.add_rule(refuse, "unshare", seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_FILES, CLONE_FILES))
    own_table = seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_THREAD | CLONE_FILES, CLONE_THREAD)
    f.add_rule(refuse, "clone", own_table)
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "mq_open")
    # The protocol is an int: its low 32 bits alone are compared, as the kernel reads them.
    mptcp = seccomp.Arg(2, seccomp.MASKED_EQ, 0xFFFFFFFF, IPPROTO_MPTCP)
    f.add_rule(seccomp.ERRNO(errno.EPROTONOSUPPORT), "socket", mptcp)
    f.add_rule(refuse, "socket", seccomp.Arg(0, seccomp.MASKED_EQ, 0xFFFFFFFF, AF_SMC))
    f.add_rule(refuse, "socket", seccomp.Arg(2, seccomp.MASKED_EQ, 0xFFFFFFFF, IPPROTO_SMC))
    # EINVAL: what the kernel answers a size above kernel.shmmax or a count above SEMMSL.
    too_large = seccomp.ERRNO(errno.EINVAL)
    f.add_rule(too_large, "shmget", seccomp.Arg(1, seccomp.GT, MAX_SHM_SEGMENT_BYTES))
    f.add_rule(too_large, "semget", seccomp.Arg(1, seccomp.GT, MAX_SEMAPHORES_PER_SET))
    for name in REFUSED:
        f.add_rule(refuse, name)
    no_xattrs = seccomp.ERRNO(errno.EOPNOTSUPP)
    for name in XATTR_CHANGES:
        f.add_rule(no_xattrs, name)
    if arch == seccomp.Arch.X86_64:
        for number in XATTR_AT_CHANGES:
            f.add_rule(no_xattrs, number)
    with open(path, "wb") as out:
        f.export_bpf(out)


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for name, arch in ARCHITECTURES.items():
        write_filter(arch, os.path.join(folder, f"{name}.bpf"))


main()
