// The splitter hands on whole events, each with its blank-line terminator,
// however the stream's bytes are cut into chunks: across a line ending, a
// terminator, or a character's UTF-8 bytes; with lines ended by \n or \r\n.
import assert from "node:assert/strict";
import { test } from "node:test";
import { SseEventSplitter, sseData } from "../src/sse-event-splitter.js";

/** A small deterministic generator, so a failure names a case that comes back. */
function seeded(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
    return state / 2_147_483_648;
  };
}

void test("splits a stream cut into chunks at random into the events it was made of", () => {
  const random = seeded(11);
  for (let round = 0; round < 500; round += 1) {
    // Most streams end their lines with \n alone; some with \r\n, in every event or in some.
    const crlf = random() < 0.3 ? 1 : random() < 0.2 ? 0.5 : 0;
    const events = Array.from({ length: 1 + Math.floor(random() * 8) }, (_, i) => {
      const eol = random() < crlf ? "\r\n" : "\n";
      const text = ["héllo", "😀", "a\\nb", `chunk ${i}`][Math.floor(random() * 4)]!;
      return `event: e${i}${eol}data: {"text":"${text}"}${eol}${eol}`;
    });
    const bytes = Buffer.from(events.join("") + 'data: {"cut', "utf8");
    const splitter = new SseEventSplitter();
    const out: string[] = [];
    for (let at = 0; at < bytes.length;) {
      const size = 1 + Math.floor(random() * 40);
      out.push(...splitter.push(bytes.subarray(at, at + size)));
      at += size;
    }
    assert.deepEqual(out, events, `round ${round}`);
    assert.equal(splitter.pending, 'data: {"cut');
  }
});

void test("reads an event's data whichever its line endings", () => {
  assert.equal(sseData('event: x\ndata: {"a":1}\n\n'), '{"a":1}');
  assert.equal(sseData('event: x\r\ndata: {"a":1}\r\n\r\n'), '{"a":1}');
  assert.equal(sseData("data: one\ndata: two\n\n"), "one\ntwo");
  assert.equal(sseData(": comment\n\n"), undefined);
});
