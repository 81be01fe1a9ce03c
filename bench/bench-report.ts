// What every benchmark prints around its numbers, one way for all of them:
// the machine (cores, Node version) and its load average before and after,
// because on a shared machine a ratio means little without them; and ratios
// only as the median of several rounds, never from one: a single round of
// events-throughput on a loaded machine once read 1.24 where runs of three
// rounds just before it read 0.47–0.54.
import { availableParallelism, loadavg } from "node:os";
import { performance } from "node:perf_hooks";

/** The fewest rounds a ratio is printed from. */
export const MIN_ROUNDS = 2;

export interface BenchReport {
  /**
   * Prints `label: median (min–max over N rounds)` of the per-round ratios,
   * or, from fewer than two rounds, says why no ratio is printed.
   * Returns the median, or undefined when it was not printed.
   */
  ratio(
    label: string,
    perRound: readonly number[],
    options?: { digits?: number; unit?: string; goal?: string },
  ): number | undefined;
  /** Prints the load average after the run and how long it took. Call once, at the end (also when the run failed). */
  end(): void;
}

const load = (): string =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");

/**
 * Prints the header line (`name: node v24.1.0, 2 cores, load average 1.92 2.10 2.31 (1, 5, 15 min)`)
 * and returns the report that prints ratios and the closing line.
 */
export function startReport(name: string): BenchReport {
  const started = performance.now();
  console.log(
    `${name}: node ${process.version}, ${availableParallelism()} cores, load average before ${load()} (1, 5, 15 min)`,
  );
  let ended = false;
  return {
    ratio(label, perRound, options = {}) {
      const rounds = perRound.filter((x) => Number.isFinite(x));
      if (rounds.length < MIN_ROUNDS) {
        console.log(
          `${label}: no ratio from ${rounds.length} round${rounds.length === 1 ? "" : "s"}; run at least ${MIN_ROUNDS} (one round on a shared machine is noise)`,
        );
        return undefined;
      }
      const digits = options.digits ?? 2;
      const unit = options.unit ?? "";
      const m = median(rounds);
      const spread = `${Math.min(...rounds).toFixed(digits)}–${Math.max(...rounds).toFixed(digits)}`;
      console.log(
        `${label}: ${m.toFixed(digits)}${unit} (median; ${spread} over ${rounds.length} rounds)${options.goal ? `  goal ${options.goal}` : ""}`,
      );
      return m;
    },
    end() {
      if (ended) return;
      ended = true;
      console.log(
        `${name}: load average after ${load()} (1, 5, 15 min), ${((performance.now() - started) / 1000).toFixed(0)} s`,
      );
    },
  };
}

/**
 * The value at quantile `p` (0 to 1) of values sorted ascending, by nearest
 * rank: the smallest value with at least `p` of the values at or below it.
 * Every bench's p50 and p99 come from here, so they mean the same thing.
 */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

/** The median; an even count averages the middle two (the upper one alone would flatter). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
