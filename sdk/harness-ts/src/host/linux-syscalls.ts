// The Linux system calls the host's perl wrappers make through perl's
// `syscall` builtin (Node calls neither, and no package here writes native
// code): their numbers differ per architecture and are known here for
// x86-64 and arm64, the one place both the subreaper wrapper and the
// sandbox's landlock launcher read them.

/** prctl(2)'s and close(2)'s syscall numbers by Node's `process.arch`. */
export const LINUX_SYSCALLS: Partial<Record<NodeJS.Architecture, { prctl: number; close: number }>> = {
  x64: { prctl: 157, close: 3 },
  arm64: { prctl: 167, close: 57 },
};
