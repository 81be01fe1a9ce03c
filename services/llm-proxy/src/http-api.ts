// The plain-HTTP side of the proxy: routes `/{provider}/v1/{route}` (the
// `/v1` may be left out) to the wire format that serves the route
// (wire-formats/formats.ts), checks who is calling, and hands model calls to
// runModelCall.
import type http from "node:http";
import type http2 from "node:http2";
import { BytesInFlight, bytesRefusalMessage, type BytesRefusal, type CallBytes } from "./bytes-in-flight.js";
import { ClientGone, type ClientGoneSignal } from "./client-gone.js";
import { forwardedHeaders } from "./forwarded-headers.js";
import type { KeyVault } from "./key-vault.js";
import { runModelCall, type ModelCallDeps, type ResolvedProvider } from "./model-call.js";
import { ProxyError } from "./proxy-error.js";
import type { TokenRecord } from "./proxy-store.js";
import type { RefusedCallsLog } from "./refused-calls-log.js";
import { JsonRequestBody, MAX_BODY_NESTING } from "./request-body.js";
import { createScrubber, writeHead, type Logger } from "@oz0/serving";
import type { SessionTokens } from "./session-tokens.js";
import { readAll, sendUpstream } from "./upstream-client.js";
import { traceModelCall } from "./tracing.js";
import { providerSideRefusal } from "./provider-side-features.js";
import { sendError, type ClientResponse } from "./wire-errors.js";
import { errorFormatOf, MODEL_ROUTES_TEXT, routeOf } from "./wire-formats/formats.js";
import type { WireFormat } from "./wire-formats/wire-format.js";

const NOTHING_PROVIDER_SIDE: ReadonlySet<string> = new Set();

export type ClientRequest = http.IncomingMessage | http2.Http2ServerRequest;

export interface HttpApiOptions extends ModelCallDeps {
  providers: Map<string, ResolvedProvider>;
  tokens: SessionTokens;
  vault: KeyVault;
  logger: Logger;
  /** Largest request body accepted (OZ0_MAX_MODEL_REQUEST_BYTES). Default 32 MiB. */
  maxBodyBytes?: number;
  /** The budgets of bytes calls hold at once, per session and in all. Default: bytes-in-flight.ts's. */
  bytesInFlight?: BytesInFlight;
  /** Where calls refused before they became calls are logged, a few lines a minute a session. */
  refusedCalls: RefusedCallsLog;
  /** What requests may ask the provider to do on its own side (OZ0_PROVIDER_SIDE_FEATURES). Default: nothing. */
  providerSideFeatures?: ReadonlySet<string>;
}

interface Route {
  provider: string;
  format: WireFormat;
  upstreamPath: string;
}

/**
 * A request target of a path and perhaps a query in characters URL parsing leaves as they are
 * (no dot segment or percent escape it could resolve, no backslash, fragment or character it
 * would escape): what SDKs send. Read as it is, with no URL object per call; any other target
 * goes through URL's rules.
 */
const PLAIN_TARGET = /^\/(?!\/)[\w\-~/?=&+,;:@!$*()]*$/;

function route(rawUrl: string): Route | undefined {
  let pathname = rawUrl;
  let search = "";
  if (PLAIN_TARGET.test(rawUrl)) {
    const query = rawUrl.indexOf("?");
    if (query >= 0) {
      pathname = rawUrl.slice(0, query);
      // As URL reads it: a `?` with nothing after it is no query.
      if (query < rawUrl.length - 1) search = rawUrl.slice(query);
    }
  } else {
    const url = new URL(rawUrl, "http://proxy");
    pathname = url.pathname;
    search = url.search;
  }
  const found = routeOf(pathname);
  return (
    found && { provider: found.provider, format: found.format, upstreamPath: `/v1/${found.format.route}${search}` }
  );
}

function header(req: ClientRequest, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * Every credential the request carries (x-api-key, Authorization with or
 * without its scheme), so no forwarded header passes one on. Values shorter
 * than a token cannot be one and would only drop headers by chance.
 */
function presentedCredentials(req: ClientRequest): string[] {
  const authorization = header(req, "authorization")?.trim();
  const afterScheme = /^\S+\s+(.+)$/.exec(authorization ?? "")?.[1]?.trim();
  return [header(req, "x-api-key")?.trim(), authorization, afterScheme].filter(
    (value): value is string => value !== undefined && value.length >= 8,
  );
}

/** The caller's token record, or a ProxyError naming what is wrong. */
async function authenticate(req: ClientRequest, tokens: SessionTokens): Promise<TokenRecord> {
  const bearer = /^Bearer\s+(.+)$/i.exec(header(req, "authorization") ?? "")?.[1]?.trim();
  const token = header(req, "x-api-key")?.trim() || bearer;
  if (!token)
    throw new ProxyError(
      "unauthenticated",
      "missing session token: send the token from LlmEndpoint.token as x-api-key or Authorization: Bearer",
    );
  const record = await tokens.use(token);
  if (!record)
    throw new ProxyError(
      "unauthenticated",
      "the session token is unknown or revoked (a token dies with its session); ask the orchestrator for a new session",
    );
  for (const [name, expected] of [
    ["Oz0-Job", record.job],
    ["Oz0-Agent", record.agent],
  ] as const) {
    const value = header(req, name.toLowerCase());
    if (value === undefined || value === "")
      throw new ProxyError(
        "unauthenticated",
        `missing ${name} header: send the headers from LlmEndpoint.headers on every call`,
      );
    if (value !== expected)
      throw new ProxyError(
        "permission_denied",
        `the ${name} header does not match the session token; send the ${name} value the session was started with`,
      );
  }
  return record;
}

/**
 * The fields a call's budget reads besides its model: whether it streams, its output limit under each
 * API's name, and how many answers it asks for. Each is read as JSON types it; a provider that reads
 * JSON leniently (pydantic's default, behind many compatible servers) takes `"n": "20"` for 20 answers
 * and `"max_tokens": "100000"` for that limit, llama.cpp's server takes a limit of -1 for none, and a
 * parser that keeps a repeated name's first copy takes the copy the proxy did not read.
 */
const BUDGET_FIELDS: Readonly<Record<string, "flag" | "count">> = {
  stream: "flag",
  max_tokens: "count",
  max_completion_tokens: "count",
  max_output_tokens: "count",
  n: "count",
};

/** Why a request's budget fields cannot be read as every provider would read them, or undefined when they can. */
function unreadableBudgetField(body: JsonRequestBody): string | undefined {
  for (const [name, kind] of Object.entries(BUDGET_FIELDS)) {
    const values = body.values(name);
    if (values.length === 0) continue;
    if (values.length > 1) return `the request names ${name} more than once; name it once`;
    const [value] = values;
    if (value === null) continue;
    if (kind === "flag" ? typeof value === "boolean" : Number.isInteger(value) && (value as number) > 0) continue;
    const got = value === undefined ? "a value that is not JSON" : JSON.stringify(value);
    return kind === "flag"
      ? `${name} must be true or false (or null); got ${got}`
      : `${name} must be a whole number above 0 (or null); got ${got}`;
  }
  return undefined;
}

const noDelaySockets = new WeakSet<object>();

/** Whether a response is done with: sent, or its client gone (an HTTP/2 response has no `destroyed` of its own). */
function responseClosed(res: ClientResponse): boolean {
  return "stream" in res ? res.stream.destroyed || res.stream.closed : res.destroyed || res.closed;
}

export function createHttpApi(options: HttpApiOptions): (req: ClientRequest, res: ClientResponse) => void {
  const maxBodyBytes = options.maxBodyBytes ?? 32 * 1024 * 1024;
  const bytesInFlight = options.bytesInFlight ?? new BytesInFlight();

  const handle = async (req: ClientRequest, res: ClientResponse): Promise<void> => {
    const found = req.method === "POST" ? route(req.url ?? "/") : undefined;
    if (!found) {
      const path = (req.url ?? "").split("?")[0];
      sendError(res, {
        format: errorFormatOf(path ?? ""),
        status: 404,
        type: "not_found_error",
        message: `no route for ${req.method} ${path}; model calls are POST ${MODEL_ROUTES_TEXT}`,
      });
      return;
    }
    const { format } = found;
    const provider = options.providers.get(found.provider);
    if (!provider) {
      sendError(res, {
        format,
        status: 404,
        type: "not_found_error",
        message: `no provider named ${found.provider}; configured: ${[...options.providers.keys()].join(", ")}`,
      });
      return;
    }
    let token: TokenRecord;
    try {
      token = await authenticate(req, options.tokens);
    } catch (error) {
      // Anything but a refusal (the store cannot be reached) is the proxy's own failure: a 500 below.
      if (!(error instanceof ProxyError)) throw error;
      const denied = error.code === "permission_denied";
      sendError(res, {
        format,
        status: denied ? 403 : 401,
        type: denied ? "permission_error" : "authentication_error",
        message: error.message,
      });
      return;
    }
    // Whatever happens to the call, its bodies are given back to the budgets when it ends: once
    // its answer has left for the client, or the client is gone. Not when the handler returns:
    // an answer a client does not read stays in the proxy's buffers, and a session could hold
    // any number of them.
    // The response's `close` says both, on HTTP/1.1 and HTTP/2 alike. A client may be gone before
    // this line (while its token was checked), and then `close` has fired already: the handler's
    // end gives back what it took. So does anything it takes after the close (the rest of an answer
    // it meters).
    const held = bytesInFlight.call(token.session);
    res.once("close", () => held.release());
    try {
      await serveCall({ req, res, found, provider, token, held });
    } finally {
      if (responseClosed(res)) held.release();
    }
  };

  /** A caller's model call, once it is known who is calling: read its body, then run it. */
  const serveCall = async (args: {
    req: ClientRequest;
    res: ClientResponse;
    found: Route;
    provider: ResolvedProvider;
    token: TokenRecord;
    held: CallBytes;
  }): Promise<void> => {
    const { req, res, found, provider, token, held } = args;
    const { format } = found;
    // A body that says it is too large is refused before a byte of it is read; so is one its
    // session cannot hold now (its declared size is reserved in the session's budget at once:
    // declaring sizes and sending nothing blocks only the declaring session's own calls).
    const declared = Number(header(req, "content-length"));
    const refused: { by?: BytesRefusal } = {};
    if (declared > 0 && declared <= maxBodyBytes) refused.by = held.reserve(declared);
    let rawBody: Buffer | undefined;
    if (!refused.by && !(declared > maxBodyBytes)) {
      // The bytes that arrive count against the process's budget (and the session's past what
      // was declared): the read stops at the chunk that would cross one.
      rawBody = await readAll(req as NodeJS.ReadableStream, maxBodyBytes, (bytes) => {
        refused.by = held.arrived(bytes);
        return refused.by === undefined;
      });
    }
    if (refused.by) {
      refuseOverBytesInFlight({ res, format, refusal: refused.by, provider: found.provider, token, declared });
      return;
    }
    if (rawBody === undefined) {
      const size = declared > maxBodyBytes ? declared : undefined;
      options.refusedCalls.refused({
        code: "MODEL_REQUEST_TOO_LARGE",
        session: token.session,
        reason: "over the size limit",
        fields: { provider: found.provider, size, limit: maxBodyBytes, job: token.job },
        message: "a model call's request body over the size limit was refused",
      });
      // HTTP/1.1 cannot end one request: the connection closes after the answer rather than read the rest.
      if (!("stream" in res)) res.setHeader("connection", "close");
      sendError(res, {
        format,
        status: 413,
        type: "invalid_request_error",
        message: `the request body${size === undefined ? "" : ` (${size} bytes)`} is larger than this proxy takes (${maxBodyBytes} bytes); send less in one call (a shorter context, fewer or smaller images), or raise OZ0_MAX_MODEL_REQUEST_BYTES on the LLM proxy`,
      });
      return;
    }
    const body = JsonRequestBody.parse(rawBody);
    if (!body) {
      sendError(res, {
        format,
        status: 400,
        type: "invalid_request_error",
        message: `the request body must be a JSON object, nesting at most ${MAX_BODY_NESTING} levels`,
      });
      return;
    }
    // Priced by the one the proxy reads, answered by whichever copy the provider keeps: refused, not guessed.
    if (body.values("model").length > 1) {
      sendError(res, {
        format,
        status: 400,
        type: "invalid_request_error",
        message: "the request names its model more than once; name it once",
      });
      return;
    }
    const unreadable = unreadableBudgetField(body);
    if (unreadable) {
      sendError(res, { format, status: 400, type: "invalid_request_error", message: unreadable });
      return;
    }
    // Agents name models `provider/model`; a harness may pass that on as it is.
    const model = body.field("model");
    const bareModel =
      typeof model === "string" && model.startsWith(`${found.provider}/`)
        ? model.slice(found.provider.length + 1)
        : undefined;
    const clientGone = new ClientGone();
    res.on("close", () => {
      if (!res.writableEnded) clientGone.abort();
    });
    const headers = forwardedHeaders({ incoming: req.headers, format, credentials: presentedCredentials(req) });
    const read = format.calls?.readRequest(body, req.headers);
    // A request passed through unmetered (count_tokens) may still have the provider act on its own side.
    const providerSideUses = read ? read.providerSide : (format.providerSide?.(body, req.headers) ?? []);
    const providerSide = providerSideRefusal(providerSideUses, options.providerSideFeatures ?? NOTHING_PROVIDER_SIDE);
    if (providerSide) {
      options.refusedCalls.refused({
        code: "MODEL_REQUEST_PROVIDER_SIDE",
        session: token.session,
        reason: "asks the provider to act on its own side",
        fields: {
          provider: found.provider,
          features: [...new Set(providerSideUses.map((use) => use.feature))],
          job: token.job,
        },
        message: "a model call asking the provider to act on its own side was refused",
      });
      sendError(res, { format, status: 403, type: "permission_error", message: providerSide });
      return;
    }
    if (!read) {
      const sendBody = body.bytes(bareModel !== undefined ? { model: bareModel } : undefined);
      await passThrough({
        options,
        res,
        format,
        provider,
        headers,
        rawBody: sendBody,
        upstreamPath: found.upstreamPath,
        signal: clientGone,
        held,
      });
      return;
    }
    const request = bareModel !== undefined ? { ...read, model: bareModel } : read;
    const upstreamFields = bareModel !== undefined ? { ...read.upstreamFields, model: bareModel } : read.upstreamFields;
    const sendBody = body.bytes(upstreamFields);
    await traceModelCall(
      {
        incoming: req.headers,
        sessionTrace: token.traceparent,
        outgoing: headers,
        provider: found.provider,
        operation: "chat",
        model: request.model,
        upstream: provider.baseUrl,
      },
      () =>
        runModelCall(options, {
          res,
          clientGone,
          provider,
          format,
          calls: format.calls!,
          request,
          upstreamPath: found.upstreamPath,
          forwardHeaders: headers,
          token,
          rawBody,
          sendBody,
          sendBodyWith: (fields) => body.bytes({ ...upstreamFields, ...fields }),
          held,
        }),
    );
  };

  /**
   * A call over a budget of bytes in flight: refused in its API's error shape, naming the
   * budget and its setting; not metered (it never became a model call) and spending no budget,
   * like a body over the size limit. 429 when its session holds too much: the caller's own
   * calls are in the way, and retrying after they end passes. 503 when the process does:
   * the proxy is full, not the caller at fault, and another replica may have room. Both
   * carry retry-after, which the SDKs honour; a call larger than the budget itself never
   * fits, so it is 413 as a body over the size limit is.
   */
  const refuseOverBytesInFlight = (args: {
    res: ClientResponse;
    format: WireFormat;
    refusal: BytesRefusal;
    provider: string;
    token: TokenRecord;
    declared: number;
  }): void => {
    const { res, refusal, token } = args;
    options.refusedCalls.refused({
      code: "MODEL_REQUEST_OVER_BYTES_IN_FLIGHT",
      session: token.session,
      reason: `the ${refusal.scope}'s budget${refusal.never ? ", never to fit" : ""}`,
      fields: {
        provider: args.provider,
        scope: refusal.scope,
        limit: refusal.limit,
        job: token.job,
        ...(args.declared >= 0 ? { size: args.declared } : {}),
      },
      message: "a model call was refused: the bytes calls hold at once would pass a budget",
    });
    // HTTP/1.1 cannot end one request: the connection closes after the answer rather than read the rest.
    if (!("stream" in res)) res.setHeader("connection", "close");
    const message = bytesRefusalMessage(refusal, "this request body");
    if (refusal.never) sendError(res, { format: args.format, status: 413, type: "invalid_request_error", message });
    else
      sendError(res, {
        format: args.format,
        status: refusal.scope === "session" ? 429 : 503,
        type: refusal.scope === "session" ? "rate_limit_error" : "overloaded_error",
        message,
        retryAfterSeconds: 1,
      });
  };

  return (req, res) => {
    // The shared port's sockets come from a plain net.Server, which leaves
    // Nagle's algorithm on: streamed events would wait for delayed ACKs (~40 ms).
    // Once per connection: a syscall per request costs more than it seems on a busy machine.
    const socket = req.socket as (object & { setNoDelay?: (noDelay: boolean) => void }) | undefined;
    if (!("stream" in res) && socket?.setNoDelay && !noDelaySockets.has(socket)) {
      noDelaySockets.add(socket);
      socket.setNoDelay(true);
    }
    handle(req, res).catch((error: unknown) => {
      const code = error instanceof ProxyError ? error.code : "internal";
      options.logger.error(
        { code, message: error instanceof ProxyError ? error.message : (error as Error).message },
        "model call failed in the proxy",
      );
      sendError(res, {
        format: errorFormatOf(req.url ?? ""),
        status: 500,
        type: "api_error",
        message: error instanceof ProxyError ? error.message : "the proxy failed on this call; its log has the details",
      });
    });
  };
}

/** A format without metered calls (count_tokens, which is free): one pass-through with the provider key. */
async function passThrough(args: {
  options: HttpApiOptions;
  res: ClientResponse;
  format: WireFormat;
  provider: ResolvedProvider;
  headers: Record<string, string>;
  rawBody: Buffer;
  upstreamPath: string;
  signal: ClientGoneSignal;
  held: CallBytes;
}): Promise<void> {
  const { options, res, format, provider } = args;
  const secretName = provider.config.keySecret;
  const key = secretName ? await options.vault.use(secretName) : undefined;
  const secret = key?.value;
  // A provider may echo the key anywhere: its content type is scrubbed as a model call's headers are (model-call.ts).
  const scrubber = key?.scrubber ?? createScrubber(undefined);
  if (secretName && secret === undefined) {
    sendError(res, {
      format,
      status: 503,
      type: "api_error",
      message: `provider ${provider.config.name} has no API key: set the secret ${secretName} (oz0 secret set ${secretName})`,
    });
    return;
  }
  const headers = { ...args.headers };
  if (secret !== undefined) {
    if ((provider.config.auth ?? format.keyHeader) === "x-api-key") headers["x-api-key"] = secret;
    else headers.authorization = `Bearer ${secret}`;
  }
  let status: number;
  let text: string;
  let contentType: string;
  // A provider that never answers must not hold the call (its request's bytes in flight, a connection) for ever:
  // it gets the time a model call's attempt gets for its whole answer.
  const timeoutMs = options.retry.attemptTimeoutMs;
  let timedOut = false;
  try {
    const call = sendUpstream({ baseUrl: provider.baseUrl, path: args.upstreamPath, headers, body: args.rawBody });
    args.signal.addEventListener("abort", call.abort);
    const deadline = setTimeout(() => {
      timedOut = true;
      call.abort();
    }, timeoutMs);
    try {
      const upstream = await call.response;
      status = upstream.statusCode ?? 502;
      contentType = scrubber.text(String(upstream.headers["content-type"] ?? "application/json"));
      // The answer counts against the budgets of bytes in flight as it arrives, as a model call's does.
      const refused: { by?: BytesRefusal } = {};
      const answer = await readAll(upstream, Number.POSITIVE_INFINITY, (bytes) => {
        refused.by = args.held.takeAnswer(bytes);
        return refused.by === undefined;
      });
      if (answer === undefined) {
        call.abort();
        sendError(res, {
          format,
          status: 502,
          type: "api_error",
          message: bytesRefusalMessage(refused.by!, "the provider's answer"),
        });
        return;
      }
      text = scrubber.json(answer.toString("utf8"));
    } finally {
      clearTimeout(deadline);
      args.signal.removeEventListener("abort", call.abort);
    }
  } catch (error) {
    if (timedOut) {
      sendError(res, {
        format,
        status: 504,
        type: "api_error",
        message: `provider ${provider.config.name} did not answer within ${timeoutMs} ms; try again later, or raise OZ0_UPSTREAM_TIMEOUT_MS on the LLM proxy`,
      });
      return;
    }
    sendError(res, {
      format,
      status: 502,
      type: "api_error",
      message: `provider ${provider.config.name} could not be reached (${(error as { code?: string }).code ?? "error"}); try again later`,
    });
    return;
  }
  if (res.headersSent) return;
  writeHead(res, status, { "content-type": contentType, "content-length": String(Buffer.byteLength(text)) });
  res.end(text);
}
