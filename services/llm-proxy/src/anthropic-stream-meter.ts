// Meters an Anthropic Messages stream exactly: `message_start` carries the
// input and cache usage, `message_delta` the final counts, merged field by
// field (a field absent or null in the delta keeps the start's value). A
// stream that ends early is estimated from the text it carried.
import type { TokenUsage } from "./proxy-store.js";
import { sseData } from "./sse-event-splitter.js";
import { estimateTokens, fromAnthropicUsage, type AnthropicUsageFields } from "./wire-usage.js";

export interface StreamMeterReading {
  usage: TokenUsage;
  /** True when the provider's final counts never came and output was estimated. */
  estimated: boolean;
}

export class AnthropicStreamMeter {
  #usage: AnthropicUsageFields = {};
  #sawStart = false;
  #sawDelta = false;
  #complete = false;
  #errored = false;
  #characters = 0;

  /** Reads one whole SSE event. */
  onEvent(event: string): void {
    const data = sseData(event);
    if (data === undefined) return;
    let parsed: { type?: string; message?: { usage?: AnthropicUsageFields }; usage?: AnthropicUsageFields; delta?: Record<string, unknown> };
    try {
      parsed = JSON.parse(data);
    } catch {
      return;
    }
    switch (parsed.type) {
      case "message_start":
        this.#sawStart = true;
        this.#usage = { ...(parsed.message?.usage ?? {}) };
        break;
      case "message_delta":
        this.#sawDelta = true;
        for (const [field, value] of Object.entries(parsed.usage ?? {})) {
          if (typeof value === "number") (this.#usage as Record<string, number>)[field] = value;
        }
        break;
      case "content_block_delta": {
        const delta = parsed.delta ?? {};
        for (const key of ["text", "partial_json", "thinking"]) {
          const value = delta[key];
          if (typeof value === "string") this.#characters += value.length;
        }
        break;
      }
      case "message_stop":
        this.#complete = true;
        break;
      case "error":
        this.#errored = true;
        break;
      default:
        break;
    }
  }

  /** True once `message_stop` arrived. */
  get complete(): boolean {
    return this.#complete;
  }

  /** True when the stream carried an `error` event. */
  get errored(): boolean {
    return this.#errored;
  }

  get started(): boolean {
    return this.#sawStart;
  }

  /**
   * What was used so far. `estimatedInput` stands in for the input when the
   * stream ended before `message_start`.
   */
  reading(estimatedInput: number): StreamMeterReading {
    const usage = fromAnthropicUsage(this.#usage);
    if (this.#sawDelta) return { usage, estimated: false };
    if (!this.#sawStart) usage.input = estimatedInput;
    usage.output = Math.max(usage.output, estimateTokens(this.#characters));
    return { usage, estimated: true };
  }
}
