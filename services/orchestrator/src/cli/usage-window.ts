// The window `oz0 usage --since/--until` sums: each end how long ago, a
// date, or a date and time with its zone, read the same on every machine;
// anything else, an empty window or a backwards one is a usage error.
import { CliError } from "./cli-error.js";
import { EXIT } from "./exit-codes.js";

const AGO = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/;
/** A date, or a date and a time with its zone: `2026-12-01`, `2026-12-01T08:00Z`, `2026-12-01T08:00:30.5+01:00`. */
const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?(Z|[+-]\d{2}:\d{2}))?$/;

/**
 * A time `oz0 usage --since/--until` takes: how long before `from` (`24h`, `7d`, `1h30m`), or a date (midnight
 * UTC) or a date and time with its zone (`2026-12-01T08:00Z`: without one it would be read in the local zone, a
 * different window on a laptop and on a server). Undefined for anything else, a day the month lacks included.
 */
export function parseWhen(text: string, from: Date): Date | undefined {
  const ago = AGO.exec(text);
  if (ago && text !== "") {
    const [, d, h, m, s] = ago.map((part) => Number(part ?? 0));
    const time = from.getTime() - (((d! * 24 + h!) * 60 + m!) * 60 + s!) * 1000;
    // Further back than a date can hold (`99999999999d`) is not a time.
    return Number.isSafeInteger(time) && !Number.isNaN(new Date(time).getTime()) ? new Date(time) : undefined;
  }
  const iso = ISO.exec(text);
  if (!iso) return undefined;
  const [, year, month, day, hour = "00", minute = "00", second = "00"] = iso;
  // Date.parse moves a day the month lacks to the next month (2026-02-30 is March 2nd): refused instead.
  const date = new Date(Date.UTC(Number(year), Number(month) - 1, Number(day)));
  if (date.getUTCMonth() !== Number(month) - 1 || date.getUTCDate() !== Number(day)) return undefined;
  if (Number(hour) > 23 || Number(minute) > 59 || Number(second) > 59) return undefined;
  const time = Date.parse(text.length === 10 ? `${text}T00:00:00Z` : text);
  return Number.isNaN(time) ? undefined : new Date(time);
}

/**
 * The window to sum: `until` (default `now`) and `since`, how long before `now` when given, else the day before
 * `until` (so --until alone moves the whole window).
 */
export function usageWindow(options: { since?: string; until?: string; now: Date }): { since: Date; until: Date } {
  const when = (flag: string, text: string, from: Date): Date => {
    const time = parseWhen(text, from);
    if (!time)
      throw new CliError(
        `--${flag} ${text}: give how long ago (24h, 7d, 1h30m) or a date, or a date and time with its zone (2026-12-01, 2026-12-01T08:00Z)`,
        EXIT.usage,
      );
    return time;
  };
  const until = options.until === undefined ? options.now : when("until", options.until, options.now);
  const since = options.since === undefined ? when("since", "24h", until) : when("since", options.since, options.now);
  if (since.getTime() === until.getTime())
    throw new CliError(
      `the window from ${since.toISOString()} to ${until.toISOString()} is empty: give a --since before --until`,
      EXIT.usage,
    );
  if (since.getTime() > until.getTime())
    throw new CliError(
      `--since (${since.toISOString()}) must come before --until (${until.toISOString()})`,
      EXIT.usage,
    );
  return { since, until };
}
