// Runs every `ts` block of the README against the source, so the README never
// rots; `// prints: X` lines must appear in the block's output, in order.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

const readme = readFileSync(fileURLToPath(new URL("../README.md", import.meta.url)), "utf8");
const source = pathToFileURL(fileURLToPath(new URL("../src/index.ts", import.meta.url))).href;
const dir = mkdtempSync(path.join(tmpdir(), "oz0-graph-readme-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] as string);

void test("the README has runnable examples", () => {
  assert.ok(blocks.length >= 4);
});

blocks.forEach((code, i) => {
  void test(`README block ${i + 1} runs and prints what it says`, async () => {
    // .mts: the temporary folder has no package.json saying "type": "module".
    const file = path.join(dir, `block-${i + 1}.mts`);
    writeFileSync(file, code.replaceAll('from "@oz0/graph"', `from ${JSON.stringify(source)}`));
    // Imported in this process (tsx is loaded already), with console.log captured.
    const printed: string[] = [];
    const log = console.log;
    console.log = (...args: unknown[]) => printed.push(args.map(String).join(" "));
    try {
      await import(pathToFileURL(file).href);
    } finally {
      console.log = log;
    }
    const stdout = printed.join("\n");
    const expected = [...code.matchAll(/^\/\/ prints: (.*)$/gm)].map((m) => m[1] as string);
    const lines = stdout.split("\n");
    let at = 0;
    for (const want of expected) {
      const found = lines.indexOf(want, at);
      assert.ok(found >= 0, `block ${i + 1} should print "${want}"; it printed:\n${stdout}`);
      at = found + 1;
    }
  });
});
