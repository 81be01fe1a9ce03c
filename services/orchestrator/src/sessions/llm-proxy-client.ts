// TokenIssuer and ProviderSecrets over the LLM proxy's oz0.llmproxy.v1 API.
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import {
  LlmProxyService,
  SecretService,
  TokenUse,
  type GetUsageResponse,
  type SummarizeUsageResponse,
} from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { bearerInterceptor, traceContextClientInterceptor } from "@oz0/serving";
import { invalidArgument, notFound, OrchestratorError } from "../orchestrator-error.js";
import type { MintedToken, ProviderSecrets, SecretListing, TokenIssuer } from "./session-runner.js";

/** How long a revoke may take before it counts as failed (and is made again by a later sweep). */
const REVOKE_TIMEOUT_MS = 10_000;

export class LlmProxyClient implements TokenIssuer, ProviderSecrets {
  readonly url: string;
  readonly #tokens: Client<typeof LlmProxyService>;
  readonly #secrets: Client<typeof SecretService>;

  /** `token`: the orchestrator's service credential (OZ0_SERVICE_TOKEN); the proxy's control API answers no one else. */
  constructor(options: { url: string; token?: string | undefined }) {
    this.url = options.url.replace(/\/$/, "");
    // The Connect protocol, binary, on HTTP/2: Mint and Revoke are two unary calls a job, and connect-es runs a
    // unary gRPC call through its streaming pipeline on both ends, a unary Connect call without it
    // (bench/rpc-protocol-cost.ts: 0.78x the proxy's CPU a call and 0.86x the caller's, paced as a job's calls).
    const transport = createConnectTransport({
      baseUrl: this.url,
      httpVersion: "2",
      useBinaryFormat: true,
      interceptors: [traceContextClientInterceptor, bearerInterceptor(options.token)],
    });
    this.#tokens = createClient(LlmProxyService, transport);
    this.#secrets = createClient(SecretService, transport);
  }

  async mint(options: {
    jobId: string;
    agent: string;
    sessionId: string;
    budgetUsd?: number;
    budgetSession?: string;
    maxModelCalls?: number;
  }): Promise<MintedToken> {
    const response = await this.#tokens.mintSessionToken({
      job: options.jobId,
      agent: options.agent,
      session: options.sessionId,
      budgetUsd: options.budgetUsd ?? 0,
      budgetSession: options.budgetSession ?? "",
      // The proxy holds the session to it whatever code in the session does with the token (an older proxy ignores it).
      maxModelCalls: options.maxModelCalls ?? 0,
    });
    return {
      token: response.token,
      // Revoked by session, so the token itself is never stored.
      tokenId: options.sessionId,
      anthropicBaseUrl: response.anthropicBaseUrl || `${this.url}/anthropic`,
      // The form the harness protocol promises: the base ends in /v1 (harness.proto, LlmEndpoint).
      openaiBaseUrl: response.openaiBaseUrl || `${this.url}/openai/v1`,
      headers: { ...response.headers },
    };
  }

  /** The job's metered usage, totals and per agent. */
  async jobUsage(jobId: string): Promise<GetUsageResponse> {
    try {
      return await this.#tokens.getUsage({ job: jobId });
    } catch (error) {
      throw new OrchestratorError(
        "unavailable",
        `the LLM proxy did not answer for the job's usage: ${ConnectError.from(error).rawMessage}`,
      );
    }
  }

  /** Every job's metered usage of the calls that started in [since, until), totals and per agent. */
  async usageBetween(since: Date, until: Date): Promise<SummarizeUsageResponse> {
    try {
      return await this.#tokens.summarizeUsage({ since: timestampFromDate(since), until: timestampFromDate(until) });
    } catch (error) {
      throw proxyRefusal(error, {
        what: "did not sum the usage",
        method: `SummarizeUsage (upgrade the LLM proxy at ${this.url} to this orchestrator's version)`,
      });
    }
  }

  async revoke(options: { tokenId: string }): Promise<{ neverUsed: boolean }> {
    // Bounded: a proxy that takes the call and never answers holds neither a job's end nor a sweep for good.
    const response = await this.#tokens.revokeSessionToken(
      { session: options.tokenId },
      { timeoutMs: REVOKE_TIMEOUT_MS },
    );
    // Only a proxy that recorded every use can say "never"; an unknown session, or an older proxy, proves nothing.
    return { neverUsed: response.use === TokenUse.NEVER };
  }

  async setSecret(options: { name: string; value: string }): Promise<void> {
    try {
      await this.#secrets.setSecret({ name: options.name, value: options.value });
    } catch (error) {
      throw proxyRefusal(error, { what: "did not take the secret" });
    }
  }

  async listSecrets(): Promise<SecretListing[]> {
    try {
      const { secrets } = await this.#secrets.listSecrets({});
      return secrets.map((s) => ({
        name: s.name,
        createdAt: s.createdAt ? timestampDate(s.createdAt) : undefined,
        updatedAt: s.updatedAt ? timestampDate(s.updatedAt) : undefined,
      }));
    } catch (error) {
      throw proxyRefusal(error, { what: "could not list its secrets" });
    }
  }

  async deleteSecret(options: { name: string }): Promise<void> {
    try {
      await this.#secrets.deleteSecret({ name: options.name });
    } catch (error) {
      throw proxyRefusal(error, { what: `did not delete secret ${options.name}` });
    }
  }
}

/**
 * The proxy's refusal as the orchestrator's: a bad argument and a missing secret are the caller's, a method the proxy
 * lacks (an older version, `method` says which and what to do) is a precondition; the rest is the proxy being away.
 */
function proxyRefusal(error: unknown, o: { what: string; method?: string }): OrchestratorError {
  const err = ConnectError.from(error);
  if (err.code === Code.InvalidArgument) return invalidArgument(err.rawMessage);
  if (err.code === Code.NotFound) return notFound(err.rawMessage);
  if (err.code === Code.Unimplemented && o.method)
    return new OrchestratorError("failed_precondition", `the LLM proxy does not serve ${o.method}`);
  return new OrchestratorError("unavailable", `the LLM proxy ${o.what}: ${err.rawMessage}`);
}
