// Stream events rewritten in the provider's own text instead of parsed and
// written again: a delta's held-back text spliced into its member, and the
// `usage: null` the proxy asked OpenAI for cut from a chunk. Each must give
// what writing the parsed event again gives, and must decline (so the caller
// writes the event again) whenever the text could put it in the wrong place.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { JsonRequestBody } from "../src/request-body.js";
import { OpenAiStreamMeter } from "../src/wire-formats/openai-chat-completions.js";
import { parseEvent, withStringMember } from "../src/wire-formats/sse-json.js";

const event = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`;

void describe("withStringMember", () => {
  void it("splices the new text into the one member that holds the old", () => {
    const before = event({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: 'say "hi"\n' } });
    const after = withStringMember(before, "text", 'say "hi"\n', 'say "h');
    assert.equal(
      after,
      event({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: 'say "h' } }),
    );
  });

  void it("declines when the member is there twice, or not as JSON.stringify writes it", () => {
    const twice = event({ choices: [{ delta: { content: "abc" } }, { delta: { content: "abc" } }] });
    assert.equal(withStringMember(twice, "content", "abc", "ab"), undefined);
    const escaped = 'data: {"delta":{"text":"\\u0061bc"}}\n\n';
    assert.equal(parseEvent(escaped)?.delta && (parseEvent(escaped)!.delta as { text: string }).text, "abc");
    assert.equal(withStringMember(escaped, "text", "abc", "ab"), undefined);
  });

  void it("never takes a member name out of a string for a member", () => {
    // The key `x\"text` ends in what looks like `"text":"abc"` but is inside a string.
    const decoy = 'data: {"x\\"text":"abc","delta":{"text":"abd"}}\n\n';
    assert.equal(withStringMember(decoy, "text", "abc", "ab"), undefined);
  });
});

void describe("OpenAiStreamMeter, a client that did not ask for usage", () => {
  const chunk = { id: "c1", object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: "hi" } }] };

  void it("cuts the usage: null OpenAI writes last, and the scrubber reads the cut chunk", () => {
    const meter = new OpenAiStreamMeter({ clientWantsUsage: false });
    const forwarded = meter.onEvent(event({ ...chunk, usage: null }));
    assert.equal(forwarded, event(chunk));
    assert.deepEqual(parseEvent(forwarded!), chunk);
  });

  void it("takes usage out wherever it is when it is not last", () => {
    const meter = new OpenAiStreamMeter({ clientWantsUsage: false });
    const forwarded = meter.onEvent(event({ id: "c1", usage: null, choices: chunk.choices }));
    assert.equal(forwarded, event({ id: "c1", choices: chunk.choices }));
  });

  void it("cuts it before OpenAI's obfuscation padding too, keeping the padding, without parsing the chunk again", (t) => {
    const reparse = t.mock.method(JsonRequestBody, "parse");
    const meter = new OpenAiStreamMeter({ clientWantsUsage: false });
    const text = `data: ${JSON.stringify({ ...chunk, usage: null }).slice(0, -1)},"obfuscation":"Zx8q"}\n\n`;
    const forwarded = meter.onEvent(text);
    assert.equal(forwarded, event({ ...chunk, obfuscation: "Zx8q" }));
    assert.deepEqual(parseEvent(forwarded!), { ...chunk, obfuscation: "Zx8q" });
    assert.equal(reparse.mock.callCount(), 0);
  });

  void it("gives the same chunk by the slow path when what follows usage is not plain string members", (t) => {
    const reparse = t.mock.method(JsonRequestBody, "parse");
    // Each declines the cut in the text (a value with an escape, a number, a nested usage first) and
    // takes usage out of the parsed chunk: the same answer either way.
    const tails: Record<string, unknown>[] = [
      { obfuscation: 'a"b' },
      { obfuscation: "a\\b" },
      { n: 1 },
      { obfuscation: "x", more: { usage: null } },
    ];
    for (const tail of tails) {
      const meter = new OpenAiStreamMeter({ clientWantsUsage: false });
      assert.equal(meter.onEvent(event({ ...chunk, usage: null, ...tail })), event({ ...chunk, ...tail }));
    }
    const nestedFirst = { id: "c1", extra: { usage: null }, choices: chunk.choices };
    const meter = new OpenAiStreamMeter({ clientWantsUsage: false });
    assert.equal(
      meter.onEvent(event({ ...nestedFirst, usage: null, obfuscation: "x" })),
      event({ ...nestedFirst, obfuscation: "x" }),
    );
    assert.equal(reparse.mock.callCount(), tails.length + 1, "each took the slow path");
  });

  void it("leaves a nested usage alone", () => {
    const meter = new OpenAiStreamMeter({ clientWantsUsage: false });
    const nested = { ...chunk, extra: { usage: null } };
    assert.equal(meter.onEvent(event(nested)), event(nested));
  });
});
