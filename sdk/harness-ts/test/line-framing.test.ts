import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { LineSplitter } from "@oz0/harness/host";

function split(chunks: Buffer[], maxLineBytes = 1024): { lines: string[]; oversized: number[] } {
  const lines: string[] = [];
  const oversized: number[] = [];
  const splitter = new LineSplitter({
    maxLineBytes,
    onLine: (l) => lines.push(l),
    onOversizedLine: (n) => oversized.push(n),
  });
  for (const chunk of chunks) splitter.push(chunk);
  splitter.end();
  return { lines, oversized };
}

void describe("LineSplitter", () => {
  void it("splits whole lines inside one chunk", () => {
    assert.deepEqual(split([Buffer.from('{"a":1}\n{"b":2}\n')]).lines, ['{"a":1}', '{"b":2}']);
  });

  void it("joins lines across chunks, at every possible cut, multi-byte characters included", () => {
    const text = '{"t":"héllo ✨ 🎉 日本"}\n{"u":"ß"}\r\n';
    const bytes = Buffer.from(text);
    for (let cut = 0; cut <= bytes.length; cut++) {
      for (let cut2 = cut; cut2 <= bytes.length; cut2 += 3) {
        const { lines } = split([bytes.subarray(0, cut), bytes.subarray(cut, cut2), bytes.subarray(cut2)]);
        assert.deepEqual(lines, ['{"t":"héllo ✨ 🎉 日本"}', '{"u":"ß"}'], `cuts at ${cut}, ${cut2}`);
      }
    }
  });

  void it("reports an oversized line once, skips it, and goes on with the next", () => {
    const long = "x".repeat(50);
    const { lines, oversized } = split(
      [Buffer.from(`ok\n${long.slice(0, 20)}`), Buffer.from(long.slice(20)), Buffer.from("\nafter\n")],
      10,
    );
    assert.deepEqual(lines, ["ok", "after"]);
    assert.equal(oversized.length, 1);
  });

  void it("reports an oversized line found whole in one chunk", () => {
    const { lines, oversized } = split([Buffer.from(`${"y".repeat(11)}\nz\n`)], 10);
    assert.deepEqual(lines, ["z"]);
    assert.deepEqual(oversized, [11]);
  });

  void it("skips blank lines and delivers an unterminated last line at the end", () => {
    assert.deepEqual(split([Buffer.from("\n\n  \na\nb")]).lines, ["a", "b"]);
  });
});
