// One logical model call: reserve budget, count it against its session's
// limit of model calls, try up to five attempts upstream,
// forward the answer (streamed event by event, metered as it goes), meter
// every attempt and the call, settle the budget with what the caller received.
// The answer's last bytes wait until the call's records are stored, so once a
// client has its answer, GetUsage at any replica counts the call.
import type http from "node:http";
import { once } from "node:events";
import { performance } from "node:perf_hooks";
import { bytesRefusalMessage, type BytesRefusal, type CallBytes } from "./bytes-in-flight.js";
import type { ClientGoneSignal } from "./client-gone.js";
import type { KeyVault } from "./key-vault.js";
import { newOperationId, type Metering } from "./metering.js";
import { costOf, priceOf, type ModelPrice, type ProviderConfig } from "./provider-config.js";
import { ProxyError } from "./proxy-error.js";
import {
  ZERO_USAGE,
  type AttemptRecord,
  type BudgetStore,
  type CallIdentity,
  type CallRecord,
  type CountedCall,
  type ModelCallStore,
  type Outcome,
  type PendingAttempt,
  type Reservation,
  type TokenRecord,
  type TokenUsage,
} from "./proxy-store.js";
import { isRetryableStatus, retryDelayMs, type RetryPolicy } from "./retry-policy.js";
import { createScrubber, writeHead, type Logger, type SecretScrubber } from "@oz0/serving";
import { SseEventSplitter } from "./sse-event-splitter.js";
import { recordAnswer } from "./tracing.js";
import { discard, nextChunk, readAll, sendUpstream } from "./upstream-client.js";
import { abortResponse, sendError, type ClientResponse } from "./wire-errors.js";
import { estimateTokens } from "./wire-formats/token-counts.js";
import type {
  ModelCalls,
  ProxyErrorType,
  ResponseIdentity,
  StreamMeterReading,
  StreamScrubber,
  WireFormat,
  WireRequest,
} from "./wire-formats/wire-format.js";

/** A provider with the URL its calls go to (a scripted provider's local URL included). */
export interface ResolvedProvider {
  config: ProviderConfig;
  baseUrl: string;
}

export interface ModelCallDeps {
  vault: KeyVault;
  /** Session budgets: the store's reservations. */
  budgets: Pick<BudgetStore, "reserveBudget">;
  /** Sessions' counts of model calls, held to their tokens' limits. */
  modelCalls: Pick<ModelCallStore, "countModelCall">;
  metering: Metering;
  retry: RetryPolicy;
  logger: Logger;
  /** Output tokens reserved for a call that gives no max_tokens. */
  defaultMaxOutputTokens: number;
}

export interface ModelCallInput {
  res: ClientResponse;
  /** Fires when the client goes away. */
  clientGone: ClientGoneSignal;
  provider: ResolvedProvider;
  /** The route's API, and its metered side. */
  format: WireFormat;
  calls: ModelCalls;
  /** What the format read of the request (the model without a `provider/` prefix). */
  request: WireRequest;
  /** Upstream path and query, for example `/v1/messages?beta=true`. */
  upstreamPath: string;
  /** Headers to forward (already stripped of the token and hop-by-hop headers). */
  forwardHeaders: Record<string, string>;
  token: TokenRecord;
  /** The body as the client sent it: budgets and estimates count its bytes. */
  rawBody: Buffer;
  /** The body to send upstream. */
  sendBody: Buffer;
  /** The body to send upstream with more top-level fields set (a stream's output bounded to its hold). */
  sendBodyWith(fields: Readonly<Record<string, unknown>>): Buffer;
  /** The call's account of bytes in flight: its request already taken, each answer taken as it arrives. */
  held: CallBytes;
}

/** The scrubber of a provider without a key: nothing to scrub. */
const NO_SCRUBBER = createScrubber(undefined);

/** Headers a provider's answer must not pass on as they are. */
const DROP_RESPONSE_HEADERS = new Set([
  "connection",
  "keep-alive",
  "transfer-encoding",
  "content-length",
  "content-encoding",
  "upgrade",
  "proxy-connection",
  // HTTP/1.1 hop-by-hop headers HTTP/2 forbids: Node's HTTP/2 answer throws on them.
  "te",
  "http2-settings",
]);

function responseHeaders(
  upstream: http.IncomingMessage,
  operationId: string,
  scrubber: SecretScrubber,
): Record<string, string | string[]> {
  const scrub = scrubber.text;
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(upstream.headers)) {
    if (value === undefined || DROP_RESPONSE_HEADERS.has(name)) continue;
    out[name] = Array.isArray(value) ? value.map(scrub) : scrub(value);
  }
  out["oz0-operation-id"] = operationId;
  return out;
}

interface AttemptSummary {
  status: number;
  outcome: Outcome;
  usage: TokenUsage;
  estimated: boolean;
  /** Since the attempt started. */
  ttftMs?: number;
  /** True once any byte of this attempt's answer reached the client. */
  delivered: boolean;
  /** A failure that another attempt may fix (only when nothing was delivered). */
  retryable: boolean;
  /** Held back until the loop decides whether to retry. */
  pendingError?: { status: number; headers: Record<string, string | string[]>; body: Buffer };
  retryHeaders?: http.IncomingHttpHeaders;
  /** For the log and the last-resort 502 message; never holds a secret. */
  errorCode?: string;
  /** Sends what is left of a delivered answer (its end), once the call is metered. */
  finish?: () => void;
  /** Why the answer ended, as its API says (for the trace). */
  finishReason?: string | undefined;
  /** The answer's id and model, as the provider named them (for the trace). */
  response?: ResponseIdentity;
}

const sleep = (ms: number, signal: ClientGoneSignal): Promise<void> =>
  new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done);
  });

export async function runModelCall(deps: ModelCallDeps, input: ModelCallInput): Promise<void> {
  const { res, provider, format, request, token, rawBody } = input;
  const operationId = newOperationId();
  const startedAt = new Date();
  const callStart = performance.now();
  const model = request.model ?? "";
  const stream = request.stream;
  const price = priceOf(provider.config, model);
  const estimatedInput = estimateTokens(rawBody.length);
  const common: CallIdentity = {
    operationId,
    job: token.job,
    agent: token.agent,
    session: token.session,
    provider: provider.config.name,
    model,
    wire: format.name,
    stream,
  };

  // The most output the call may be billed: its limit, else for each answer asked for the most the model
  // writes (its price table's maxOutput), else the default bound.
  const worstOutputTokens =
    request.maxOutputTokens ?? (price?.maxOutput ?? deps.defaultMaxOutputTokens) * (request.answers ?? 1);
  let reservation: Reservation | undefined;
  const worstCaseOf = (price: ModelPrice, outputTokens: number): number =>
    worstCaseUsd({ price, maxOutputTokens: outputTokens, rawBytes: rawBody.length });
  if (token.budgetUsd > 0) {
    if (!price) {
      sendError(res, {
        format,
        status: 400,
        type: "invalid_request_error",
        operationId,
        message: `model "${model}" has no price in provider ${provider.config.name}'s price table, so this session's budget cannot be enforced; add the model's prices to the provider configuration`,
      });
      return;
    }
    try {
      reservation = await deps.budgets.reserveBudget({
        // A harness operation's scratch session spends its parent's account.
        session: token.budgetSession ?? token.session,
        limitUsd: token.budgetUsd,
        worstCaseUsd: worstCaseOf(price, worstOutputTokens),
        minimumUsd: costOf(price, { input: 0, output: 0, cacheRead: estimatedInput, cacheWrite: 0, reasoning: 0 }),
        partial: stream,
      });
    } catch (error) {
      if (!(error instanceof ProxyError) || error.code !== "budget_exhausted") throw error;
      await refuseCall(deps, { res, format, common, startedAt, callStart }, "budget_refused", error);
      return;
    }
  }

  /** A call refused before it is sent costs nothing: its budget hold is given back. */
  const giveBackHold = async (): Promise<void> => {
    await reservation?.settle(0).catch((settleError: unknown) => {
      deps.logger.error(
        { operationId, session: token.session, error: (settleError as Error).message },
        "could not give back a refused call's budget reservation; its hold is freed when it expires",
      );
    });
  };

  // A stream may hold less than its worst case (what is left of the budget). Its output is then bounded, in the
  // request the provider gets, to what the hold pays for once its input is paid at its worst: a provider bills
  // tokens it never streams (an OpenAI model's reasoning, reported with the usage at the stream's end), so
  // cutting the stream at the event that crosses the hold came too late, and a stream on a $0.01 budget was
  // charged $0.75.
  // (The stream's estimate is still capped at the client's own limit, not this bound: a compatible server that
  // writes past the bound it was sent is cut at the hold by its estimate, as before.)
  let sendBody = input.sendBody;
  let billableOutputTokens = worstOutputTokens;
  if (reservation && price && price.output > 0 && reservation.amountUsd < worstCaseOf(price, worstOutputTokens)) {
    const answers = request.answers ?? 1;
    const perAnswer = Math.floor(
      (reservation.amountUsd - worstCaseOf(price, 0)) / ((price.output * answers) / 1_000_000),
    );
    const leastOutput = Math.max(MIN_BOUNDED_OUTPUT, request.minBoundedOutput ?? 0);
    if (perAnswer < leastOutput) {
      await giveBackHold();
      // Worded as the budget's other refusals ("… of the session's $L budget is left"): harnesses tell a
      // budget refusal by it (harness-claude's sdk-message-mapper.ts).
      const leastUsd = worstCaseOf(price, leastOutput * answers);
      await refuseCall(
        deps,
        { res, format, common, startedAt, callStart },
        "budget_refused",
        new ProxyError(
          "budget_exhausted",
          `this stream's input and ${leastOutput} tokens of output${leastOutput > MIN_BOUNDED_OUTPUT ? " (its extended thinking's least)" : ""} could cost up to $${leastUsd.toFixed(4)} but only $${reservation.amountUsd.toFixed(4)} of the session's $${token.budgetUsd.toFixed(4)} budget is left (a stream's output is bounded to what its hold pays for, its input held at a token a byte); send less input, or the session must end (an operator raises the agent's harness.max_budget_usd)`,
        ),
      );
      return;
    }
    sendBody = input.sendBodyWith(request.outputLimitFields(perAnswer));
    billableOutputTokens = perAnswer * answers;
  }

  // Counted last, just before it is sent: a call refused above was never the session's to count. The
  // proxy's retries below are this one call.
  let counted: CountedCall | undefined;
  if (token.maxModelCalls > 0) {
    try {
      counted = await deps.modelCalls.countModelCall({ session: token.session, limit: token.maxModelCalls });
    } catch (error) {
      await giveBackHold();
      if (!(error instanceof ProxyError) || error.code !== "model_calls_exhausted") throw error;
      await refuseCall(deps, { res, format, common, startedAt, callStart }, "model_calls_refused", error);
      return;
    }
  }

  let summary: AttemptSummary | undefined;
  const meteredAttempts: Promise<void>[] = [];
  let attempt = 0;
  let firstByteMs: number | undefined;
  try {
    while (attempt < deps.retry.maxAttempts) {
      attempt += 1;
      const attemptStartedAt = new Date();
      // Durable before the attempt goes out: a proxy killed now leaves a call to reconcile.
      const pending: PendingAttempt = {
        operationId,
        job: common.job,
        agent: common.agent,
        session: common.session,
        provider: common.provider,
        model,
        wire: common.wire,
        stream,
        attempt,
        startedAt,
        attemptStartedAt,
      };
      if (reservation) pending.reservationId = reservation.id;
      await deps.metering.beginAttempt(pending);
      const attemptStart = performance.now();
      summary = await runAttempt(deps, input, {
        operationId,
        price,
        estimatedInput,
        reservation,
        outputBound: request.maxOutputTokens,
        worstOutputTokens: billableOutputTokens,
        sendBody,
      });
      const latencyMs = performance.now() - attemptStart;
      if (summary.ttftMs !== undefined && summary.delivered) firstByteMs = attemptStart - callStart + summary.ttftMs;
      const attemptRecord = meteringRecord(common, {
        status: summary.status,
        outcome: summary.outcome,
        usage: summary.usage,
        costUsd: costOf(price, summary.usage),
        latencyMs,
        ttftMs: summary.ttftMs,
        estimated: summary.estimated || !price,
        startedAt: attemptStartedAt,
      }) as AttemptRecord;
      attemptRecord.attempt = attempt;
      meteredAttempts.push(deps.metering.attempt(attemptRecord));
      if (!summary.retryable || summary.delivered || attempt >= deps.retry.maxAttempts || input.clientGone.aborted)
        break;
      const delay = retryDelayMs({
        policy: deps.retry,
        nextAttempt: attempt + 1,
        ...(summary.retryHeaders ? { headers: summary.retryHeaders } : {}),
      });
      deps.logger.debug(
        { operationId, attempt, status: summary.status, errorCode: summary.errorCode, delayMs: delay },
        "retrying model call",
      );
      await sleep(delay, input.clientGone);
      if (input.clientGone.aborted) break;
    }
  } finally {
    // No summary: an attempt threw (a key that cannot be decrypted); the HTTP handler answers that one.
    const final: AttemptSummary = summary ?? {
      status: 500,
      outcome: "proxy_error",
      usage: { ...ZERO_USAGE },
      estimated: false,
      delivered: true,
      retryable: false,
    };
    const charged = costOf(price, final.usage);
    recordAnswer({ finishReason: final.finishReason, id: final.response?.id, model: final.response?.model });
    const callRecord = meteringRecord(common, {
      status: final.pendingError?.status ?? (final.delivered || final.status >= 200 ? final.status : 502),
      outcome: input.clientGone.aborted && final.outcome === "ok" ? "client_aborted" : final.outcome,
      usage: final.usage,
      costUsd: charged,
      latencyMs: performance.now() - callStart,
      ttftMs: firstByteMs,
      estimated: final.estimated || !price,
      startedAt,
    }) as CallRecord;
    callRecord.attempts = attempt;
    const metered = deps.metering.call(callRecord);
    // The budget settled in the same turn, so a shared store commits the charge with the record
    // (SQLite's ledger settles in memory at once).
    const settled = reservation?.settle(charged).catch((error: unknown) => {
      deps.logger.error(
        { operationId, session: token.session, error: (error as Error).message },
        "could not settle a budget reservation; its hold is freed when it expires",
      );
    });
    // Both stored before the answer ends (neither rejects: a failure is logged): once a client
    // has its answer, every replica counts the call in its usage and in its budget.
    await Promise.all([...meteredAttempts, metered, settled]);
    // On record now: a count kept in memory may be forgotten.
    counted?.end();
    try {
      if (final.finish) {
        final.finish();
      } else if (final.pendingError && !res.headersSent && !input.clientGone.aborted) {
        // The proxy already retried what can be retried: tell the client SDKs (which
        // honour x-should-retry) not to multiply the attempts past five.
        writeHead(res, final.pendingError.status, {
          ...final.pendingError.headers,
          "x-should-retry": "false",
          "content-length": String(final.pendingError.body.length),
        });
        res.end(final.pendingError.body);
      } else if (!final.delivered && !res.headersSent && !input.clientGone.aborted) {
        sendError(res, {
          format,
          status: 502,
          type: "api_error",
          operationId,
          message: `provider ${provider.config.name} could not be reached after ${attempt} attempt(s) (${final.errorCode ?? "no answer"}); try again later`,
        });
      }
    } finally {
      // The call's event and metrics after the answer, and also when writing it threw.
      deps.metering.completed(callRecord);
    }
    deps.logger.debug(
      {
        operationId,
        job: token.job,
        agent: token.agent,
        status: final.status,
        outcome: final.outcome,
        attempts: attempt,
      },
      "model call done",
    );
  }
}

/**
 * Answers a call the proxy refused before sending it (402, the refusal's type) and meters it as refused: no
 * attempt, nothing charged, one event.
 */
async function refuseCall(
  deps: ModelCallDeps,
  call: { res: ClientResponse; format: WireFormat; common: CallIdentity; startedAt: Date; callStart: number },
  outcome: "budget_refused" | "model_calls_refused",
  error: ProxyError,
): Promise<void> {
  const refused: CallRecord = {
    ...call.common,
    status: 402,
    outcome,
    usage: { ...ZERO_USAGE },
    costUsd: 0,
    latencyMs: performance.now() - call.callStart,
    estimated: false,
    startedAt: call.startedAt,
    attempts: 0,
  };
  await deps.metering.call(refused);
  try {
    sendError(call.res, {
      format: call.format,
      status: 402,
      type: outcome === "budget_refused" ? "budget_exhausted" : "model_calls_exhausted",
      operationId: call.common.operationId,
      message: error.message,
    });
  } finally {
    // Its event and metrics whether or not the answer could be written.
    deps.metering.completed(refused);
  }
}

type Figures = Omit<AttemptRecord, keyof CallIdentity | "attempt" | "ttftMs"> & { ttftMs: number | undefined };

/**
 * A metering record, written out field by field: on Node 20 an object spread
 * followed by more fields (`{ ...common, status, … }`) cost 10 µs or more per
 * record (three a call), where a literal costs well under one. The caller
 * adds `attempt` or `attempts`; `ttftMs` is left out when undefined.
 */
function meteringRecord(common: CallIdentity, figures: Figures): Omit<AttemptRecord, "attempt"> {
  const record: Omit<AttemptRecord, "attempt"> = {
    operationId: common.operationId,
    job: common.job,
    agent: common.agent,
    session: common.session,
    provider: common.provider,
    model: common.model,
    wire: common.wire,
    stream: common.stream,
    status: figures.status,
    outcome: figures.outcome,
    usage: figures.usage,
    costUsd: figures.costUsd,
    latencyMs: figures.latencyMs,
    estimated: figures.estimated,
    startedAt: figures.startedAt,
  };
  if (figures.ttftMs !== undefined) record.ttftMs = figures.ttftMs;
  return record;
}

/**
 * What a stream has used so far, as its budget counts it: an estimated output no larger than the
 * request's bound (the provider stops there), what the provider reported as it is (an input far above
 * its estimate, a PDF by URL, is cut at once).
 */
function countedUsage(reading: StreamMeterReading, outputBound: number | undefined): TokenUsage {
  const { usage } = reading;
  if (!reading.estimated || outputBound === undefined || usage.output <= outputBound) return usage;
  return { ...usage, output: outputBound };
}

/**
 * The most a call can cost: every request byte an input token at the dearest
 * input price, and every allowed output token. A token covers one byte at
 * least; it was once taken as two, but text of punctuation tokenizes at about
 * a token a byte, so a whole answer could spend twice its hold on input
 * (attacker review).
 */
function worstCaseUsd(options: { price: ModelPrice; maxOutputTokens: number; rawBytes: number }): number {
  const { price } = options;
  const inputTokens = options.rawBytes;
  const dearestInput = Math.max(price.input, price.cacheWrite ?? price.input, price.cacheRead ?? price.input);
  return (inputTokens * dearestInput + options.maxOutputTokens * price.output) / 1_000_000;
}

/**
 * The smallest output limit a stream's hold may bound it to: below it the call is refused (OpenAI's Responses
 * API takes no `max_output_tokens` under 16).
 */
const MIN_BOUNDED_OUTPUT = 16;

interface AttemptContext {
  operationId: string;
  /** The body sent upstream: the client's, with the fields the proxy sets. */
  sendBody: Buffer;
  price: ModelPrice | undefined;
  estimatedInput: number;
  reservation: Reservation | undefined;
  /**
   * The most output tokens the provider may bill for the call, when the request bounds them. A stream's
   * output is estimated (four characters a token) until the provider reports it, and text such as code
   * indented with spaces runs far past that estimate: past this bound it is the estimate off, not a spend.
   */
  outputBound: number | undefined;
  /**
   * The most output tokens the call may be billed: `outputBound`, else the model's maxOutput (or the default bound)
   * for each answer; a stream sent with its output bounded to its hold, that bound.
   */
  worstOutputTokens: number;
}

function connectionFailure(error: unknown): AttemptSummary {
  return failedConnection((error as { code?: string }).code ?? (error as Error).name ?? "error");
}

/** No answer came: retried like any connection failure, `errorCode` saying why. */
function failedConnection(errorCode: string): AttemptSummary {
  return {
    status: 0,
    outcome: "connection_error",
    usage: { ...ZERO_USAGE },
    estimated: false,
    delivered: false,
    retryable: true,
    errorCode,
  };
}

/** A stream's headers did not come within `attemptTimeoutMs`: it never began, a connection failure retried like one. */
function upstreamTimeout(deps: ModelCallDeps): AttemptSummary {
  deps.logger.warn(
    { timeoutMs: deps.retry.attemptTimeoutMs },
    "the provider did not answer in time; the attempt is given up",
  );
  return failedConnection("upstream_timeout");
}

/**
 * A whole answer the provider did not give within the attempt's time: generated as a whole before it is sent,
 * it is most likely being generated still, and billed once it is, whoever waits. So it is not asked for again
 * (that would bill it again) and is charged what it may cost: its input as estimated and its whole output
 * limit. Charged nothing and retried, an answer longer than the timeout was made up to five times a call
 * without touching the session's budget.
 */
function wholeAnswerTimedOut(deps: ModelCallDeps, format: WireFormat, ctx: AttemptContext): AttemptSummary {
  const timeoutMs = deps.retry.attemptTimeoutMs;
  deps.logger.warn(
    { timeoutMs },
    "the provider did not give a whole answer in time; the call is given up, not retried",
  );
  const message = `the provider did not answer within ${timeoutMs} ms; it is not asked again, since it may still be generating the answer, which is charged at the most it may cost. Stream long answers (a stream has no such limit once it begins), or raise OZ0_UPSTREAM_TIMEOUT_MS on the LLM proxy`;
  return {
    status: 504,
    outcome: "connection_error",
    usage: { ...ZERO_USAGE, input: ctx.estimatedInput, output: ctx.worstOutputTokens },
    estimated: true,
    delivered: false,
    retryable: false,
    errorCode: "upstream_timeout",
    pendingError: {
      status: 504,
      headers: { "content-type": "application/json", "oz0-operation-id": ctx.operationId },
      body: Buffer.from(JSON.stringify(format.errorBody("api_error", message))),
    },
  };
}

/**
 * An answer the budgets of bytes in flight could not hold: dropped, and the client told so
 * in its API's error shape (502: the provider answered, the proxy could not pass it on), not
 * retried (the provider billed it; asking again would bill again). Metered with what was read.
 */
function answerOverBytesInFlight(args: {
  format: WireFormat;
  ctx: AttemptContext;
  refusal: BytesRefusal;
  usage: TokenUsage;
}): AttemptSummary {
  const message = `${bytesRefusalMessage(args.refusal, "the provider's answer")}; the answer was dropped (ask for a shorter one)`;
  return {
    status: 502,
    outcome: "proxy_error",
    usage: args.usage,
    estimated: true,
    delivered: false,
    retryable: false,
    errorCode: "answer_over_bytes_in_flight",
    pendingError: {
      status: 502,
      headers: { "content-type": "application/json", "oz0-operation-id": args.ctx.operationId },
      body: Buffer.from(JSON.stringify(args.format.errorBody("api_error", message))),
    },
  };
}

function clientLeft(): AttemptSummary {
  return {
    status: 0,
    outcome: "client_aborted",
    usage: { ...ZERO_USAGE },
    estimated: false,
    delivered: false,
    retryable: false,
  };
}

async function runAttempt(deps: ModelCallDeps, input: ModelCallInput, ctx: AttemptContext): Promise<AttemptSummary> {
  const { res, provider, format } = input;
  // A previous attempt's answer (an error body) is no longer held once this attempt replaces it.
  input.held.dropAnswer();
  // Nobody waits any more (the client left during a reservation or a retry's pause): ask nothing.
  if (input.clientGone.aborted) return clientLeft();
  const secretName = provider.config.keySecret;
  const key = secretName ? await deps.vault.use(secretName) : undefined;
  if (secretName && key === undefined) {
    sendError(res, {
      format,
      status: 503,
      type: "api_error",
      operationId: ctx.operationId,
      message: `provider ${provider.config.name} has no API key: set the secret ${secretName} (oz0 secret set ${secretName})`,
    });
    return {
      status: 503,
      outcome: "proxy_error",
      usage: { ...ZERO_USAGE },
      estimated: false,
      delivered: true,
      retryable: false,
      errorCode: "no_key",
    };
  }
  // The key's scrubber, for the headers, the body or every streamed event.
  const scrubber = key?.scrubber ?? NO_SCRUBBER;
  const secret = key?.value;
  // Object.assign, not a spread: on Node 20 a spread copy that gains fields costs about 2 µs.
  const headers = Object.assign({}, input.forwardHeaders);
  // A scripted provider may keep one script per session; it learns the session here.
  if (provider.config.kind === "scripted") headers["oz0-session"] = input.token.session;
  if (secret !== undefined) {
    const auth = provider.config.auth ?? format.keyHeader;
    if (auth === "x-api-key") headers["x-api-key"] = secret;
    else headers.authorization = `Bearer ${secret}`;
  }
  // It may have left while the key was read: a listener added now would never fire.
  if (input.request.stream && input.clientGone.aborted) return clientLeft();
  const attemptStart = performance.now();
  const call = sendUpstream({ baseUrl: provider.baseUrl, path: input.upstreamPath, headers, body: ctx.sendBody });
  const onGone = call.abort;
  // A client that leaves stops a stream (the provider stops generating and bills what it
  // sent). A whole answer, once asked for, is generated and billed in full whether anyone
  // waits or not, so the proxy reads it to its end and meters it: the usage it records is
  // the provider's bill, not what the client happened to receive.
  if (input.request.stream) input.clientGone.addEventListener("abort", onGone);
  // A provider that accepts a request and never answers must not hold the call (and its
  // budget hold, and a socket) forever: an attempt gets until its whole answer, or a
  // stream's headers, to come.
  let timedOut = false;
  // A whole answer or error body is held until it is sent: it counts against the budgets of bytes
  // in flight as it arrives, and one that would cross one is dropped (the request upstream stops).
  const refused: { by?: BytesRefusal } = {};
  const charge = (bytes: number): boolean => {
    refused.by = input.held.takeAnswer(bytes);
    return refused.by === undefined;
  };
  const deadline = setTimeout(() => {
    timedOut = true;
    call.abort();
  }, deps.retry.attemptTimeoutMs);
  try {
    let upstream: http.IncomingMessage;
    try {
      upstream = await call.response;
    } catch (error) {
      // A stream's headers come as it begins: none means none began. A whole answer's come with the answer.
      if (timedOut) return input.request.stream ? upstreamTimeout(deps) : wholeAnswerTimedOut(deps, format, ctx);
      return input.clientGone.aborted ? clientLeft() : connectionFailure(error);
    }
    const status = upstream.statusCode ?? 502;
    if (status < 200 || status >= 300) {
      const retryable = isRetryableStatus(status);
      const failed = {
        status,
        outcome: "http_error" as const,
        usage: { ...ZERO_USAGE },
        estimated: false,
        delivered: false,
        retryable,
        errorCode: `http_${status}`,
        ...(retryable ? { retryHeaders: upstream.headers } : {}),
      };
      // Kept for the client in case this is the last attempt; it is small.
      let bodyBytes: Buffer | undefined;
      try {
        bodyBytes = await readAll(upstream, Number.POSITIVE_INFINITY, charge);
      } catch (error) {
        return retryable ? failed : connectionFailure(error);
      }
      if (bodyBytes === undefined) {
        call.abort();
        return answerOverBytesInFlight({ format, ctx, refusal: refused.by!, usage: { ...ZERO_USAGE } });
      }
      return {
        ...failed,
        pendingError: {
          status,
          headers: responseHeaders(upstream, ctx.operationId, scrubber),
          body: Buffer.from(scrubber.json(bodyBytes.toString("utf8"))),
        },
      };
    }
    const contentType = String(upstream.headers["content-type"] ?? "");
    if (input.request.stream && contentType.includes("text/event-stream")) {
      // The stream has begun: it lasts as long as the provider generates.
      clearTimeout(deadline);
      return await forwardStream({ deps, input, ctx, upstream, scrubber, abort: call.abort, attemptStart });
    }
    // A whole answer: read it, meter it, pass it on.
    let bodyBytes: Buffer | undefined;
    try {
      bodyBytes = await readAll(upstream, Number.POSITIVE_INFINITY, charge);
    } catch (error) {
      return timedOut ? wholeAnswerTimedOut(deps, format, ctx) : connectionFailure(error);
    }
    if (bodyBytes === undefined) {
      call.abort();
      // Generated and billed, but not read to its end: what was read is the estimate.
      const usage = { ...ZERO_USAGE, input: ctx.estimatedInput, output: estimateTokens(input.held.answer) };
      return answerOverBytesInFlight({ format, ctx, refusal: refused.by!, usage });
    }
    const ttftMs = performance.now() - attemptStart;
    const text = bodyBytes.toString("utf8");
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
    const reported = input.calls.answerUsage(parsed);
    const usage = reported ?? {
      input: ctx.estimatedInput,
      output: estimateTokens(text.length),
      cacheRead: 0,
      cacheWrite: 0,
      reasoning: 0,
    };
    const scrubbed = scrubber.json(text);
    const out = scrubbed === text ? bodyBytes : Buffer.from(scrubbed);
    const answerHeaders = responseHeaders(upstream, ctx.operationId, scrubber);
    answerHeaders["content-length"] = String(out.length);
    const finish = (): void => {
      if (input.clientGone.aborted) return;
      writeHead(res, status, answerHeaders);
      res.end(out);
    };
    return {
      status,
      outcome: "ok",
      usage,
      estimated: reported === undefined,
      ttftMs,
      delivered: true,
      retryable: false,
      finish,
      finishReason: input.calls.finishReason(parsed),
      response: input.calls.responseOf(parsed),
    };
  } finally {
    clearTimeout(deadline);
    input.clientGone.removeEventListener("abort", onGone);
  }
}

async function forwardStream(options: {
  deps: ModelCallDeps;
  input: ModelCallInput;
  ctx: AttemptContext;
  upstream: http.IncomingMessage;
  scrubber: SecretScrubber;
  /** Stops the request upstream. */
  abort: () => void;
  attemptStart: number;
}): Promise<AttemptSummary> {
  const { input, ctx, upstream, scrubber, abort, attemptStart } = options;
  const { res, format, calls } = input;
  const meter = input.request.streamMeter();
  const reading = (): StreamMeterReading => meter.reading(ctx.estimatedInput);
  const splitter = new SseEventSplitter();
  // Reads each streamed text across its deltas, so a key sent a few characters per event is caught.
  // Without a key there is nothing to scrub: events pass untouched.
  const streamScrubber: StreamScrubber = scrubber.active ? calls.streamScrubber(scrubber) : { push: (event) => event };
  let delivered = false;
  let ttftMs: number | undefined;
  let outcome: Outcome = "ok";
  let finish: (() => void) | undefined;
  // The events of the chunk that completes the stream, and any after: sent with the answer's end once
  // the call is recorded, so a client that read the stream's last event has it on record,
  // and the end costs no system call of its own (often the whole stream came in one chunk).
  let tail = "";
  const end = (): void => {
    if (!res.writableEnded) res.end(tail);
  };
  const headers = responseHeaders(upstream, ctx.operationId, scrubber);

  /** The answer's headers, decided (Node sends them with the first bytes). */
  const begin = (): void => {
    if (delivered) return;
    writeHead(res, 200, headers);
    delivered = true;
    ttftMs = performance.now() - attemptStart;
  };
  const deliver = async (text: string): Promise<void> => {
    if (input.clientGone.aborted) return;
    begin();
    if (!(res as NodeJS.WritableStream).write(text)) await Promise.race([once(res, "drain"), once(res, "close")]);
  };

  /**
   * Ends the stream here, the request upstream stopped: an error answer when nothing went out
   * yet, else the events so far (`batch`, not yet sent) and an error event.
   */
  const cutOff = async (
    batch: string,
    cut: { status: number; type: ProxyErrorType; message: string },
  ): Promise<void> => {
    if (!delivered && !batch) {
      sendError(res, {
        format,
        status: cut.status,
        type: cut.type,
        operationId: ctx.operationId,
        message: cut.message,
      });
      delivered = true;
    } else {
      // Through the scrubber: the text it holds back (a run that might begin the key) goes out before the error.
      await deliver(tail + batch + streamScrubber.push(calls.streamErrorEvent(cut.type, cut.message)));
      tail = "";
      finish = end;
    }
    abort();
  };

  // A stream that has begun has no deadline of its own: it lasts as long as the provider generates. But a
  // provider that goes silent mid-stream would hold the call, its budget hold and a connection until the
  // session ends, so a wait for its next bytes longer than `streamIdleTimeoutMs` cuts the stream. Only the
  // provider's silence counts: the timer, when it fires while the proxy writes to a slow client, waits again.
  let awaitingProvider = false;
  let stalled = false;
  const idleMs = options.deps.retry.streamIdleTimeoutMs;
  const idle = setTimeout(function onIdle() {
    if (!awaitingProvider) {
      idle.refresh();
      return;
    }
    stalled = true;
    abort();
  }, idleMs);
  try {
    // Read as it arrives; left paused when the loop stops at the stream's last event: `discard`
    // (below) reads the rest so the connection goes back to the pool once the provider ends the response.
    chunks: for (;;) {
      const next = nextChunk(upstream);
      let chunk: Buffer | null;
      if (next instanceof Promise) {
        idle.refresh();
        awaitingProvider = true;
        try {
          chunk = await next;
        } finally {
          awaitingProvider = false;
        }
      } else chunk = next;
      if (chunk === null) break;
      let batch = "";
      const events = splitter.push(chunk);
      // The part of an event still arriving is held until the event ends: it counts against the
      // budgets of bytes in flight (an event never ended would otherwise grow without end).
      const overBytes = input.held.holdAnswer(splitter.pending.length);
      for (const event of events) {
        const forward = meter.onEvent(event);
        if (
          ctx.reservation &&
          costOf(ctx.price, countedUsage(reading(), ctx.outputBound)) > ctx.reservation.amountUsd
        ) {
          // This event would take the session past its budget: it is not delivered.
          outcome = "budget_cut";
          await cutOff(batch, {
            status: 402,
            type: "budget_exhausted",
            message: "the session's budget is exhausted; the answer was cut off here",
          });
          break chunks;
        }
        if (forward === undefined) continue;
        batch += streamScrubber.push(forward);
      }
      if (overBytes && !meter.complete) {
        // The stream is cut where the event that would not fit began: the events before it go out.
        outcome = "proxy_error";
        await cutOff(batch, {
          status: 502,
          type: "api_error",
          message: `${bytesRefusalMessage(overBytes, "an event of the provider's stream")}; the answer was cut off here`,
        });
        break;
      }
      if (batch && meter.complete) {
        if (!input.clientGone.aborted) {
          begin();
          tail += batch;
        }
      } else if (batch) await deliver(batch);
      if (input.clientGone.aborted) {
        outcome = "client_aborted";
        abort();
        break;
      }
      // The provider has completed the stream: nothing after it is the client's, so the call is
      // recorded and its last events sent now, not once the provider gets round to ending the
      // response (one slow to close would hold the client's end; one that resets would cut it).
      if (meter.complete) break;
    }
    if (outcome === "ok") {
      if (!meter.complete) {
        // The provider ended the response without finishing the stream.
        outcome = "stream_cut";
        if (!delivered)
          return {
            status: 200,
            outcome: "stream_cut",
            ...reading(),
            delivered: false,
            retryable: true,
            errorCode: "incomplete_stream",
          };
        abortResponse(res);
      } else {
        if (!delivered) await deliver("");
        finish = end;
      }
    }
  } catch (error) {
    // The loop stops at the stream's last event, so a connection that fails after it should not
    // get here; if it does, the provider completed the answer, and its tail still goes out once recorded.
    if (outcome === "ok" && meter.complete && delivered && !input.clientGone.aborted) finish = end;
    else if (stalled && !input.clientGone.aborted) {
      outcome = "stream_cut";
      options.deps.logger.warn(
        { operationId: ctx.operationId, idleMs, delivered },
        "the provider's stream went silent; it is cut off",
      );
      // Nothing reached the client: a stream that never began, retried like one that died before its first byte.
      if (!delivered)
        return {
          status: 200,
          outcome,
          ...reading(),
          delivered: false,
          retryable: true,
          errorCode: "stream_idle_timeout",
        };
      await cutOff("", {
        status: 504,
        type: "api_error",
        message: `the provider sent nothing for ${idleMs} ms; the answer was cut off here (it is charged what was streamed). Try again, or raise OZ0_STREAM_IDLE_TIMEOUT_MS on the LLM proxy`,
      });
    } else {
      if (outcome === "ok") outcome = input.clientGone.aborted ? "client_aborted" : "stream_cut";
      if (!delivered && outcome === "stream_cut") {
        const code = (error as { code?: string }).code ?? "stream_error";
        return { status: 200, outcome, ...reading(), delivered: false, retryable: true, errorCode: code };
      }
      if (delivered && !res.writableEnded) abortResponse(res);
    }
  } finally {
    clearTimeout(idle);
    // Also when the response is complete but its end not yet read: its socket is freed on `end`.
    if (!upstream.readableEnded) discard(upstream);
  }
  const { usage: read, estimated } = reading();
  // A client that left before the provider reported its usage stopped a stream whose bill the proxy cannot see:
  // a provider bills tokens it never streams (an OpenAI model's reasoning, Claude's thinking behind its summary),
  // so the text streamed says nothing of it. Charged that text alone, a session could have models reason at
  // length and hang up before the usage came, again and again, its budget barely touched. So it is charged as a
  // whole answer given up is: its output bound, all of it (what the hold allowed), estimated.
  const usage =
    outcome === "client_aborted" && estimated && read.output < ctx.worstOutputTokens
      ? { ...read, output: ctx.worstOutputTokens }
      : read;
  // Field by field (no spreads): see meteringRecord.
  const summary: AttemptSummary = {
    status: 200,
    outcome,
    usage,
    estimated,
    delivered,
    retryable: false,
    finishReason: meter.finishReason,
    response: meter.response,
  };
  if (ttftMs !== undefined) summary.ttftMs = ttftMs;
  if (finish) summary.finish = finish;
  return summary;
}
