// How many rows a listing's page holds: what its caller asked for, its
// default when the caller asked for none, and never more than its most. A
// page is built and sent whole, on the event loop every caller shares: a
// viewer asking ListJobs for 2^31 - 1 jobs held it for most of a second and
// grew the orchestrator by 400 MB (attacker review).
import { invalidArgument } from "./orchestrator-error.js";

/** The page's size, or invalid_argument saying to page on when `requested` is past `sizes.max`. */
export function pageSize(requested: number, sizes: { default: number; max: number }): number {
  const size = requested || sizes.default;
  if (size > sizes.max)
    throw invalidArgument(
      `limit ${size} is more than a page holds (${sizes.max}); ask for at most ${sizes.max} and page on with next_page_token`,
    );
  return size;
}
