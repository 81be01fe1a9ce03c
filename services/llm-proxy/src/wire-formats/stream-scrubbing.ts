// The common part of the formats' stream scrubbers. A key sent one short
// delta at a time never sits whole in one event, so each streamed text's
// deltas go through a HeldTextScrubber: a delta is rewritten to carry what is
// safe to send, the rest rides on the next delta, and what is still held when
// the text ends is sent in one more delta event just before the event that
// ends it. What goes out is then scrubbed as text, once, for every other
// string of every event (the scan reads JSON escapes, and a run cannot cross
// a JSON string's quotes).
import type { SecretScrubber } from "@oz0/serving";
import type { StreamScrubber } from "./wire-format.js";

export abstract class DeltaStreamScrubber implements StreamScrubber {
  protected readonly scrubber: SecretScrubber;

  constructor(scrubber: SecretScrubber) {
    this.scrubber = scrubber;
  }

  push(event: string): string {
    return this.scrubber.text(this.rewrite(event));
  }

  /** The event with its streamed texts held back or let go, preceded by events of held text it ends. */
  protected abstract rewrite(event: string): string;
}
