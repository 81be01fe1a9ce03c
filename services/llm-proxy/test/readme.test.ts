// The README's example runs as written, so it cannot rot.
import assert from "node:assert/strict";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

const packageDir = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

void describe("README", () => {
  void it("runs the example under Use it", async () => {
    const readme = readFileSync(path.join(packageDir, "README.md"), "utf8");
    const example = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    assert.ok(example, "the README has a ts example");
    // Written beside the package so its imports resolve as they would for a user.
    const file = path.join(packageDir, `readme-example-${process.pid}.tmp.ts`);
    writeFileSync(file, `${example}\nexport {};\n`);
    const printed: unknown[][] = [];
    const log = console.log;
    console.log = (...args: unknown[]) => printed.push(args);
    try {
      await import(pathToFileURL(file).href);
    } finally {
      console.log = log;
      rmSync(file, { force: true });
    }
    assert.deepEqual(printed[0], [[{ type: "text", text: "This is the scripted provider's reply." }]]);
    assert.equal(printed[1]?.[0], 1n);
    assert.ok((printed[1]?.[1] as number) > 0);
    assert.deepEqual(printed[1]?.[2], ["coder"]);
  });

  void it("shows the wire format interfaces as src/wire-formats/wire-format.ts declares them", () => {
    const readme = readFileSync(path.join(packageDir, "README.md"), "utf8");
    const section = readme.slice(readme.indexOf("### How to add a wire format"));
    const block = /\n( *)```ts\n([\s\S]*?)\n *```/.exec(section);
    assert.ok(block, "the section has a ts block");
    const indent = block[1]!.length;
    const shown = block[2]!
      .split("\n")
      .map((line) => line.slice(indent))
      .join("\n");
    const source = readFileSync(path.join(packageDir, "src", "wire-formats", "wire-format.ts"), "utf8");
    for (const declaration of shown.split("\n\n"))
      assert.ok(source.includes(declaration), `wire-format.ts no longer reads:\n${declaration}`);
  });
});
