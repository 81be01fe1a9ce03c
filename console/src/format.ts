// How values of the API read on the page.
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { JobState, ApprovalState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { escapeRefusedCharacters } from "@oz0/harness/text";

export const JOB_STATES: readonly JobState[] = [
  JobState.PENDING,
  JobState.RUNNING,
  JobState.WAITING,
  JobState.SUCCEEDED,
  JobState.FAILED,
  JobState.CANCELLED,
];

/** `JobState.WAITING` → `waiting`. */
export function stateName(state: JobState): string {
  return (JobState[state] ?? "unspecified").toLowerCase();
}

export function approvalStateName(state: ApprovalState): string {
  return (ApprovalState[state] ?? "unspecified").toLowerCase().replace("_", " ");
}

export function stopReasonName(reason: StopReason): string {
  return (StopReason[reason] ?? "unspecified").toLowerCase().replace("_", " ");
}

export function isTerminal(state: JobState): boolean {
  return state === JobState.SUCCEEDED || state === JobState.FAILED || state === JobState.CANCELLED;
}

export function dateOf(ts: Timestamp | undefined): Date | undefined {
  return ts ? timestampDate(ts) : undefined;
}

/** `14:03:07` today, else `2025-01-31 14:03`. */
export function clock(date: Date | undefined): string {
  if (!date) return "";
  const today = new Date().toDateString() === date.toDateString();
  const iso = new Date(date.getTime() - date.getTimezoneOffset() * 60_000).toISOString();
  return today ? iso.slice(11, 19) : `${iso.slice(0, 10)} ${iso.slice(11, 16)}`;
}

/** 850 → `850 ms`, 61_000 → `1 min 1 s`. */
export function duration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/**
 * `text` with each character that would change how it reads written as a `\uXXXX` escape: shown, not obeyed.
 * A harness chooses its tool names, titles and inputs; with a bidirectional override it could show `rm -rf ~/`
 * reversed in an approval card, and a control character or a separator hides what the text holds. The list is
 * the one the harness host's id rules, `oz0` and the orchestrator's messages escape (`@oz0/harness/text`);
 * line feeds and tabs stay.
 */
export function visible(text: string): string {
  return escapeRefusedCharacters(text, { keepLinesAndTabs: true });
}

/**
 * Characters a page draws as nothing (Unicode's Default_Ignorable_Code_Point): zero-width spaces and joiners, the
 * soft hyphen, variation selectors, tag characters. Tag characters spell ASCII that no page shows and a model reads.
 */
const INVISIBLE = /\p{Default_Ignorable_Code_Point}/gu;

/**
 * visible(), and every character a page draws as nothing written as an escape too (a character beyond U+FFFF as
 * its two halves, as JSON writes them): for what runs, a tool's name and input, where a hidden character is part of
 * the call a person approves without seeing it. Not for prose: emoji are joined and styled by such characters.
 */
export function visibleExactly(text: string): string {
  return visible(text).replace(INVISIBLE, (c) =>
    Array.from({ length: c.length }, (_, i) => `\\u${c.charCodeAt(i).toString(16).padStart(4, "0")}`).join(""),
  );
}

/** A tool's input or output as indented JSON, visibleExactly(): the escapes are JSON's own, so it parses back to the same value. */
export function json(value: unknown): string {
  if (value === undefined || value === null) return "";
  return visibleExactly(typeof value === "string" ? value : JSON.stringify(value, null, 2));
}

export function shortId(id: string): string {
  return id.length > 14 ? `${id.slice(0, 14)}…` : id;
}

/** `14:03:07.125`: when a step began or ended, to the millisecond. */
export function clockMs(date: Date | undefined): string {
  if (!date) return "";
  const iso = new Date(date.getTime() - date.getTimezoneOffset() * 60_000).toISOString();
  return iso.slice(11, 23);
}

/** 1234 → `1.234 s`. */
export function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(3)} s`;
}

/** 1234567n → `1,234,567`. */
export function count(n: bigint | number): string {
  return Number(n).toLocaleString("en-US");
}

/** $0.0123; costs below a cent keep four decimals. */
export function usd(cost: number): string {
  return `$${cost >= 1 ? cost.toFixed(2) : cost.toFixed(4)}`;
}
