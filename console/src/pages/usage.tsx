// What the agents spent: every job's model calls that started in the last
// hour, day, week or 30 days, a row per agent and the sum, as the LLM proxy
// metered them (SummarizeUsage, the same figures as `oz0 usage --since`).
// Read when the page opens and when the window changes; "Read again" for now.
import { useState } from "preact/hooks";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { jobs } from "../api.js";
import { useRead } from "../reads.js";
import { href, NO_FILTER } from "../router.js";
import { UsageCells, UsageHeads } from "./usage-cells.js";

/** The windows offered, by how far back they reach. */
export const USAGE_WINDOWS = [
  { key: "1h", label: "Last hour", ms: 3_600_000 },
  { key: "24h", label: "Last 24 hours", ms: 86_400_000 },
  { key: "7d", label: "Last 7 days", ms: 7 * 86_400_000 },
  { key: "30d", label: "Last 30 days", ms: 30 * 86_400_000 },
] as const;

export function UsagePage({ window: chosen }: { window: string }) {
  const span = USAGE_WINDOWS.find((w) => w.key === chosen) ?? USAGE_WINDOWS[1];
  const [reads, setReads] = useState(0);
  const summary = useRead((signal) => {
    const until = new Date();
    return jobs.summarizeUsage(
      { since: timestampFromDate(new Date(until.getTime() - span.ms)), until: timestampFromDate(until) },
      { signal },
    );
  }, `${span.key}|${reads}`);
  const usage = summary.value?.usage;
  const agents = usage?.agents ?? [];
  return (
    <section aria-labelledby="usage-title">
      <h1 id="usage-title">Usage</h1>
      <p class="muted">
        What every job's model calls used, by agent, as the LLM proxy metered them; by when each call started.
      </p>
      <nav aria-label="Window" class="filters">
        {USAGE_WINDOWS.map((w) => (
          <a key={w.key} href={href({ page: "usage", window: w.key })} aria-current={w === span ? "page" : undefined}>
            {w.label}
          </a>
        ))}{" "}
        <button type="button" onClick={() => setReads((n) => n + 1)}>
          Read again
        </button>
      </nav>
      {summary.error ? (
        <p role="alert" class="error">
          {summary.error}
        </p>
      ) : null}
      {summary.value === undefined && !summary.error ? <p>Loading…</p> : null}
      {usage && agents.length === 0 ? <p data-testid="usage-none">No model calls in this window.</p> : null}
      {usage && agents.length > 0 ? (
        <table class="usage" data-testid="usage-summary">
          <caption class="muted">{span.label}</caption>
          <thead>
            <tr>
              <th scope="col">Agent</th>
              <UsageHeads />
            </tr>
          </thead>
          <tbody>
            {agents.map((a) => (
              <tr key={a.agent} data-agent={a.agent}>
                <th scope="row">
                  <a href={href({ page: "jobs", filter: { ...NO_FILTER, agent: a.agent } })}>{a.agent}</a>
                </th>
                <UsageCells usage={a.usage} />
              </tr>
            ))}
          </tbody>
          <tfoot>
            <tr data-agent="">
              <th scope="row">All agents</th>
              <UsageCells usage={usage.total} />
            </tr>
          </tfoot>
        </table>
      ) : null}
      {usage?.total?.nominal ? (
        <p class="muted">
          Nominal: priced from a scripted provider's table; no provider was called, nobody was charged.
        </p>
      ) : null}
      {usage?.total?.estimated ? <p class="muted">Partly estimated: some calls' usage was not reported.</p> : null}
    </section>
  );
}
