// Anthropic's token counting (`POST /v1/messages/count_tokens`): free, so
// passed through with the provider's key and not metered. Counting a request
// still has Anthropic fetch its URLs and reach its MCP servers, so it is held
// to the rules of a Messages request (provider-side-features.ts).
import {
  ANTHROPIC_DEFAULT_HEADERS,
  ANTHROPIC_FORWARDED_HEADERS,
  anthropicErrorBody,
  anthropicProviderSide,
} from "./anthropic-messages.js";
import type { WireFormat } from "./wire-format.js";

export const anthropicCountTokens: WireFormat = {
  name: "anthropic-count-tokens",
  route: "messages/count_tokens",
  forwardedHeaders: ANTHROPIC_FORWARDED_HEADERS,
  defaultHeaders: ANTHROPIC_DEFAULT_HEADERS,
  keyHeader: "x-api-key",
  errorBody: anthropicErrorBody,
  providerSide: anthropicProviderSide,
};
