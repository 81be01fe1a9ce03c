// The Linux system calls the host's perl wrappers make through perl's
// `syscall` builtin (Node calls neither, and no package here writes native
// code): their numbers differ per architecture and are known here for
// x86-64 and arm64, the one place the subreaper wrapper and the sandbox's
// landlock launcher, session-uid helpers and namespace limits read them.

/** The syscall numbers of prctl(2), close(2), setresuid(2), setresgid(2), capset(2), setns(2) and unshare(2). */
export interface LinuxSyscallNumbers {
  prctl: number;
  close: number;
  setresuid: number;
  setresgid: number;
  capset: number;
  setns: number;
  unshare: number;
}

/** The numbers by Node's `process.arch`. */
export const LINUX_SYSCALLS: Partial<Record<NodeJS.Architecture, LinuxSyscallNumbers>> = {
  x64: { prctl: 157, close: 3, setresuid: 117, setresgid: 119, capset: 126, setns: 308, unshare: 272 },
  arm64: { prctl: 167, close: 57, setresuid: 147, setresgid: 149, capset: 91, setns: 268, unshare: 97 },
};
