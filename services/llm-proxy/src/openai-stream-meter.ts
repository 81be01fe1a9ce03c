// Meters an OpenAI Chat Completions stream exactly. The proxy always asks
// for the usage chunk (`stream_options.include_usage`); when the client did
// not, the usage chunk is dropped and the `usage: null` field the option adds
// to every chunk is removed, so the client sees what it asked for.
import type { TokenUsage } from "./proxy-store.js";
import { sseData } from "./sse-event-splitter.js";
import type { StreamMeterReading } from "./anthropic-stream-meter.js";
import { estimateTokens, fromOpenAiUsage, type OpenAiUsageFields } from "./wire-usage.js";

interface Chunk {
  choices?: { delta?: { content?: string | null; reasoning_content?: string | null; tool_calls?: { function?: { arguments?: string } }[] } }[];
  usage?: OpenAiUsageFields | null;
  error?: unknown;
}

export class OpenAiStreamMeter {
  readonly #clientWantsUsage: boolean;
  #usage: TokenUsage | undefined;
  #complete = false;
  #errored = false;
  #characters = 0;

  constructor(options: { clientWantsUsage: boolean }) {
    this.#clientWantsUsage = options.clientWantsUsage;
  }

  /** Reads one whole SSE event; returns what to forward to the client, or undefined to drop it. */
  onEvent(event: string): string | undefined {
    const data = sseData(event);
    if (data === undefined) return event;
    if (data.trim() === "[DONE]") {
      this.#complete = true;
      return event;
    }
    let chunk: Chunk;
    try {
      chunk = JSON.parse(data);
    } catch {
      return event;
    }
    if (chunk.error) this.#errored = true;
    for (const choice of chunk.choices ?? []) {
      const delta = choice.delta;
      if (!delta) continue;
      this.#characters += (delta.content ?? "").length + (delta.reasoning_content ?? "").length;
      for (const call of delta.tool_calls ?? []) this.#characters += (call.function?.arguments ?? "").length;
    }
    if (chunk.usage) this.#usage = fromOpenAiUsage(chunk.usage);
    if (this.#clientWantsUsage || !("usage" in chunk)) return event;
    // The client did not ask for usage: hide what the injected option added.
    if (chunk.usage && (chunk.choices ?? []).length === 0) return undefined;
    delete chunk.usage;
    return `data: ${JSON.stringify(chunk)}\n\n`;
  }

  get complete(): boolean {
    return this.#complete;
  }

  get errored(): boolean {
    return this.#errored;
  }

  /** What was used so far; `estimatedInput` stands in for the input until the usage chunk came. */
  reading(estimatedInput: number): StreamMeterReading {
    if (this.#usage) return { usage: { ...this.#usage }, estimated: false };
    return {
      usage: { input: estimatedInput, output: estimateTokens(this.#characters), cacheRead: 0, cacheWrite: 0, reasoning: 0 },
      estimated: true,
    };
  }
}
