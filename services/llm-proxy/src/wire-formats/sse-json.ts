// The JSON data of server-sent events, for the formats that read or rewrite
// them (meters, stream scrubbers).
import { sseData } from "../sse-event-splitter.js";

export type Json = Record<string, unknown>;

export function isObject(value: unknown): value is Json {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

const UNREAD = Symbol("unread");

/**
 * A reader that remembers the last event it read: a stream's meter and then
 * its scrubber read each event in turn.
 */
export function rememberingLast<T>(read: (event: string) => T | undefined): {
  read: (event: string) => T | undefined;
  remember: (event: string, value: T) => void;
} {
  let lastEvent: string | undefined;
  let last: T | undefined | typeof UNREAD = UNREAD;
  return {
    read(event) {
      if (event === lastEvent && last !== UNREAD) return last;
      const value = read(event);
      lastEvent = event;
      last = value;
      return value;
    },
    remember(event, value) {
      lastEvent = event;
      last = value;
    },
  };
}

const parsedEvents = rememberingLast((event): Json | undefined => {
  const data = sseData(event);
  if (data === undefined) return undefined;
  try {
    const value: unknown = JSON.parse(data);
    return isObject(value) ? value : undefined;
  } catch {
    return undefined;
  }
});

/**
 * The event's data parsed, or undefined when it is not a JSON object. The
 * value may be the one handed out for the same event a moment ago: read it,
 * never change it.
 */
export function parseEvent(event: string): Json | undefined {
  return parsedEvents.read(event);
}

/**
 * Tells parseEvent what `event` parses to, without parsing it: a meter that
 * rewrote an event it parsed (taking out a member) hands the scrubber the
 * rewrite's value with the rewrite. Never change `parsed` afterwards.
 */
export function rememberParsed(event: string, parsed: Json): void {
  parsedEvents.remember(event, parsed);
}

/** The event with its data replaced by `data` (one line), its other lines kept. */
export function withData(event: string, data: unknown): string {
  return withDataText(event, JSON.stringify(data));
}

/** The event with its data replaced by a JSON text of one line, its other lines kept. */
export function withDataText(event: string, json: string): string {
  let out = "";
  let wrote = false;
  for (const line of event.split(/\r?\n/)) {
    if (line === "") continue;
    if (!line.startsWith("data:")) out += `${line}\n`;
    else if (!wrote) {
      out += `data: ${json}\n`;
      wrote = true;
    }
  }
  return `${out}\n`;
}

/**
 * The event with its one string member `"name":"from"` (as JSON.stringify
 * writes it) made `"name":"to"`, spliced into the provider's own text; undefined
 * when that member is not there exactly once, and then the caller writes the
 * data again. A quote not preceded by a backslash is never inside a string, so
 * the match is a member; a stream scrubber holding back the end of a delta
 * rewrites nearly every delta event, and parsing left the text as it is.
 */
export function withStringMember(event: string, name: string, from: string, to: string): string | undefined {
  const needle = `"${name}":${JSON.stringify(from)}`;
  const at = event.indexOf(needle);
  if (at < 0 || event.charCodeAt(at - 1) === BACKSLASH || event.includes(needle, at + 1)) return undefined;
  return `${event.slice(0, at)}"${name}":${JSON.stringify(to)}${event.slice(at + needle.length)}`;
}

const BACKSLASH = 0x5c;

/** A whole answer's `usage` object, or undefined when it reports none. */
export function usageOf(answer: unknown): Json | undefined {
  const usage = isObject(answer) ? answer.usage : undefined;
  return isObject(usage) ? usage : undefined;
}

/** A field's value when it is a string. */
export function stringOf(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}
