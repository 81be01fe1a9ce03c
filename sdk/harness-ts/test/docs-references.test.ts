// What the harness authors' docs name must exist: the files and folders they
// point to (links, and paths written as code), and the error codes a session
// can end with, as the host and the sandbox define them.
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { SessionRequestSchema, StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { DEFAULT_GRACE_MS, decodeEventLine, encodeLine } from "@oz0/harness/host";

const packageDir = fileURLToPath(new URL("..", import.meta.url));
const repoRoot = path.resolve(packageDir, "..", "..");
const read = (relative: string): string => readFileSync(path.join(repoRoot, relative), "utf8");

/** The codes of the host's `SessionErrorCode` union. */
function hostErrorCodes(): string[] {
  const source = read("sdk/harness-ts/src/host/host-errors.ts");
  const start = source.indexOf("export type SessionErrorCode =");
  // The union ends at its last member's semicolon (its comments hold semicolons too).
  const union = source.slice(start, source.indexOf('";\n', start) + 1);
  return [...union.matchAll(/\| "([a-z_]+)"/g)].map((m) => m[1] ?? "");
}

/** The codes the sandbox ends a session with itself (its limits, the exit after a result, its own failure). */
function sandboxErrorCodes(): string[] {
  const source = read("services/sandbox/src/sandbox-session.ts");
  const calls = [...source.matchAll(/#breakLimit\(\s*([^,]+),/g)].map((m) => m[1] ?? "");
  const fields = [...source.matchAll(/\b(?:code|errorCode): ([^,\n]+)/g)].map((m) => m[1] ?? "");
  return [
    ...new Set(
      [...calls, ...fields].flatMap((text) =>
        [...text.matchAll(/"([a-z]+(?:_[a-z]+)+|internal)"/g)].map((m) => m[1] ?? ""),
      ),
    ),
  ];
}

/** The two documents a harness author reads, relative to the repository. */
const DOCS = ["docs/harness-authors.md", "sdk/harness-ts/README.md"];

/** Paths the docs show as the author's own files (examples of a command), not files of this repository. */
const AUTHORS_FILES = new Set(["dist/main.js"]);

/**
 * What a document names as a file or folder of this repository: relative
 * links, and code spans like `services/sandbox/README.md` or `src/host/x.ts`
 * whose first folder exists beside the document or at the repository's root.
 */
function namedPaths(doc: string): string[] {
  const text = read(doc);
  const links = [...text.matchAll(/\]\((\.\.?\/[^)#\s]+|[\w-]+\/[^)#\s:]+)(#[^)]*)?\)/g)].map((m) => m[1] ?? "");
  const spans = [...text.matchAll(/`([A-Za-z][\w.-]*(?:\/[\w.-]+)+\/?)`/g)].map((m) => m[1] ?? "");
  const topFolders = (dir: string): string[] => readdirSync(path.join(repoRoot, dir));
  const known = new Set([...topFolders("."), ...topFolders(path.dirname(doc))]);
  const claimed = spans.filter((span) => known.has(span.split("/")[0] ?? "") && !AUTHORS_FILES.has(span));
  return [...new Set([...links, ...claimed])];
}

void describe("the harness docs", () => {
  void it("name only files and folders that exist", () => {
    for (const doc of DOCS) {
      const named = namedPaths(doc);
      assert.ok(named.length >= 5, `${doc}: found only ${named.join(", ")}`);
      for (const name of named) {
        const found = [path.dirname(doc), "."].some((dir) => existsSync(path.join(repoRoot, dir, name)));
        assert.ok(found, `${doc} names ${name}, which is neither beside it nor at the repository's root`);
      }
    }
  });

  void it("list every code a session can fail with, in the SDK README and the sandbox README alike", () => {
    const sdkReadme = read("sdk/harness-ts/README.md");
    const sandboxReadme = read("services/sandbox/README.md");
    const host = hostErrorCodes();
    const sandbox = sandboxErrorCodes();
    assert.ok(host.length >= 15 && host.includes("did_not_exit"), `host codes: ${host.join(", ")}`);
    assert.ok(
      sandbox.includes("nonzero_exit_after_result") && sandbox.includes("max_turns_exceeded"),
      `sandbox codes: ${sandbox.join(", ")}`,
    );
    for (const code of [...host, ...sandbox]) {
      assert.match(
        sdkReadme,
        new RegExp(`^\\| (\`[a-z_]+\` / )?\`${code}\`( / \`[a-z_]+\`)? \\|`, "m"),
        `sdk/harness-ts/README.md's tables lack ${code}`,
      );
      assert.match(
        sandboxReadme.slice(sandboxReadme.indexOf("### Errors")),
        new RegExp(`\`${code}\``),
        `services/sandbox/README.md's Errors lack ${code}`,
      );
    }
  });

  void it("give the grace a harness has to exit after its result as the host's and the sandbox's default", () => {
    const guide = read("docs/harness-authors.md");
    const [, seconds] = /the sandbox's `OZ0_CANCEL_GRACE_MS`, (\d+) s by\s+default/.exec(guide) ?? [];
    assert.ok(seconds !== undefined, "the guide no longer says how long a harness has to exit after its result");
    assert.equal(Number(seconds) * 1000, DEFAULT_GRACE_MS);
    const sandbox = read("services/sandbox/src/index.ts");
    const [, sandboxDefault] = /cancelGraceMs: config\.cancelGraceMs \?\? ([\d_]+)/.exec(sandbox) ?? [];
    assert.equal(
      Number(sandboxDefault?.replaceAll("_", "")),
      DEFAULT_GRACE_MS,
      "the sandbox's OZ0_CANCEL_GRACE_MS default",
    );
  });

  void it("say truly which names and enum spellings the runtime writes and reads", () => {
    // Written in lowerCamelCase: a harness reading limits.max_turns finds nothing.
    const request = encodeLine(
      SessionRequestSchema,
      create(SessionRequestSchema, { workingDir: "/w", limits: { maxTurns: 3 } }),
    );
    assert.match(request, /"workingDir":"\/w"/);
    assert.match(request, /"limits":\{"maxTurns":3\}/);
    assert.doesNotMatch(request, /working_dir|max_turns/);
    // Read in either form; an enum's number too; a stop reason by another spelling is refused.
    const event = (line: string) => {
      const decoded = decodeEventLine(line);
      assert.ok(decoded.ok, line);
      return decoded.message.event;
    };
    // (JSON text: the decoder leaves an absent input unset in one form and undefined in the other.)
    const snake = JSON.stringify(event('{"tool_call":{"call_id":"c1","tool":"t"}}'));
    assert.equal(snake, JSON.stringify(event('{"toolCall":{"callId":"c1","tool":"t"}}')));
    assert.match(snake, /"callId":"c1"/);
    const stopReason = (value: string) => {
      const got = event(`{"result":{"stopReason":${value}}}`);
      return got.case === "result" ? got.value.stopReason : undefined;
    };
    assert.equal(stopReason(`${StopReason.COMPLETED}`), StopReason.COMPLETED);
    const misspelt = decodeEventLine('{"result":{"stopReason":"completed"}}');
    assert.equal(misspelt.ok, false);
    assert.match(
      misspelt.ok ? "" : misspelt.detail,
      /"completed" is not a StopReason name; use one of STOP_REASON_COMPLETED/,
    );
  });
});
