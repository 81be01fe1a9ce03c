// The common part of the formats' stream scrubbers. A key sent one short
// delta at a time never sits whole in one event, so each streamed text's
// deltas go through a HeldTextScrubber: a delta is rewritten to carry what is
// safe to send, the rest rides on the next delta, and what is still held when
// the text ends is sent in one more delta event just before the event that
// ends it. What goes out is then scrubbed as text, once, for every other
// string of every event (the scan reads JSON escapes, and a run cannot cross
// a JSON string's quotes).
import type { HeldTextScrubber, SecretScrubber } from "@oz0/serving";
import { withData, withStringMember, type Json } from "./sse-json.js";
import type { StreamScrubber } from "./wire-format.js";

/** One streamed text: its held part, and its last delta event (the shape of the event that carries what is still held). */
interface Text {
  held: HeldTextScrubber;
  last: Json;
  /** The delta event `event` carrying `text` instead of its own. */
  withText: (event: Json, text: string) => Json;
  /** What the format groups texts by (an output item), for ending them together. */
  group: unknown;
}

export abstract class DeltaStreamScrubber implements StreamScrubber {
  protected readonly scrubber: SecretScrubber;
  /** The texts streaming now, by a key the format makes (a content block, an output item's part). */
  readonly #texts = new Map<string, Text>();

  constructor(scrubber: SecretScrubber) {
    this.scrubber = scrubber;
  }

  push(event: string): string {
    return this.scrubber.text(this.rewrite(event));
  }

  /** The event with its streamed texts held back or let go, preceded by events of held text it ends. */
  protected abstract rewrite(event: string): string;

  /**
   * One delta of the text `key`: the event as it came when all of `value` can
   * go, rewritten to carry what can (`withText`), or "" when nothing can yet.
   */
  protected delta(options: {
    key: string;
    event: string;
    parsed: Json;
    value: string;
    withText: Text["withText"];
    /** The name of the member whose string is `value` (`text`, `delta`): what it sends is spliced in there. */
    field: string;
    group?: unknown;
  }): string {
    const { key, event, parsed, value } = options;
    let text = this.#texts.get(key);
    if (!text) {
      text = { held: this.scrubber.held(), last: parsed, withText: options.withText, group: options.group };
      this.#texts.set(key, text);
    }
    text.last = parsed;
    const sent = text.held.push(value);
    // Nothing of this delta may go yet: the client gets it with the next one.
    if (sent === "") return "";
    if (sent === value) return event;
    return withStringMember(event, options.field, value, sent) ?? withData(event, text.withText(parsed, sent));
  }

  /** The held part of each text `which` picks (every text by default) as one more delta event each; those texts have ended. */
  protected end(which: (key: string, group: unknown) => boolean = () => true): string {
    let out = "";
    for (const [key, text] of [...this.#texts]) {
      if (!which(key, text.group)) continue;
      this.#texts.delete(key);
      const tail = text.held.flush();
      if (tail !== "")
        out += `event: ${String(text.last.type)}\ndata: ${JSON.stringify(text.withText(text.last, tail))}\n\n`;
    }
    return out;
  }
}
