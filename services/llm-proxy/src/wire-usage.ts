// Provider usage objects normalised to TokenUsage. Anthropic reports input
// without cache tokens; OpenAI counts cached tokens inside prompt_tokens and
// reasoning tokens inside completion_tokens.
import type { TokenUsage } from "./proxy-store.js";

/** Anthropic `usage` fields; all optional because message_delta may carry any subset. */
export interface AnthropicUsageFields {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
}

export function fromAnthropicUsage(usage: AnthropicUsageFields | undefined): TokenUsage {
  return {
    input: num(usage?.input_tokens),
    output: num(usage?.output_tokens),
    cacheRead: num(usage?.cache_read_input_tokens),
    cacheWrite: num(usage?.cache_creation_input_tokens),
    reasoning: 0,
  };
}

export interface OpenAiUsageFields {
  prompt_tokens?: number | null;
  completion_tokens?: number | null;
  prompt_tokens_details?: { cached_tokens?: number | null } | null;
  completion_tokens_details?: { reasoning_tokens?: number | null } | null;
}

export function fromOpenAiUsage(usage: OpenAiUsageFields | undefined): TokenUsage {
  const cached = num(usage?.prompt_tokens_details?.cached_tokens);
  return {
    input: Math.max(0, num(usage?.prompt_tokens) - cached),
    output: num(usage?.completion_tokens),
    cacheRead: cached,
    cacheWrite: 0,
    reasoning: num(usage?.completion_tokens_details?.reasoning_tokens),
  };
}

function num(value: number | null | undefined): number {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
}

/** About four characters a token: how estimates are made when a provider reported nothing. */
export function estimateTokens(characters: number): number {
  return Math.ceil(characters / 4);
}
