// The one test double for model providers: an HTTP server on loopback that
// answers the Anthropic Messages, OpenAI Chat Completions and OpenAI
// Responses APIs from a script, so the official SDKs and the Claude Code
// binary run offline.
import http from "node:http";
import type { AddressInfo } from "node:net";
import type {
  Script,
  ScriptedRequest,
  ScriptedTurn,
  ScriptedUsage,
  ScriptedWireFormat,
  TokensServed,
} from "./scripted-model-types.js";
import { OPENAI_RESPONSES } from "./scripted-model-responses.js";
import {
  ANTHROPIC_MESSAGES,
  anthropicError,
  estimateTokens,
  OPENAI_CHAT_COMPLETIONS,
  type AnswerInput,
  type ScriptedAnswerFormat,
} from "./scripted-model-wire.js";

export type {
  Script,
  ScriptedRequest,
  ScriptedToolCall,
  ScriptedTurn,
  ScriptedUsage,
  ScriptedWireFormat,
  TokensServed,
} from "./scripted-model-types.js";

/** Options of {@link startScriptedModel}. */
export interface ScriptedModelOptions {
  /** Turns consumed in order, or a function choosing the turn for each request. */
  turns: Script;
  /** Default 0 (a free port). */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /**
   * Decides which Messages/Chat requests are side calls, answered with
   * {@link SIDE_CALL_REPLY} without consuming a turn. Defaults to
   * {@link isClaudeCodeSideCall}. Pass `() => false` to script every call.
   */
  isSideCall?: (request: ScriptedRequest) => boolean;
  /**
   * Which paths it answers. `provider` (the default) plays a model provider:
   * any path ending in `/messages`, `/messages/count_tokens`,
   * `/chat/completions` or `/responses`, and `GET …/models`. `llm-proxy`
   * plays the LLM proxy a harness calls on the real stack, and answers
   * exactly its routes: `POST /{provider}/v1/messages`,
   * `/{provider}/v1/messages/count_tokens`, `/{provider}/v1/chat/completions`
   * and `/{provider}/v1/responses` (the `/v1` may be left out), for
   * the providers in `providers`; anything else is the proxy's 404.
   */
  routes?: "provider" | "llm-proxy";
  /** With `routes: "llm-proxy"`, the configured provider names; default `anthropic`, `openai`, `scripted` (the proxy's defaults). */
  providers?: readonly string[];
}

/** A running scripted model. */
export interface ScriptedModel {
  /** `http://127.0.0.1:port`. As a provider: an Anthropic base URL; `${url}/v1` is an OpenAI base URL. */
  readonly url: string;
  /**
   * The Anthropic base URL a harness is given: `url` as a provider,
   * `${url}/anthropic` as the LLM proxy (what the proxy mints). Calls go to
   * `POST {anthropicBaseUrl}/v1/messages`.
   */
  readonly anthropicBaseUrl: string;
  /**
   * The OpenAI base URL a harness is given, ending in `/v1` as OpenAI's SDKs
   * expect: `${url}/v1` as a provider, `${url}/openai/v1` as the LLM proxy.
   * Calls go to `POST {openaiBaseUrl}/chat/completions` or `POST {openaiBaseUrl}/responses`.
   */
  readonly openaiBaseUrl: string;
  /** Every call received, in order, side calls included. */
  readonly requests: ScriptedRequest[];
  /**
   * With `routes: "llm-proxy"`, the calls answered with the proxy's 404 (no
   * such route or provider), in order; they are not in `requests`.
   */
  readonly refused: Array<{ method: string; path: string }>;
  /** The usage reported so far (a cut stream counts what its first event reported). */
  readonly tokensServed: TokensServed;
  /** Turns consumed so far. */
  readonly turnsUsed: number;
  close(): Promise<void>;
}

/** What a side call gets. */
export const SIDE_CALL_REPLY = "OK";

/**
 * Which calls are not the agent's own turns. Observed with Claude Code
 * 2.1.332 (agent SDK 0.3.332) in SDK mode: one `POST /v1/messages?beta=true`
 * per turn, always with tools (12 by default), `max_tokens` 32000, streaming,
 * `user-agent: claude-cli/…` and `x-app: cli`; with or without
 * `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` it made no other call. Other
 * versions and modes make small side calls (a quota probe with
 * `max_tokens: 1`, small-model title or topic calls without tools and a few
 * hundred `max_tokens`), and `count_tokens` never consumes a turn. So the
 * rule: a Messages request is a side call when it asks for `max_tokens: 1`,
 * or comes from Claude Code (`user-agent` claude-cli or `x-app: cli`) with no
 * tools and `max_tokens` ≤ 1024. An agent run with no tools still asks for
 * its configured (large) `max_tokens`, so its turns stay scripted.
 */
export function isClaudeCodeSideCall(request: ScriptedRequest): boolean {
  if (request.wire !== "anthropic-messages") return false;
  const body = request.body as { tools?: unknown[]; max_tokens?: number; system?: unknown } | undefined;
  if (!body) return false;
  if (Array.isArray(body.tools) && body.tools.length > 0) return false;
  if (body.max_tokens === 1) return true;
  const fromClaudeCode =
    (request.headers["user-agent"] ?? "").includes("claude-cli") || (request.headers["x-app"] ?? "") === "cli";
  return fromClaudeCode && typeof body.max_tokens === "number" && body.max_tokens <= 1024;
}

/** An LLM proxy route's path after `/{provider}` and the optional `/v1`. */
export type ProxyOperation = "messages" | "messages/count_tokens" | "chat/completions" | "responses";

/** The APIs the scripted model serves (the LLM proxy's routes, services/llm-proxy/src/wire-formats/formats.ts), by the path each ends in. */
const ROUTES: ReadonlyArray<{ operation: ProxyOperation; wire: Exclude<ScriptedWireFormat, "models"> }> = [
  { operation: "messages", wire: "anthropic-messages" },
  { operation: "messages/count_tokens", wire: "anthropic-count-tokens" },
  { operation: "chat/completions", wire: "openai-chat-completions" },
  { operation: "responses", wire: "openai-responses" },
];

/** How each API that consumes turns answers them. */
const ANSWER_FORMATS: Readonly<
  Record<Exclude<ScriptedWireFormat, "models" | "anthropic-count-tokens">, ScriptedAnswerFormat>
> = {
  "anthropic-messages": ANTHROPIC_MESSAGES,
  "openai-chat-completions": OPENAI_CHAT_COMPLETIONS,
  "openai-responses": OPENAI_RESPONSES,
};

/** The LLM proxy's routes: provider, optional `/v1`, operation, optional trailing slash. */
const PROXY_ROUTE = new RegExp(`^/([a-z][a-z0-9-]*)(/v1)?/(${ROUTES.map((r) => r.operation).join("|")})/?$`);
const DEFAULT_PROXY_PROVIDERS = ["anthropic", "openai", "scripted"];
/** The routes as the LLM proxy names them in its 404. */
const PROXY_ROUTES_TEXT = (() => {
  const routes = ROUTES.map((r) => `/{provider}/v1/${r.operation}`);
  return `${routes.slice(0, -1).join(", ")} or ${routes.at(-1)}`;
})();

/** The provider and operation of an LLM proxy route (`/openai/v1/chat/completions` → openai, chat/completions), or undefined for a path it does not serve. */
export function proxyRouteOf(path: string): { provider: string; operation: ProxyOperation } | undefined {
  const match = PROXY_ROUTE.exec(path);
  if (match === null) return undefined;
  return { provider: match[1] ?? "", operation: match[3] as ProxyOperation };
}

/** The error shape the LLM proxy answers a path with: the API of the longest operation in it, else Anthropic's. */
function errorOf(path: string): (status: number, message: string) => unknown {
  let found: (typeof ROUTES)[number] | undefined;
  for (const route of ROUTES)
    if (path.includes(route.operation) && route.operation.length > (found?.operation.length ?? 0)) found = route;
  return found !== undefined && found.wire !== "anthropic-count-tokens"
    ? ANSWER_FORMATS[found.wire].error
    : anthropicError;
}

/** Where the LLM proxy would refuse the call, as its 404 status and body; undefined when it routes it. */
function proxyRefusal(
  path: string,
  method: string,
  providers: readonly string[],
): { status: number; body: unknown } | undefined {
  const error = errorOf(path);
  const match = method === "POST" ? PROXY_ROUTE.exec(path) : null;
  if (match === null)
    return {
      status: 404,
      body: error(404, `no route for ${method} ${path}; model calls are POST ${PROXY_ROUTES_TEXT}`),
    };
  if (!providers.includes(match[1] ?? ""))
    return { status: 404, body: error(404, `no provider named ${match[1]}; configured: ${providers.join(", ")}`) };
  return undefined;
}

function classify(path: string, method: string): ScriptedWireFormat | undefined {
  if (method === "GET" && /\/models(\/[^/]+)?$/.test(path)) return "models";
  if (method !== "POST") return undefined;
  // The longest operation a path ends in (`/messages/count_tokens` is not `/messages`).
  let found: (typeof ROUTES)[number] | undefined;
  for (const route of ROUTES)
    if (path.endsWith(`/${route.operation}`) && route.operation.length > (found?.operation.length ?? 0)) found = route;
  return found?.wire;
}

/**
 * How many answers of the model a request's conversation holds, read in its
 * API's shape (0 for a call that is not a turn). A script that answers from
 * the conversation (the LLM proxy's per-session scripts) gives a call retried
 * after a restart the turn it was on.
 */
export function modelTurnsIn(request: Pick<ScriptedRequest, "wire" | "body">): number {
  if (request.wire === "models" || request.wire === "anthropic-count-tokens") return 0;
  const body: unknown = request.body;
  return body !== null && typeof body === "object" && !Array.isArray(body)
    ? ANSWER_FORMATS[request.wire].modelTurns(body as Record<string, unknown>)
    : 0;
}

function inputTokens(body: Record<string, unknown> | undefined): number {
  if (!body) return 1;
  return estimateTokens({ system: body.system, messages: body.messages, tools: body.tools });
}

function sendJson(
  res: http.ServerResponse,
  status: number,
  value: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(value);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers });
  res.end(text);
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on("data", (c: Buffer) => parts.push(c));
    req.on("end", () => resolve(Buffer.concat(parts).toString("utf8")));
    req.on("error", reject);
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * Start a scripted model on loopback.
 *
 * @example
 * const model = await startScriptedModel({ turns: [{ text: "hello" }] });
 * const client = new Anthropic({ baseURL: model.url, apiKey: "x" });
 */
export async function startScriptedModel(options: ScriptedModelOptions): Promise<ScriptedModel> {
  const requests: ScriptedRequest[] = [];
  const refused: Array<{ method: string; path: string }> = [];
  const served: TokensServed = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0, total: 0 };
  const isSideCall = options.isSideCall ?? isClaudeCodeSideCall;
  let next = 0;
  let seq = 0;

  const count = (usage: Partial<ScriptedUsage>): void => {
    served.input += usage.input ?? 0;
    served.output += usage.output ?? 0;
    served.cacheRead += usage.cacheRead ?? 0;
    served.cacheWrite += usage.cacheWrite ?? 0;
    served.reasoning += usage.reasoning ?? 0;
    served.total = served.input + served.output + served.cacheRead + served.cacheWrite;
  };

  const chooseTurn = async (request: ScriptedRequest): Promise<ScriptedTurn | undefined> => {
    if (request.sideCall) return { text: SIDE_CALL_REPLY };
    if (typeof options.turns === "function") {
      request.turn = next++;
      return options.turns(request);
    }
    const turn = options.turns[next];
    if (turn === undefined) return undefined;
    request.turn = next++;
    return turn;
  };

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://scripted");
    const method = req.method ?? "GET";
    const raw = await readBody(req);
    let body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      body = undefined;
    }
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(", ") : value;
    }
    if (options.routes === "llm-proxy") {
      const refusal = proxyRefusal(url.pathname, method, options.providers ?? DEFAULT_PROXY_PROVIDERS);
      if (refusal !== undefined) {
        refused.push({ method, path: url.pathname });
        sendJson(res, refusal.status, refusal.body);
        return;
      }
    }
    // The proxy accepts a trailing slash; so does the scripted model.
    const wire = classify(url.pathname.length > 1 ? url.pathname.replace(/\/$/, "") : url.pathname, method);
    if (wire === undefined) {
      sendJson(
        res,
        404,
        anthropicError(
          404,
          `scripted model: no route for ${method} ${url.pathname}; it serves POST ${ROUTES.map((r) => `/v1/${r.operation}`).join(", ")}`,
        ),
      );
      return;
    }
    const request: ScriptedRequest = {
      method,
      path: url.pathname,
      headers,
      body,
      wire,
      stream: body?.stream === true,
      sideCall: false,
    };
    requests.push(request);

    if (wire === "models") {
      sendJson(res, 200, {
        object: "list",
        data: [
          { id: "scripted", object: "model", type: "model", created: 0, owned_by: "oz0", display_name: "Scripted" },
        ],
        has_more: false,
      });
      return;
    }
    if (wire === "anthropic-count-tokens") {
      sendJson(res, 200, { input_tokens: inputTokens(body) });
      return;
    }
    const format = ANSWER_FORMATS[wire];
    const errorBody = format.error;
    if (body === undefined || typeof body !== "object") {
      sendJson(res, 400, errorBody(400, "scripted model: the request body must be a JSON object"));
      return;
    }
    request.sideCall = isSideCall(request);
    const turn = await chooseTurn(request);
    if (turn === undefined) {
      // 400 rather than 5xx so clients do not retry: the test must see it at once.
      const total = Array.isArray(options.turns) ? options.turns.length : 0;
      sendJson(
        res,
        400,
        errorBody(
          400,
          `scripted model: the script has no turn left (all ${total} consumed); add a turn for request #${requests.length} to ${url.pathname}`,
        ),
      );
      return;
    }
    if (turn.delayMs) {
      let gone = false;
      res.once("close", () => (gone = !res.writableFinished));
      await sleep(turn.delayMs);
      // The caller went away while the model "thought": nothing was served, so nothing is counted
      // (a provider bills no answer it never sent). The proxy in front hangs up only on a stream
      // whose client left, and then meters nothing either.
      if (gone) return;
    }
    if (turn.fail) {
      const failBody =
        turn.fail.body ?? errorBody(turn.fail.status, turn.fail.message ?? `scripted failure ${turn.fail.status}`);
      sendJson(res, turn.fail.status, failBody, turn.fail.headers);
      return;
    }
    const answer: AnswerInput = {
      turn,
      usage: {
        input: turn.usage?.input ?? inputTokens(body),
        output: turn.usage?.output ?? estimateTokens((turn.text ?? "") + JSON.stringify(turn.toolCalls ?? [])),
        cacheRead: turn.usage?.cacheRead ?? 0,
        cacheWrite: turn.usage?.cacheWrite ?? 0,
        reasoning: turn.usage?.reasoning ?? 0,
      },
      model: typeof body.model === "string" ? body.model : "scripted",
      seq: ++seq,
    };
    if (!request.stream) {
      count(answer.usage);
      sendJson(res, 200, format.whole(answer));
      return;
    }
    const frames = format.stream(answer, body);
    // A cut stream reported only what came before the cut.
    count(turn.cutMidStream ? format.cutUsage(answer.usage) : answer.usage);
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
    for (const frame of frames) {
      if ("cut" in frame) {
        // Let the bytes so far reach the client before the connection dies.
        await new Promise<void>((resolve) => res.write("", () => resolve()));
        await sleep(5);
        res.socket?.destroy();
        return;
      }
      res.write(frame.data);
    }
    res.end();
  };

  const server = http.createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) sendJson(res, 500, anthropicError(500, `scripted model: ${(error as Error).message}`));
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, options.host ?? "127.0.0.1", () => resolve());
  });
  const address = server.address() as AddressInfo;
  const host = options.host ?? "127.0.0.1";
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${address.port}`;
  const asProxy = options.routes === "llm-proxy";
  return {
    url,
    anthropicBaseUrl: asProxy ? `${url}/anthropic` : url,
    openaiBaseUrl: asProxy ? `${url}/openai/v1` : `${url}/v1`,
    requests,
    refused,
    get tokensServed() {
      return { ...served };
    },
    get turnsUsed() {
      return next;
    },
    close() {
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
