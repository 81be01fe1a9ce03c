// The README's example runs as written and prints what the README says.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";

const PACKAGE = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");

void it("README example prints what the README says", async () => {
  const readme = readFileSync(path.join(PACKAGE, "README.md"), "utf8");
  const code = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
  const expected = /prints\n\n```\n([\s\S]*?)```/.exec(readme)?.[1];
  assert(code !== undefined && expected !== undefined, "the README has an example and its output");
  // Inside the package, so `@oz0/sandbox` resolves through the workspace.
  const dir = mkdtempSync(path.join(PACKAGE, ".readme-example-"));
  try {
    const file = path.join(dir, "example.ts");
    writeFileSync(file, code);
    const output = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        ["--import", "tsx", file],
        { cwd: dir, env: { ...process.env, OZ0_LOG_LEVEL: "error" } },
        (error, stdout, stderr) => {
          if (error !== null) reject(new Error(`the example failed: ${stderr}`));
          else resolve(stdout);
        },
      );
    });
    assert.equal(output, expected);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
