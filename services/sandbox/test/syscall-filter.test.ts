// The seccomp programs checked in are what syscall-filter/generate.py writes with libseccomp: a change to the
// rules that was not written out (or a program changed by hand) fails here. What the programs refuse is tried
// from inside a session in isolation.test.ts.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";
import { sessionSyscallFilter, syscallFilterFields } from "../src/syscall-filter.js";

const FOLDER = fileURLToPath(new URL("../syscall-filter/", import.meta.url));

void it("the checked-in programs are what generate.py writes with libseccomp", () => {
  const out = mkdtempSync(path.join(os.tmpdir(), "oz0-seccomp-"));
  try {
    try {
      execFileSync("/usr/bin/python3", [path.join(FOLDER, "generate.py"), out], { stdio: ["ignore", "pipe", "pipe"] });
    } catch (error) {
      const stderr = String((error as { stderr?: unknown }).stderr ?? "");
      throw new Error(
        `generate.py failed (${stderr.trim()}); it needs Debian's python3-seccomp: bash tools/test-infra/bin/install-system-packages.sh`,
        { cause: error },
      );
    }
    const written = readdirSync(out).sort();
    assert.deepEqual(written, ["aarch64.bpf", "x86_64.bpf"]);
    for (const name of written)
      assert.ok(
        readFileSync(path.join(out, name)).equals(readFileSync(path.join(FOLDER, name))),
        `${name} differs from what generate.py writes: run /usr/bin/python3 services/sandbox/syscall-filter/generate.py and commit the programs`,
      );
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});

void it("picks the program of the node's architecture, and says why there is none elsewhere", () => {
  assert.equal(sessionSyscallFilter("x64").program, path.join(FOLDER, "x86_64.bpf"));
  assert.equal(sessionSyscallFilter("arm64").program, path.join(FOLDER, "aarch64.bpf"));
  const riscv = sessionSyscallFilter("riscv64");
  assert.equal(riscv.program, undefined);
  assert.match(riscv.reason ?? "", /no filter program for riscv64/);
  assert.deepEqual(syscallFilterFields(riscv), { syscallFilter: "off", syscallFilterReason: riscv.reason });
});
