// Token counts as providers report them: only finite, positive numbers count.
import type { TokenUsage } from "../proxy-store.js";
import { responseIdentity, type ResponseIdentity, type StreamMeter, type StreamMeterReading } from "./wire-format.js";

export function tokenCount(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
}

/** About four characters a token: how estimates are made when a provider reported nothing. */
export function estimateTokens(characters: number): number {
  return Math.ceil(characters / 4);
}

/** The first of the values that is a positive number (a request's output limit, under whichever name it uses). */
export function firstPositive(...values: unknown[]): number | undefined {
  return values.find((v): v is number => typeof v === "number" && v > 0);
}

/** A stream's reading: what the provider reported, else the input as estimated and the output from the characters streamed. */
export function streamReading(
  reported: TokenUsage | undefined,
  estimatedInput: number,
  characters: number,
): StreamMeterReading {
  if (reported) return { usage: { ...reported }, estimated: false };
  return {
    usage: { input: estimatedInput, output: estimateTokens(characters), cacheRead: 0, cacheWrite: 0, reasoning: 0 },
    estimated: true,
  };
}

/**
 * What every format's stream meter keeps: whether the stream completed, why
 * its answer ended, the characters of text streamed (for an estimate) and the
 * usage the provider reported. A format reads its events into these.
 */
export abstract class TextStreamMeter implements StreamMeter {
  protected ended = false;
  protected reason: string | undefined;
  protected characters = 0;
  protected reported: TokenUsage | undefined;
  #response: ResponseIdentity = {};

  abstract onEvent(event: string): string | undefined;

  /** True once the event that ends a complete stream arrived. */
  get complete(): boolean {
    return this.ended;
  }

  /** Why the answer ended, as the stream said. */
  get finishReason(): string | undefined {
    return this.reason;
  }

  /** The answer's id and model, from the first event that names them. */
  get response(): ResponseIdentity {
    return this.#response;
  }

  /** Keeps the first id and model an event's answer object names. */
  protected noteResponse(value: unknown): void {
    if (this.#response.id !== undefined && this.#response.model !== undefined) return;
    const seen = responseIdentity(value);
    this.#response = { id: this.#response.id ?? seen.id, model: this.#response.model ?? seen.model };
  }

  /** `estimatedInput` stands in for the input until the provider reported its usage. */
  reading(estimatedInput: number): StreamMeterReading {
    return streamReading(this.reported, estimatedInput, this.characters);
  }
}
