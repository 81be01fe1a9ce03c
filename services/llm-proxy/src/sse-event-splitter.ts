// Splits a server-sent-events byte stream into whole events (each with its
// blank-line terminator), so the proxy forwards, meters or drops event by event.
import { StringDecoder } from "node:string_decoder";

const BOUNDARY = /\r?\n\r?\n/g;

export class SseEventSplitter {
  readonly #decoder = new StringDecoder("utf8");
  #buffer = "";

  /** Whole events completed by this chunk, in order. */
  push(chunk: Buffer): string[] {
    const buffer = this.#buffer + this.#decoder.write(chunk);
    const events: string[] = [];
    let start = 0;
    if (buffer.includes("\r")) {
      BOUNDARY.lastIndex = 0;
      for (let match = BOUNDARY.exec(buffer); match; match = BOUNDARY.exec(buffer)) {
        const end = match.index + match[0].length;
        events.push(buffer.slice(start, end));
        start = end;
      }
    } else {
      // The common stream, lines ended by \n alone: found without the expression, a cost in every event.
      for (let at = buffer.indexOf("\n\n"); at >= 0; at = buffer.indexOf("\n\n", start)) {
        events.push(buffer.slice(start, at + 2));
        start = at + 2;
      }
    }
    this.#buffer = buffer.slice(start);
    return events;
  }

  /** Bytes received after the last whole event (a stream cut mid-event). */
  get pending(): string {
    return this.#buffer;
  }
}

/** The `data:` payload of an event, lines joined; undefined when it has none. */
export function sseData(event: string): string | undefined {
  // The common event, one data line and no \r, without splitting it into lines.
  if (!event.includes("\r")) {
    const start = dataLine(event, 0);
    if (start < 0) return undefined;
    const newline = event.indexOf("\n", start);
    const end = newline < 0 ? event.length : newline;
    if (newline < 0 || dataLine(event, newline + 1) < 0)
      return event.charAt(start + 5) === " " ? event.slice(start + 6, end) : event.slice(start + 5, end);
  }
  let data: string | undefined;
  for (const line of event.split(/\r?\n/)) {
    if (!line.startsWith("data:")) continue;
    const value = line.charAt(5) === " " ? line.slice(6) : line.slice(5);
    data = data === undefined ? value : `${data}\n${value}`;
  }
  return data;
}

/** Where the first line starting `data:` at or after `from` (a line's start) begins, or -1. */
function dataLine(event: string, from: number): number {
  if (event.startsWith("data:", from)) return from;
  const at = event.indexOf("\ndata:", from);
  return at < 0 ? -1 : at + 1;
}
