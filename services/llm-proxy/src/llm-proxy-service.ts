// Thin gRPC handlers over the domain modules: SecretService (write-only keys)
// and LlmProxyService (session tokens, usage).
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import {
  AgentUsageSchema,
  GetUsageResponseSchema,
  SummarizeUsageResponseSchema,
  ListSecretsResponseSchema,
  MintSessionTokenResponseSchema,
  RevokeSessionTokenResponseSchema,
  SecretInfoSchema,
  SetSecretResponseSchema,
  DeleteSecretResponseSchema,
  TokenUse,
  UsageSchema,
  type LlmProxyService,
  type SecretService,
  type Usage,
} from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import type { KeyVault } from "./key-vault.js";
import type { Metering } from "./metering.js";
import { ProxyError } from "./proxy-error.js";
import type { BudgetStore, ModelCallStore, UsageTotals } from "./proxy-store.js";
import type { SessionTokens } from "./session-tokens.js";

const CODES: Record<ProxyError["code"], Code> = {
  invalid_argument: Code.InvalidArgument,
  not_found: Code.NotFound,
  kek_invalid: Code.FailedPrecondition,
  kek_mismatch: Code.FailedPrecondition,
  unauthenticated: Code.Unauthenticated,
  permission_denied: Code.PermissionDenied,
  budget_exhausted: Code.ResourceExhausted,
  model_calls_exhausted: Code.ResourceExhausted,
  price_unknown: Code.FailedPrecondition,
};

async function mapped<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    if (error instanceof ProxyError) throw new ConnectError(error.message, CODES[error.code]);
    throw error;
  }
}

export function secretService(vault: KeyVault): Partial<ServiceImpl<typeof SecretService>> {
  return {
    setSecret: (request) =>
      mapped(async () => create(SetSecretResponseSchema, await vault.set(request.name, request.value))),
    deleteSecret: (request) =>
      mapped(async () => {
        await vault.delete(request.name);
        return create(DeleteSecretResponseSchema, {});
      }),
    listSecrets: async () =>
      create(ListSecretsResponseSchema, {
        secrets: (await vault.list()).map((s) =>
          create(SecretInfoSchema, {
            name: s.name,
            createdAt: timestampFromDate(s.createdAt),
            updatedAt: timestampFromDate(s.updatedAt),
          }),
        ),
      }),
  };
}

function usageMessage(totals: UsageTotals, nominal: (provider: string) => boolean): Usage {
  return create(UsageSchema, {
    calls: BigInt(totals.calls),
    failedCalls: BigInt(totals.failedCalls),
    attempts: BigInt(totals.attempts),
    inputTokens: BigInt(totals.usage.input),
    outputTokens: BigInt(totals.usage.output),
    cacheReadTokens: BigInt(totals.usage.cacheRead),
    cacheWriteTokens: BigInt(totals.usage.cacheWrite),
    reasoningTokens: BigInt(totals.usage.reasoning),
    costUsd: totals.costUsd,
    estimated: totals.estimated,
    nominal: totals.providers.some(nominal),
  });
}

export interface LlmProxyServiceOptions {
  tokens: SessionTokens;
  /** Session budgets and counts of model calls, dropped when a session's tokens are revoked. */
  budgets: Pick<BudgetStore, "forgetBudget"> & Pick<ModelCallStore, "forgetModelCalls">;
  metering: Metering;
  /** The proxy's own URL, to hand out ready-made base URLs. */
  publicUrl: () => string;
  /** Whether a provider's prices are nominal (a scripted provider: nobody is charged); its usage is marked so. Default: none. */
  nominalPrices?: (provider: string) => boolean;
}

export function llmProxyService(options: LlmProxyServiceOptions): Partial<ServiceImpl<typeof LlmProxyService>> {
  return {
    mintSessionToken: (request, context) =>
      mapped(async () => {
        // The orchestrator mints a session's token inside the session's span: its calls' spans go in that trace.
        const traceparent = context.requestHeader.get("traceparent");
        const { token } = await options.tokens.mint({
          job: request.job,
          agent: request.agent,
          session: request.session,
          budgetUsd: request.budgetUsd,
          maxModelCalls: request.maxModelCalls,
          ...(request.budgetSession ? { budgetSession: request.budgetSession } : {}),
          ...(traceparent !== null ? { traceparent } : {}),
        });
        const base = options.publicUrl();
        return create(MintSessionTokenResponseSchema, {
          token,
          headers: { "Oz0-Job": request.job, "Oz0-Agent": request.agent },
          anthropicBaseUrl: `${base}/anthropic`,
          openaiBaseUrl: `${base}/openai/v1`,
        });
      }),
    revokeSessionToken: (request) =>
      mapped(async () => {
        const revoked = await options.tokens.revoke({
          ...(request.token ? { token: request.token } : {}),
          ...(request.session ? { session: request.session } : {}),
        });
        for (const session of new Set(revoked.ended.map((r) => r.session))) {
          await options.budgets.forgetBudget(session);
          await options.budgets.forgetModelCalls(session);
        }
        const use = { never: TokenUse.NEVER, used: TokenUse.USED, unknown: TokenUse.UNSPECIFIED }[revoked.use];
        return create(RevokeSessionTokenResponseSchema, { revoked: revoked.ended.length, use });
      }),
    getUsage: async (request) => {
      if (!request.job) throw new ConnectError("GetUsage needs a job id", Code.InvalidArgument);
      const usage = await options.metering.usage(request.job);
      const nominal = options.nominalPrices ?? ((): boolean => false);
      return create(GetUsageResponseSchema, {
        job: request.job,
        total: usageMessage(usage.total, nominal),
        agents: [...usage.agents].map(([agent, totals]) =>
          create(AgentUsageSchema, { agent, usage: usageMessage(totals, nominal) }),
        ),
      });
    },
    summarizeUsage: async (request) => {
      if (!request.since || !request.until)
        throw new ConnectError(
          "SummarizeUsage needs since and until: the window whose calls it sums",
          Code.InvalidArgument,
        );
      const since = timestampDate(request.since);
      const until = timestampDate(request.until);
      if (Number.isNaN(since.getTime()) || Number.isNaN(until.getTime()))
        throw new ConnectError("SummarizeUsage's since and until must be times a date can hold", Code.InvalidArgument);
      if (!(since.getTime() < until.getTime()))
        throw new ConnectError(
          `SummarizeUsage's since (${since.toISOString()}) must come before its until (${until.toISOString()})`,
          Code.InvalidArgument,
        );
      const usage = await options.metering.usageBetween(since, until);
      const nominal = options.nominalPrices ?? ((): boolean => false);
      return create(SummarizeUsageResponseSchema, {
        since: request.since,
        until: request.until,
        total: usageMessage(usage.total, nominal),
        agents: [...usage.agents].map(([agent, totals]) =>
          create(AgentUsageSchema, { agent, usage: usageMessage(totals, nominal) }),
        ),
      });
    },
  };
}
