// The window SummarizeUsage sums, checked before the LLM proxy is asked: two
// times a date can hold, the first before the second, at most a bit over a
// year apart (the proxy reads every call in it again at each request, and a
// viewer may ask as often as they like).
import { invalidArgument } from "../orchestrator-error.js";

export const MAX_USAGE_WINDOW_DAYS = 400;

export function checkUsageWindow(since: Date, until: Date): void {
  if (Number.isNaN(since.getTime()) || Number.isNaN(until.getTime()))
    throw invalidArgument("SummarizeUsage's since and until must be times a date can hold");
  if (since.getTime() >= until.getTime())
    throw invalidArgument(
      `SummarizeUsage's since (${since.toISOString()}) must come before its until (${until.toISOString()})`,
    );
  const days = (until.getTime() - since.getTime()) / 86_400_000;
  if (days > MAX_USAGE_WINDOW_DAYS)
    throw invalidArgument(
      `SummarizeUsage sums at most ${MAX_USAGE_WINDOW_DAYS} days at once, not ${Math.ceil(days)}: ask for shorter windows and add them up`,
    );
}
