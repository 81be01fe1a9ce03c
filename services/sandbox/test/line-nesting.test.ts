// The nesting limit on harness lines (harness.proto, rule 8): the scanner on
// its own, then a real sandbox running harnesses that write lines at the
// limit, one past it, and 100,000 levels deep.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { LineNestingScanner, MAX_LINE_NESTING } from "../src/line-nesting.js";
import { runToEnd, scenarioStart, startTestSandbox, type SessionStream, type TestSandbox } from "./sandbox-test-kit.js";

const bytes = (text: string): Buffer => Buffer.from(text, "utf8");

/** The scanner's verdict on `text` fed in pieces of `piece` bytes: the line refused, or undefined. */
function scanInPieces(text: string, piece: number, limit = 3): number | undefined {
  const scanner = new LineNestingScanner({ limit });
  const all = bytes(text);
  for (let at = 0; at < all.length; at += piece) {
    const found = scanner.scan(all.subarray(at, at + piece));
    if (found !== undefined) return found.line;
  }
  return undefined;
}

void describe("the line nesting scanner", () => {
  void it("counts objects and arrays, the line's own object as level 1", () => {
    assert.equal(scanInPieces('{"a":[{"b":1}]}\n', 64), undefined, "3 levels");
    assert.equal(scanInPieces('{"a":[{"b":[1]}]}\n', 64), 1, "4 levels");
    assert.equal(scanInPieces('{"a":{}}\n{"b":{}}\n{"c":[[[1]]]}\n', 64), 3, "each line counts alone");
  });

  void it("ignores brackets inside strings, escaped quotes included", () => {
    assert.equal(scanInPieces('{"a":"[[[{{{","b":"\\"[[[[","c":"\\\\"}\n', 64), undefined);
    assert.equal(
      scanInPieces('{"a":"\\\\",[[[1]]]}\n', 64),
      1,
      "an escaped backslash ends its escape; the brackets after the string count",
    );
  });

  void it("gives the same verdict however the bytes are split, multi-byte characters included", () => {
    const text = '\n  \n{"é":"€[["}\n{"😀":[[{"x":"ü"}]]}\n';
    for (let piece = 1; piece <= bytes(text).length; piece++)
      assert.equal(scanInPieces(text, piece), 2, `pieces of ${piece} bytes`);
  });

  void it("numbers lines as the host does, blank lines skipped, and says where the refused line starts", () => {
    const scanner = new LineNestingScanner({ limit: 1 });
    assert.deepEqual(scanner.scan(bytes('{"a":1}\n\n   \n{"b":{}}\n')), { line: 2, limit: 1, lineStart: 13 });
  });

  void it("stays linear: a line 1,000,000 levels deep is refused at its first level past the limit", () => {
    const scanner = new LineNestingScanner({ limit: MAX_LINE_NESTING });
    const found = scanner.scan(bytes("[".repeat(1_000_000)));
    assert.deepEqual(found, { line: 1, limit: MAX_LINE_NESTING, lineStart: 0 });
  });
});

void describe("a sandbox enforcing the nesting limit", () => {
  let t: TestSandbox;
  before(async () => {
    t = await startTestSandbox({ isolation: "none", cancelGraceMs: 1_000 });
  });
  after(async () => {
    await t.close();
  });

  const toolCalls = (stream: SessionStream) =>
    stream.received.flatMap((m) =>
      m.message.case === "event" && m.message.value.event.case === "toolCall" ? [m.message.value.event.value] : [],
    );

  /** How deep the tool call's input nests, counting the input object as 1. */
  function inputDepth(value: unknown): number {
    if (value === null || typeof value !== "object") return 0;
    return 1 + Math.max(0, ...Object.values(value as Record<string, unknown>).map(inputDepth));
  }

  void it(`accepts a line exactly ${MAX_LINE_NESTING} levels deep and carries it to the client whole`, async () => {
    const stream = await runToEnd(t.client, scenarioStart({ mode: "nested", depth: MAX_LINE_NESTING }));
    const exited = stream.exited();
    assert.equal(exited.status, SessionStatus.COMPLETED, `${exited.errorCode}: ${exited.errorMessage}`);
    const [call] = toolCalls(stream);
    // The event and the tool call are levels 1 and 2: the input holds the other 30.
    assert.equal(inputDepth(call?.input), MAX_LINE_NESTING - 2);
  });

  const refusal = (line: number): string =>
    `stdout line ${line} is not a valid SessionEvent: it nests objects and arrays deeper than ${MAX_LINE_NESTING} levels, the protocol's limit (harness.proto, rule 8); the line was refused and the session stopped`;

  for (const piece of [undefined, 7]) {
    void it(`refuses a line ${MAX_LINE_NESTING + 1} levels deep with invalid_event${piece ? `, written ${piece} bytes at a time` : ""}`, async () => {
      const stream = await runToEnd(
        t.client,
        scenarioStart({ mode: "nested", depth: MAX_LINE_NESTING + 1, ...(piece ? { pieceBytes: piece } : {}) }),
      );
      const exited = stream.exited();
      assert.equal(exited.status, SessionStatus.FAILED);
      assert.equal(exited.errorCode, "invalid_event");
      // Line 1 is `started`; the tool call is line 2.
      assert.equal(exited.errorMessage, refusal(2));
      assert.deepEqual(toolCalls(stream), [], "the refused line is never an event");
      assert.equal(exited.result, undefined, "nothing after the refused line reaches the log either");
    });
  }

  void it("refuses a line 100,000 levels deep the same way, and runs the next session", async () => {
    const stream = await runToEnd(t.client, scenarioStart({ mode: "nested", depth: 100_000 }));
    const exited = stream.exited();
    assert.equal(exited.errorCode, "invalid_event");
    assert.equal(exited.errorMessage, refusal(2));
    const next = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    assert.equal(next.exited().status, SessionStatus.COMPLETED);
  });
});
