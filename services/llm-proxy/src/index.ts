// @oz0/llm-proxy: the edge every model call goes through.
import {
  Authenticator,
  callerToken,
  createLogger,
  registration,
  serve,
  type AuthSettings,
  type Logger,
} from "@oz0/serving";
import { modelTurnsIn, startScriptedModel, type Script, type ScriptedModel } from "@oz0/harness/testing";
import { LlmProxyService, SecretService } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { randomBytes } from "node:crypto";
import { BytesInFlight } from "./bytes-in-flight.js";
import { createHttpApi } from "./http-api.js";
import { KeyVault } from "./key-vault.js";
import { llmProxyService, secretService } from "./llm-proxy-service.js";
import { Metering } from "./metering.js";
import { PostgresProxyStore } from "./postgres-proxy-store.js";
import { ProxyError } from "./proxy-error.js";
import type { ResolvedProvider } from "./model-call.js";
import { defaultProviders, validateProviders, type ProviderConfig } from "./provider-config.js";
import type { ProxyStore } from "./proxy-store.js";
import { RefusedCallsLog } from "./refused-calls-log.js";
import { DEFAULT_RETRY_POLICY, type RetryPolicy } from "./retry-policy.js";
import { SessionTokens } from "./session-tokens.js";
import { SqliteProxyStore } from "./sqlite-proxy-store.js";
import { eventsUsageSink, memoryUsageSink, type UsageSink } from "./usage-sink.js";

export { loadKek } from "./key-vault.js";
export { loadProvidersFile, defaultProviders, priceOf, costOf } from "./provider-config.js";
export type { ModelPrice, ProviderConfig } from "./provider-config.js";
export type { RetryPolicy } from "./retry-policy.js";
export { DEFAULT_RETRY_POLICY } from "./retry-policy.js";
export type {
  AttemptRecord,
  BudgetSnapshot,
  CallRecord,
  PendingAttempt,
  ProxyStore,
  Reservation,
  ReserveInput,
  StoreChange,
  TokenUsage,
  UsageTotals,
} from "./proxy-store.js";
export { SqliteProxyStore } from "./sqlite-proxy-store.js";
export { PostgresProxyStore, type PostgresProxyStoreOptions } from "./postgres-proxy-store.js";
export type { UsageSink } from "./usage-sink.js";
export { USAGE_EVENT_TYPE, usageEventAttributes } from "./usage-sink.js";

export interface LlmProxyConfig {
  /** Default 0 (a free port). */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /**
   * The URL sessions are given to reach this proxy (OZ0_PUBLIC_URL), when it
   * is not the one it listens on: a listener on 0.0.0.0 is reached at the
   * address of its Service. Default: `url`.
   */
  publicUrl?: string;
  /** Directory for the SQLite store (OZ0_LLM_PROXY_DATA); `:memory:` keeps nothing. Ignored when `store` or `databaseUrl` is given. */
  dataDir?: string;
  /**
   * PostgreSQL (DATABASE_URL) for the store, so several proxy replicas share
   * tokens, metering and budgets; migrations run on start-up. Needs `kek`,
   * the same for every replica.
   */
  databaseUrl?: string;
  /** The PostgreSQL schema of the proxy's tables (OZ0_DATABASE_SCHEMA). Default `oz0_llm_proxy`. */
  databaseSchema?: string;
  /** Another store; the proxy does not close it. */
  store?: ProxyStore;
  /**
   * 32-byte key-encryption key. Without it a random one is made, and secrets
   * do not survive a restart; a store several replicas share needs it.
   */
  kek?: Buffer;
  /** A directory of provider keys, one file per secret name (OZ0_SECRETS_DIR), stored at start-up. */
  secretsDir?: string;
  /** Default: Anthropic, OpenAI and the scripted provider. */
  providers?: ProviderConfig[];
  /** The events service (OZ0_EVENTS_URL), for usage events. */
  eventsUrl?: string;
  /** Where usage events go, instead of the events service (tests). */
  usageSink?: UsageSink;
  /**
   * Who may call the control API (tokens, secrets, usage): the orchestrator's
   * service credential only. Sessions reach the same port for model calls;
   * their tokens are accepted by the model routes and nothing else. Without
   * it the control API answers nobody. `serviceToken` is sent with usage events.
   */
  auth?: AuthSettings;
  retry?: Partial<RetryPolicy>;
  /**
   * Largest request message of the control API, in bytes (OZ0_MAX_MESSAGE_BYTES).
   * Default 1 MiB: its largest messages are a secret (16 KiB at most) and a token's budget.
   */
  maxMessageBytes?: number;
  /**
   * Largest model call body, in bytes (OZ0_MAX_MODEL_REQUEST_BYTES). Default
   * 32 MiB, what Anthropic's Messages API takes: a long context, with images.
   */
  maxModelRequestBytes?: number;
  /**
   * What a request may ask the provider to do on its own side
   * (OZ0_PROVIDER_SIDE_FEATURES: server tools such as web_search, `mcp`,
   * `background`, `stored_context`). Default none: provider-side-features.ts
   * says what each escapes.
   */
  providerSideFeatures?: readonly string[];
  /**
   * Bytes of request bodies and whole answers one session's calls may hold at
   * once (OZ0_MAX_SESSION_BYTES_IN_FLIGHT). Default 64 MiB (bytes-in-flight.ts says why).
   */
  maxSessionBytesInFlight?: number;
  /** The same for all calls of the process (OZ0_MAX_BYTES_IN_FLIGHT). Default 128 MiB. */
  maxBytesInFlight?: number;
  /** Output tokens a call without max_tokens is assumed to be able to produce, for budget reservations. Default 32 000. */
  defaultMaxOutputTokens?: number;
  logger?: Logger;
  /** With a shared store: how often calls left in flight by replicas that died are looked for. Default 15 000 ms. */
  reconcileIntervalMs?: number;
}

export interface LlmProxy {
  /** `http://host:port`: gRPC and model calls on the same port. */
  readonly url: string;
  /** The store, for audits and tests. */
  readonly store: ProxyStore;
  /** Stop taking calls, give calls in flight `graceMs` (default 5 000) to finish, then close. */
  close(options?: { graceMs?: number }): Promise<void>;
}

/** The header the proxy adds to calls to a scripted provider, naming the calling session. */
export const SCRIPTED_SESSION_HEADER = "oz0-session";

/** What a scripted provider's model answers from: one list, a list per session, or a function. */
function scriptedTurns(provider: ProviderConfig): Script {
  const script = provider.script;
  if (script === undefined) return () => ({ text: "This is the scripted provider's reply." });
  const sessionOf = (request: { headers: Record<string, string> }): string =>
    request.headers[SCRIPTED_SESSION_HEADER] ?? "";
  if (typeof script === "function") return (request) => script(request, sessionOf(request));
  if (!provider.scriptPerSession) return script;
  const next = new Map<string, number>();
  return (request) => {
    const session = sessionOf(request);
    // The conversation says how far the session got, so a proxy started again (its counters
    // gone) answers a retried call with the turn it was on, not the script's first; within one
    // process the counter also steps past turns that answered with an error.
    const index = Math.max(next.get(session) ?? 0, modelTurnsIn(request));
    next.set(session, index + 1);
    const turn = script[index];
    if (turn) return turn;
    const message = `scripted provider ${provider.name}: session ${session} used all ${script.length} turns of its script; add turns to it (the model script, or the providers file's script list)`;
    return { fail: { status: 400, message } };
  };
}

async function openStore(config: LlmProxyConfig, logger: Logger): Promise<ProxyStore> {
  if (config.store) return config.store;
  if (config.databaseUrl) {
    if (!config.kek) {
      throw new ProxyError(
        "kek_invalid",
        "DATABASE_URL is set, so proxy replicas share their secrets: set OZ0_KEK or OZ0_KEK_FILE, the same key on every replica (make one with: openssl rand -base64 32)",
      );
    }
    const store = await PostgresProxyStore.open({
      connectionString: config.databaseUrl,
      ...(config.databaseSchema ? { schema: config.databaseSchema } : {}),
      // Background failures (the sweep, the listening connection); the message only, never connection details.
      onError: (error) =>
        logger.warn({ error: (error as Error).message }, "llm-proxy store: a background task failed; it is retried"),
    });
    logger.info({ schema: store.schema }, "llm-proxy store: PostgreSQL");
    return store;
  }
  return new SqliteProxyStore({
    dataDir: config.dataDir ?? ":memory:",
    onWriteError: (error) =>
      logger.error({ error: (error as Error).message }, "could not write metering rows to the SQLite store"),
  });
}

/** Start the proxy: gRPC control API and the HTTP model API on one port. */
export async function startLlmProxy(config: LlmProxyConfig = {}): Promise<LlmProxy> {
  const logger = config.logger ?? createLogger({ name: "llm-proxy" });
  const store = await openStore(config, logger);
  const ownsStore = config.store === undefined;
  const scripted: ScriptedModel[] = [];
  const providers = new Map<string, ResolvedProvider>();
  let vault: KeyVault;
  let tokens: SessionTokens;
  try {
    if (!config.kek)
      logger.warn(
        "no OZ0_KEK or OZ0_KEK_FILE: using a random key-encryption key, so secrets set now will not survive a restart",
      );
    vault = new KeyVault({ store, kek: config.kek ?? randomBytes(32) });
    tokens = new SessionTokens({ store });
    // Replicas must share one KEK: refuse to start rather than write keys the others cannot read.
    if (store.shared) await vault.checkKek();
    if (config.secretsDir) {
      const loaded = await vault.loadDirectory(config.secretsDir);
      logger.info({ stored: loaded.stored, unchanged: loaded.unchanged }, "provider keys read from OZ0_SECRETS_DIR");
    }
    for (const provider of validateProviders(config.providers ?? defaultProviders())) {
      let baseUrl = provider.baseUrl ?? "";
      if (provider.kind === "scripted") {
        const model = await startScriptedModel({ turns: scriptedTurns(provider) });
        scripted.push(model);
        baseUrl = model.url;
      }
      providers.set(provider.name, { config: provider, baseUrl });
    }
  } catch (error) {
    await Promise.all(scripted.map((m) => m.close()));
    if (ownsStore) await store.close();
    throw error;
  }
  const eventsToken = callerToken(config.auth, "events");
  const sink =
    config.usageSink ??
    (config.eventsUrl
      ? eventsUsageSink({
          url: config.eventsUrl,
          logger,
          nominal: (name) => providers.get(name)?.config.kind === "scripted",
          ...(eventsToken ? { token: eventsToken } : {}),
        })
      : memoryUsageSink());
  const metering = new Metering({ store, sink, logger });
  // Calls a proxy died in are metered (as interrupted) before this one serves. A shared store
  // keeps looking: a replica that dies stops renewing its calls, and any replica reconciles them.
  let reconcileTimer: NodeJS.Timeout | undefined;
  const reconcile = (): Promise<void> =>
    metering.reconcileInterrupted().then(
      () => undefined,
      (error: unknown) =>
        logger.warn({ error: (error as Error).message }, "could not reconcile interrupted model calls; retried later"),
    );
  if (store.shared) {
    await reconcile();
    reconcileTimer = setInterval(() => void reconcile(), config.reconcileIntervalMs ?? 15_000);
    reconcileTimer.unref();
  } else {
    // A dead process's rows are only in its files (slots): serving without them would
    // leave budgets short of its charges and its tokens unknown. The error names the file.
    try {
      await metering.reconcileInterrupted();
    } catch (error) {
      await sink.close();
      await Promise.all(scripted.map((m) => m.close()));
      if (ownsStore) await store.close();
      throw new Error(
        `could not reconcile the calls of a proxy that stopped, so this one does not serve: ${(error as Error).message}`,
        { cause: error },
      );
    }
  }

  let publicUrl = "";
  const refusedCalls = new RefusedCallsLog({ logger });
  const httpApi = createHttpApi({
    providers,
    tokens,
    vault,
    budgets: store,
    modelCalls: store,
    metering,
    retry: { ...DEFAULT_RETRY_POLICY, ...config.retry },
    logger,
    refusedCalls,
    defaultMaxOutputTokens: config.defaultMaxOutputTokens ?? 32_000,
    ...(config.maxModelRequestBytes !== undefined ? { maxBodyBytes: config.maxModelRequestBytes } : {}),
    ...(config.providerSideFeatures ? { providerSideFeatures: new Set(config.providerSideFeatures) } : {}),
    bytesInFlight: new BytesInFlight({
      ...(config.maxSessionBytesInFlight !== undefined ? { perSession: config.maxSessionBytesInFlight } : {}),
      ...(config.maxBytesInFlight !== undefined ? { perProcess: config.maxBytesInFlight } : {}),
    }),
  });
  let server: Awaited<ReturnType<typeof serve>>;
  try {
    server = await serve({
      name: "llm-proxy",
      ...(config.host ? { host: config.host } : {}),
      port: config.port ?? 0,
      logger,
      maxMessageBytes: config.maxMessageBytes ?? 1024 * 1024,
      services: [
        registration(SecretService, secretService(vault)),
        registration(
          LlmProxyService,
          llmProxyService({
            tokens,
            budgets: store,
            metering,
            publicUrl: () => publicUrl,
            // A scripted provider's prices are for show: no provider was called.
            nominalPrices: (name) => providers.get(name)?.config.kind === "scripted",
          }),
        ),
      ],
      auth: new Authenticator(config.auth ?? {}),
      fallback: httpApi,
    });
  } catch (error) {
    clearInterval(reconcileTimer);
    await sink.close();
    await Promise.all(scripted.map((m) => m.close()));
    if (ownsStore) await store.close();
    throw error;
  }
  publicUrl = config.publicUrl?.replace(/\/+$/, "") ?? server.url;
  return {
    url: server.url,
    store,
    async close({ graceMs = 5_000 } = {}) {
      clearInterval(reconcileTimer);
      await server.close({ graceMs });
      refusedCalls.close();
      await sink.close();
      await Promise.all(scripted.map((m) => m.close()));
      // After the server: the metering rows of the last calls are written first.
      if (ownsStore) await store.close();
    },
  };
}
