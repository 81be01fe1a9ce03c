// docs/harness-authors.md shows real sessions: its transcripts are what the
// kit exchanges with the SDK's fake harness now, ids, ports, paths and tokens
// aside. OZ0_UPDATE_DOCS=1 rewrites them from a fresh run.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { formatTranscript, runConformance } from "@oz0/harness/testing";

const packageDir = fileURLToPath(new URL("..", import.meta.url));
const guide = path.resolve(packageDir, "..", "..", "docs", "harness-authors.md");
const fakeHarness = [process.execPath, path.join(packageDir, "bin", "oz0-fake-harness.js")];
const BLOCK = /<!-- transcript: ([a-z-]+) -->\n```text\n([\s\S]*?)```/g;

/** What changes from run to run: temporary folders, ports, tokens, session ids. */
function normalise(transcript: string): string {
  return transcript
    .trim()
    .replace(/[^"\s]*\/oz0-conformance-([a-z-]+)-[A-Za-z0-9]{6}/g, "TMP/oz0-conformance-$1-XXXXXX")
    .replace(/127\.0\.0\.1:\d+/g, "127.0.0.1:PORT")
    .replace(/oz0st_[0-9a-f]{24}/g, "oz0st_TOKEN")
    .replace(/"sessionId":"session-([a-z-]+)-[0-9a-f]{8}"/g, '"sessionId":"session-$1-ID"');
}

void describe("docs/harness-authors.md", () => {
  void it("shows transcripts a fresh kit run reproduces", async () => {
    const text = await readFile(guide, "utf8");
    const blocks = [...text.matchAll(BLOCK)].map((m) => ({ id: m[1] ?? "", shown: m[2] ?? "" }));
    assert.deepEqual(
      blocks.map((b) => b.id),
      ["tool-events", "runtime-tool-permission"],
    );
    const report = await runConformance({
      command: fakeHarness,
      only: blocks.map((b) => b.id),
      transcripts: true,
      graceMs: 5000,
    });
    assert.equal(report.ok, true, JSON.stringify(report.cases.map((c) => c.message)));
    const fresh = new Map(report.cases.map((c) => [c.id, formatTranscript(c.transcripts?.[0]?.lines ?? [])]));
    if (process.env.OZ0_UPDATE_DOCS === "1") {
      await writeFile(
        guide,
        text.replace(
          BLOCK,
          (_m, id: string) => `<!-- transcript: ${id} -->\n\`\`\`text\n${fresh.get(id) ?? ""}\n\`\`\``,
        ),
      );
      return;
    }
    for (const { id, shown } of blocks) {
      assert.equal(
        normalise(shown),
        normalise(fresh.get(id) ?? ""),
        `the ${id} transcript in docs/harness-authors.md is stale: run this test with OZ0_UPDATE_DOCS=1`,
      );
    }
  });

  void it("links only to files that exist", async () => {
    const text = await readFile(guide, "utf8");
    const links = [...text.matchAll(/\]\((\.\.?\/[^)#]+)(#[^)]*)?\)/g)].map((m) => m[1] ?? "");
    assert.ok(links.length >= 5);
    for (const link of links)
      assert.ok(
        existsSync(path.resolve(path.dirname(guide), link)),
        `docs/harness-authors.md links to ${link}, which does not exist`,
      );
  });
});
