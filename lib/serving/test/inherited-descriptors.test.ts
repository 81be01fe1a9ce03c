// A service that starts programs an agent chose or fed (the sandbox, the orchestrator) closes what its starter left
// open before anything else: the programs it starts then inherit none of it (inherited-descriptors.ts).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { it } from "node:test";

const MODULE = new URL("../src/inherited-descriptors.ts", import.meta.url).href;

void it(
  "closes the descriptors a process inherited, and its children inherit none of them",
  { skip: process.platform !== "linux" && "Linux's /proc" },
  async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-inherited-"));
    try {
      const secret = path.join(dir, "starter-secret.txt");
      writeFileSync(secret, "what the starter had open");
      const leaked = openSync(secret, "r");
      // At fd 40 of the child, open past exec as a leak is.
      const child = spawn(
        process.execPath,
        [
          "--import",
          "tsx",
          "--input-type=module",
          "-e",
          `import { closeInheritedDescriptors } from ${JSON.stringify(MODULE)};
         import { execFileSync } from "node:child_process";
         const closed = closeInheritedDescriptors({ info() {} });
         const grandchild = execFileSync("ls", ["-l", "/proc/self/fd"], { encoding: "utf8" });
         process.stdout.write(JSON.stringify({ closed, grandchild }));`,
        ],
        { stdio: ["ignore", "pipe", "inherit", ...Array<"ignore">(37).fill("ignore"), leaked] },
      );
      closeSync(leaked);
      let out = "";
      child.stdout!.on("data", (chunk: Buffer) => (out += chunk.toString()));
      const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
      assert.equal(code, 0);
      const { closed, grandchild } = JSON.parse(out) as {
        closed: Array<{ fd: number; was: string }>;
        grandchild: string;
      };
      // Among them whatever this test's own starter leaked (a shell's job pipe, here and there).
      assert.deepEqual(
        closed.find(({ fd }) => fd === 40),
        { fd: 40, was: secret },
      );
      assert.ok(
        closed.every(({ fd }) => fd > 2),
        JSON.stringify(closed),
      );
      assert.doesNotMatch(grandchild, /starter-secret/, "the program it starts does not inherit it");
      assert.doesNotMatch(grandchild, / 40 -> /);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

// V8 opens its perf map and log without close-on-exec under `node --perf-basic-prof`: closed as inherited, their
// numbers were reused and V8's writes went into the sockets that got them, and the sandbox died at start (found
// running bench/control-plane-cost.ts --perf).
void it(
  "leaves open the files V8 keeps for a profiler, which are the process's own",
  { skip: process.platform !== "linux" && "Linux's /proc" },
  async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-v8-own-"));
    let pid: number | undefined;
    try {
      const child = spawn(
        process.execPath,
        [
          "--perf-basic-prof",
          // Its log goes to the working directory, this test's own; tsx is found from here.
          "--import",
          import.meta.resolve("tsx"),
          "--input-type=module",
          "-e",
          `import { closeInheritedDescriptors } from ${JSON.stringify(MODULE)};
         import { readlinkSync, readdirSync } from "node:fs";
         const own = readdirSync("/proc/self/fd").map((fd) => { try { return readlinkSync("/proc/self/fd/" + fd); } catch { return ""; } });
         const closed = closeInheritedDescriptors({ info() {} });
         process.stdout.write(JSON.stringify({ own, closed }));`,
        ],
        { cwd: dir, stdio: ["ignore", "pipe", "inherit"] },
      );
      pid = child.pid;
      let out = "";
      child.stdout!.on("data", (chunk: Buffer) => (out += chunk.toString()));
      const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
      assert.equal(code, 0);
      const { own, closed } = JSON.parse(out) as { own: string[]; closed: Array<{ fd: number; was: string }> };
      const v8Files = own.filter((file) => /\/perf-\d+\.map$|\/isolate-0x[0-9a-f]+-\d+-v8\.log$/.test(file));
      assert.equal(v8Files.length, 2, `V8 opened its perf map and log: ${JSON.stringify(own)}`);
      for (const file of v8Files)
        assert.ok(!closed.some(({ was }) => was === file), `${file} was closed: ${JSON.stringify(closed)}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
      // The perf map is always written to /tmp.
      if (pid !== undefined) rmSync(`/tmp/perf-${pid}.map`, { force: true });
    }
  },
);
