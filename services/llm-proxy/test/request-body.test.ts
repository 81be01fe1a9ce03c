// The request body is read a top-level field at a time without parsing the
// rest: each field must read as JSON.parse reads it, a rewrite must change
// only the fields it names, and a body whose top level is not one object must
// be refused, whatever the strings and nesting inside.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { JsonRequestBody, MAX_BODY_NESTING } from "../src/request-body.js";

/** A small deterministic generator: the same documents every run. */
function generator(seed: number): () => number {
  return () => (seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648) / 2_147_483_648;
}

const TRICKY_STRINGS = [
  '"',
  "\\",
  '\\"',
  '\\\\"',
  "}",
  "]",
  "{[",
  "a\nb",
  "\u00e9\u{1F600}",
  "",
  "\u0000",
  " , : ",
  '{"model":"x"}',
];

function value(random: () => number, depth: number): unknown {
  const kind = Math.floor(random() * (depth > 3 ? 4 : 6));
  switch (kind) {
    case 0:
      return TRICKY_STRINGS[Math.floor(random() * TRICKY_STRINGS.length)]! + "x".repeat(Math.floor(random() * 40));
    case 1:
      return Math.floor(random() * 1e6) / (random() < 0.5 ? 1 : 7);
    case 2:
      return random() < 0.5;
    case 3:
      return null;
    case 4:
      return Array.from({ length: Math.floor(random() * 4) }, () => value(random, depth + 1));
    default: {
      const out: Record<string, unknown> = {};
      for (let i = Math.floor(random() * 4); i > 0; i -= 1)
        out[`${TRICKY_STRINGS[Math.floor(random() * TRICKY_STRINGS.length)]}${i}`] = value(random, depth + 1);
      return out;
    }
  }
}

void describe("a request body read a field at a time", () => {
  void it("reads every top-level field as JSON.parse does, over generated documents with tricky strings", () => {
    const random = generator(11);
    for (let n = 0; n < 2_000; n += 1) {
      const document: Record<string, unknown> = {
        model: value(random, 0),
        stream: random() < 0.5,
        messages: value(random, 1),
      };
      for (let i = Math.floor(random() * 4); i > 0; i -= 1) document[`k${i}${TRICKY_STRINGS[i]}`] = value(random, 1);
      // Half of them with white space between the tokens, as JSON allows.
      const text = JSON.stringify(
        document,
        null,
        random() < 0.5 ? undefined : " \t\n ".slice(0, 1 + Math.floor(random() * 3)),
      );
      const body = JsonRequestBody.parse(Buffer.from(text));
      assert.ok(body, text);
      const parsed = JSON.parse(text) as Record<string, unknown>;
      for (const key of [...Object.keys(parsed), "absent"])
        assert.deepEqual(body.field(key), parsed[key], `${key} of ${text}`);
    }
  });

  void it("rewrites only the fields it names, in their places, and adds new ones last", () => {
    const text =
      ' { "model" : "openai/gpt-5", "messages": [{"role":"user","content":"a \\"quoted\\" }"}], "stream":true } ';
    const body = JsonRequestBody.parse(Buffer.from(text))!;
    assert.equal(body.bytes().toString(), text, "unchanged: the client's bytes");
    const rewritten = body.bytes({ model: "gpt-5", stream_options: { include_usage: true } }).toString();
    assert.equal(
      rewritten,
      ' { "model" : "gpt-5", "messages": [{"role":"user","content":"a \\"quoted\\" }"}], "stream":true,"stream_options":{"include_usage":true} } ',
    );
    assert.deepEqual(JSON.parse(rewritten), {
      ...JSON.parse(text),
      model: "gpt-5",
      stream_options: { include_usage: true },
    });
    assert.equal(JsonRequestBody.parse(Buffer.from("{}"))!.bytes({ a: 1 }).toString(), '{"a":1}');
    // A repeated name: JSON.parse reads the last; every copy is rewritten.
    const repeated = JsonRequestBody.parse(Buffer.from('{"model":"a","model":"b"}'))!;
    assert.equal(repeated.field("model"), "b");
    assert.equal(repeated.bytes({ model: "c" }).toString(), '{"model":"c","model":"c"}');
  });

  void it("takes a member out with its comma, keeping every other byte", () => {
    const without = (text: string): string => JsonRequestBody.parse(Buffer.from(text))!.without("usage").toString();
    assert.equal(
      without('{"id":"c","choices":[{"delta":{"usage":1}}], "usage" : null,"x":1}'),
      '{"id":"c","choices":[{"delta":{"usage":1}}],"x":1}',
    );
    assert.equal(without('{ "usage":null, "id":"c" }'), '{ "id":"c" }');
    assert.equal(without('{"a":1,"usage":null}'), '{"a":1}');
    assert.equal(without('{"usage":1,"usage":2,"a":3,"usage":4}'), '{"a":3}');
    assert.equal(without('{"usage":null}'), "{}");
    const text = '{"id":"c","usage":{"total":3}}';
    assert.equal(JsonRequestBody.parse(Buffer.from(text))!.without("other").toString(), text);
    const random = generator(5);
    for (let n = 0; n < 500; n += 1) {
      const document: Record<string, unknown> = { usage: value(random, 1), a: value(random, 1), b: value(random, 1) };
      const shuffled = Object.fromEntries(Object.entries(document).sort(() => random() - 0.5));
      const { usage: _usage, ...rest } = shuffled;
      const out = JsonRequestBody.parse(Buffer.from(JSON.stringify(shuffled, null, n % 2 ? " " : undefined)))!
        .without("usage")
        .toString();
      assert.deepEqual(JSON.parse(out), rest);
    }
  });

  void it("refuses a body whose top level is not one JSON object", () => {
    for (const text of [
      "",
      "[]",
      '"x"',
      "null",
      "{",
      '{"a":1',
      '{"a" 1}',
      '{"a":1,}',
      '{"a":1}{}',
      '{"a":"unterminated}',
      '{"a":[1,2}',
      "{a:1}",
      '{"a":}',
      "\uFEFF{}",
    ]) {
      assert.equal(JsonRequestBody.parse(Buffer.from(text)), undefined, JSON.stringify(text));
    }
    // Deeper down it is the provider's to judge; a field that is not JSON reads as absent.
    const body = JsonRequestBody.parse(Buffer.from('{"model":"m","max_tokens":1x,"messages":[{"role":tru}]}'))!;
    assert.equal(body.field("model"), "m");
    assert.equal(body.field("max_tokens"), undefined);
  });

  void it("reads every copy of a repeated field, and the objects in an array field one at a time", () => {
    const body = JsonRequestBody.parse(
      Buffer.from(
        '{"tools":[{"type":"a","x":[1,{"type":"nested"}]}, 7 ,"s",{"type":"b","type":"c"},{"type":"d"}],' +
          '"n":1,"n":2,"tools":[{}],"tools":"not an array"}',
      ),
    )!;
    assert.deepEqual(body.values("n"), [1, 2]);
    assert.equal(body.field("n"), 2, "as JSON.parse reads it: the last");
    assert.deepEqual(body.values("absent"), []);
    const tools = body.objectsIn("tools");
    // Objects only, from both arrays; each read a field at a time, every copy of its own repeats kept.
    assert.deepEqual(
      tools.map((tool) => tool?.values("type")),
      [["a"], ["b", "c"], ["d"], []],
    );
    assert.deepEqual(body.objectsIn("n"), []);
    // An element that cannot be read as an object is there, as undefined.
    const broken = JsonRequestBody.parse(Buffer.from('{"tools":[{"type":"a",}]}'))!;
    assert.deepEqual(broken.objectsIn("tools"), [undefined]);
  });

  void it("searches a field's bytes, and tells an escaped ASCII letter from the escapes encoders write", () => {
    const body = (text: string) => JsonRequestBody.parse(Buffer.from(`{"m":${text},"n":"url\\"x"}`))!;
    assert.equal(body('[{"url":1}]').mentions("m", 'url"'), true);
    assert.equal(body('["a \\"url\\" b"]').mentions("m", 'url"'), false, "a quoted word in a text is escaped");
    assert.equal(body("[1]").mentions("n", "url"), true);
    assert.equal(body("[1]").mentions("m", "url"), false, "only that field's bytes");
    // A terminal's ESC, text beyond ASCII, Go's <, > and &: what encoders escape.
    const usual = body('["\\u001b[0m caf\\u00e9 \\u003c\\u003e\\u0026 \\n\\t"]');
    assert.equal(usual.escapesAscii("m"), false);
    assert.equal(body('[{"\\u0075rl":1}]').escapesAscii("m"), true);
    assert.equal(body('[{"type":"ur\\u006C"}]').escapesAscii("m"), true);
    // Past a few hundred other escapes the rest is searched another way, and still found.
    const many = `["${"\\u001b".repeat(1000)}", {"\\u0075rl":1}]`;
    assert.equal(body(many).escapesAscii("m"), true);
    assert.equal(body(`["${"\\u001b".repeat(1000)}"]`).escapesAscii("m"), false);
  });

  void it(`nests objects and arrays up to ${MAX_BODY_NESTING} levels, and refuses deeper in fixed memory`, () => {
    const nested = (levels: number, open = "[", close = "]") =>
      Buffer.from(`{"model":"m","messages":${open.repeat(levels)}1${close.repeat(levels)}}`);
    // The body's own object is not a level of a member's value; objects and arrays count alike.
    assert.equal(JsonRequestBody.parse(nested(MAX_BODY_NESTING))?.field("model"), "m");
    assert.equal(JsonRequestBody.parse(nested(MAX_BODY_NESTING, '{"a":', "}"))?.field("model"), "m");
    assert.equal(JsonRequestBody.parse(nested(MAX_BODY_NESTING + 1)), undefined);
    assert.equal(JsonRequestBody.parse(nested(MAX_BODY_NESTING + 1, '{"a":', "}")), undefined);
    // An attacker's 32 MiB of `[`: once 33 million stack entries (650 MB, and the process); now refused at level 1025.
    const before = process.memoryUsage().heapUsed;
    assert.equal(JsonRequestBody.parse(Buffer.from(`{"m":${"[".repeat(32 * 1024 * 1024)}`)), undefined);
    assert.ok(process.memoryUsage().heapUsed - before < 64 * 1024 * 1024, "the scan held no stack of its own size");
  });
});
