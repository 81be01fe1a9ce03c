// The README's TypeScript quick start, copied into a new folder outside the
// repository as a user would, passes the conformance kit as written.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";

const packageDir = fileURLToPath(new URL("..", import.meta.url));
const repoRoot = path.resolve(packageDir, "..", "..");

/** The README's quick-start section: its harness and the command that runs the kit on it. */
async function quickStart(): Promise<{ harness: string; fileName: string; command: string[] }> {
  const readme = await readFile(path.join(packageDir, "README.md"), "utf8");
  const section = readme.slice(
    readme.indexOf("## Harness side: quick start"),
    readme.indexOf("What the session gives you"),
  );
  const harness = /```ts\n([\s\S]*?)```/.exec(section)?.[1];
  const shell = /```sh\n([\s\S]*?)```/.exec(section)?.[1];
  assert.ok(harness && shell, "the quick start has no ts or sh block");
  const line = shell.split("\n").find((l) => l.startsWith("npx oz0-harness-conformance "));
  assert.ok(line, "the quick start does not say how to run the kit");
  const fileName = /save the harness below as ([\w.-]+\.ts)/.exec(shell)?.[1];
  assert.ok(fileName, "the quick start does not name the file to save the harness in");
  return { harness, fileName, command: line.split(" ").slice(1) };
}

void describe("the README's quick start", () => {
  void it("passes the kit when copied into a new folder, with @oz0/harness installed there, run by node as it is", async () => {
    const { harness, fileName, command } = await quickStart();
    const dir = await mkdtemp(path.join(tmpdir(), "oz0-quick-start-"));
    try {
      assert.ok(!path.relative(repoRoot, dir).match(/^[^.]/), "the folder must lie outside the repository");
      await writeFile(path.join(dir, fileName), harness);
      await writeFile(
        path.join(dir, "package.json"),
        JSON.stringify({ name: "my-harness", version: "1.0.0", type: "module" }, null, 2),
      );
      // What `npm install /path/to/sdk/harness-ts` leaves: a link to the package, and its commands.
      await mkdir(path.join(dir, "node_modules", "@oz0"), { recursive: true });
      await mkdir(path.join(dir, "node_modules", ".bin"));
      await symlink(packageDir, path.join(dir, "node_modules", "@oz0", "harness"));
      await symlink(
        "../@oz0/harness/bin/oz0-harness-conformance.js",
        path.join(dir, "node_modules", ".bin", "oz0-harness-conformance"),
      );

      // `npx oz0-harness-conformance …` runs the package's command from node_modules/.bin.
      const [program, ...args] = command;
      const { code, stdout, stderr } = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
        execFile(
          path.join(dir, "node_modules", ".bin", program ?? ""),
          ["--grace-ms", "5000", ...args],
          { cwd: dir },
          (error, out, err) =>
            resolve({
              code: error === null ? 0 : typeof error.code === "number" ? error.code : 1,
              stdout: out,
              stderr: err,
            }),
        ),
      );
      assert.equal(code, 0, `${stdout}\n${stderr}`);
      for (const id of [
        "handshake",
        "protocol-version",
        "text",
        "model-headers",
        "unknown-fields",
        "cancellation",
        "cancelled-result",
        "processes",
        "usage",
      ]) {
        assert.match(stdout, new RegExp(`^PASS {2}${id}:`, "m"), stdout);
      }
      assert.match(stdout, /^N\/A {3}permission-allow: .* — no tools the kit can drive: the harness offers no tools;/m);
      assert.match(stdout, /^\d+ passed, 0 failed$/m);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
