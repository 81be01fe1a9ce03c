// The common part of the formats' stream scrubbers. A key sent one short
// delta at a time never sits whole in one event, so each streamed text's
// deltas go through a HeldTextScrubber: a delta is rewritten to carry what is
// safe to send, the rest rides on the next delta, and what is still held when
// the text ends is sent in one more delta event just before the event that
// ends it. What goes out is then scrubbed as text, once, for every other
// string of every event (the scan reads JSON escapes, and a run cannot cross
// a JSON string's quotes); of a delta event read in its text, the part
// before its text is not read again when the last clean one had the same
// (FramedTextScrubber).
import type { FramedTextScrubber, HeldTextScrubber, SecretScrubber } from "@oz0/serving";
import { parseEvent, withData, withStringMember, type Json } from "./sse-json.js";
import { withSentText, type TextEvent, type TextPlacement } from "./text-delta-events.js";
import type { StreamScrubber } from "./wire-format.js";

/** One streamed text: its held part, and its last delta event (the shape of the event that carries what is still held). */
interface Text {
  held: HeldTextScrubber;
  /** The last delta event, and what it parsed to when it was parsed (else it is parsed if needed). */
  lastEvent: string;
  last: Json | undefined;
  /** The delta event `event` carrying `text` instead of its own. */
  withText: (event: Json, text: string) => Json;
  /** What the format groups texts by (an output item), for ending them together. */
  group: unknown;
}

/**
 * How a delta event was read: parsed (what it parsed to, and the name of the
 * member whose string is the text: `text`, `delta`), or read in its text,
 * which says where the text's JSON string lies (text-delta-events.ts).
 */
export type DeltaRead = { parsed: Json; field: string } | TextPlacement;

export abstract class DeltaStreamScrubber implements StreamScrubber {
  protected readonly scrubber: SecretScrubber;
  /** The texts streaming now, by a key the format makes (a content block, an output item's part). */
  readonly #texts = new Map<string, Text>();
  readonly #framed: FramedTextScrubber;

  constructor(scrubber: SecretScrubber) {
    this.scrubber = scrubber;
    this.#framed = scrubber.framed();
  }

  push(event: string): string {
    const out = this.rewrite(event);
    return typeof out === "string" ? this.scrubber.text(out) : this.#framed.scrub(out.event, out.textStart, out);
  }

  /**
   * The event with its streamed texts held back or let go, preceded by events of held text it ends;
   * a delta event read in its text says where its text lies.
   */
  protected abstract rewrite(event: string): string | TextEvent;

  /**
   * One delta of the text `key`: the event as it came when all of `value` can
   * go, rewritten to carry what can, or "" when nothing can yet. A delta read
   * in its text says where its text lies, so the event is scrubbed framed.
   */
  protected delta(options: {
    key: string;
    event: string;
    read: DeltaRead;
    value: string;
    withText: Text["withText"];
    group?: unknown;
  }): string | TextEvent {
    const { key, event, read, value } = options;
    const parsed = "parsed" in read ? read.parsed : undefined;
    let text = this.#texts.get(key);
    if (!text) {
      text = {
        held: this.scrubber.held(),
        lastEvent: event,
        last: parsed,
        withText: options.withText,
        group: options.group,
      };
      this.#texts.set(key, text);
    }
    text.lastEvent = event;
    text.last = parsed;
    const sent = text.held.push(value);
    // Nothing of this delta may go yet: the client gets it with the next one.
    if (sent === "") return "";
    if (!("parsed" in read)) return withSentText(event, read, { came: value, sent, plain: text.held.sentPlain });
    if (sent === value) return event;
    return withStringMember(event, read.field, value, sent) ?? withData(event, text.withText(read.parsed, sent));
  }

  /** The held part of each text `which` picks (every text by default) as one more delta event each; those texts have ended. */
  protected end(which: (key: string, group: unknown) => boolean = () => true): string {
    let out = "";
    for (const [key, text] of [...this.#texts]) {
      if (!which(key, text.group)) continue;
      this.#texts.delete(key);
      const tail = text.held.flush();
      if (tail === "") continue;
      // A delta read in its text is parsed only now, when its shape carries held text.
      const last = text.last ?? parseEvent(text.lastEvent)!;
      out += `event: ${String(last.type)}\ndata: ${JSON.stringify(text.withText(last, tail))}\n\n`;
    }
    return out;
  }
}
