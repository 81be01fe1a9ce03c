// Descriptors a service inherited open past exec from whatever started it (a shell's `3>file`, a CI runner's pipe,
// a supervisor's socket) pass on to every program it starts: Node opens its own with O_CLOEXEC and leaves inherited
// ones as they are, and child_process hands them on. The sandbox's `none`-mode harnesses and the orchestrator's
// command hooks run code an agent chose or fed; what its starter had open is not theirs to read or write. So a
// service that starts such programs closes, before it starts any, every descriptor above stderr that is not
// close-on-exec: none of its own is (its logger writes to stderr), and none is one it was meant to use (it takes
// none by number).
import { closeSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import type { Logger } from "./logger.js";

/** O_CLOEXEC in /proc/<pid>/fdinfo's octal `flags` (asm-generic/fcntl.h). */
const O_CLOEXEC = 0o2000000;

/** A descriptor closed, and what it was open on (for the start-up log). */
export interface ClosedDescriptor {
  fd: number;
  was: string;
}

/**
 * The files V8 itself opens without close-on-exec when a profiler asks (`node --perf-basic-prof`: the map of
 * JavaScript frames for Linux perf, /tmp/perf-<pid>.map, and its log, isolate-0x…-<pid>-v8.log): this process's
 * own, named after it, not inherited. Closed, V8 went on writing to their numbers once they were reused, and the
 * service died at start (a socket it wrote a perf map line to).
 */
function v8Own(target: string): boolean {
  const name = target.slice(target.lastIndexOf("/") + 1);
  return name === `perf-${process.pid}.map` || new RegExp(`^isolate-0x[0-9a-f]+-${process.pid}-v8\\.log$`).test(name);
}

/**
 * Closes the descriptors this process inherited open past exec, says which in `logger`'s log, and returns them. None
 * where /proc cannot be read.
 */
export function closeInheritedDescriptors(logger: Logger): ClosedDescriptor[] {
  let names: string[];
  try {
    names = readdirSync("/proc/self/fd");
  } catch {
    return [];
  }
  const closed: ClosedDescriptor[] = [];
  for (const name of names) {
    const fd = Number(name);
    if (!(fd > 2)) continue;
    let flags: number;
    try {
      flags = Number.parseInt(
        /^flags:\s+([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"))?.[1] ?? "",
        8,
      );
    } catch {
      continue; // the listing's own descriptor, closed by now
    }
    if (Number.isNaN(flags) || (flags & O_CLOEXEC) !== 0) continue;
    const was = readlinkSync(`/proc/self/fd/${fd}`);
    if (v8Own(was)) continue;
    closeSync(fd);
    closed.push({ fd, was });
  }
  if (closed.length > 0)
    logger.info(
      { closed },
      "closed the descriptors it inherited open, which would have reached the programs it starts",
    );
  return closed;
}
