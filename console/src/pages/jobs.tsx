// Jobs, newest first, a page at a time from the server (ListJobs with a page
// token), filtered there by state, agent and text (a job id, or words of its
// input). The page in view is read again whenever WatchJobs says a job
// changed state, so changes show as they happen. The filters live in the
// address (`#/jobs?state=…`), so a reload or a shared link keeps them.
import { useEffect, useRef, useState } from "preact/hooks";
import { JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { agents, jobs } from "../api.js";
import { clock, dateOf, duration, JOB_STATES, stateName, visible } from "../format.js";
import { useJobChanges } from "../job-changes.js";
import { usePolling } from "../polling.js";
import { useRead } from "../reads.js";
import { href, replaceRoute, type JobsFilter } from "../router.js";

const PAGE_SIZE = 50;
/** Read again this often even without a change heard (a change the stream could not carry). */
const SAFETY_MS = 30_000;
const TYPING_MS = 300;

export function JobsPage({ filter }: { filter: JobsFilter }) {
  const [text, setText] = useState(filter.text);
  // The text this page last put in the address, so a change of it from elsewhere is told from its own.
  const appliedText = useRef(filter.text);
  // Tokens of the pages before this one, and this one's ("" for the first), for the filter they were read with:
  // the filter can change through the address (the Jobs link, a reload of another link) with this page still
  // open, and a token of another filter's pages would open the new filter part way down.
  const filterKey = href({ page: "jobs", filter });
  const [paging, setPaging] = useState({ filterKey, tokens: [""] });
  const tokens = paging.filterKey === filterKey ? paging.tokens : [""];
  const setTokens = (next: string[]): void => setPaging({ filterKey, tokens: next });
  const token = tokens[tokens.length - 1] ?? "";
  const stateValue = JOB_STATES.find((s) => stateName(s) === filter.state) ?? JobState.UNSPECIFIED;
  const setFilter = (next: Partial<JobsFilter>): void => {
    if (next.text !== undefined) appliedText.current = next.text;
    replaceRoute({ page: "jobs", filter: { ...filter, ...next } });
  };
  // The text filter is applied once typing pauses.
  useEffect(() => {
    if (text === filter.text) return;
    const timer = setTimeout(() => setFilter({ text }), TYPING_MS);
    return () => clearTimeout(timer);
  }, [text]);
  // The address's text changed from elsewhere: the box shows it, not what was typed for another filter.
  useEffect(() => {
    if (filter.text === appliedText.current) return;
    appliedText.current = filter.text;
    setText(filter.text);
  }, [filter.text]);
  const agentNames = useRead(
    (signal) => agents.listAgents({}, { signal }).then((r) => r.agents.map((a) => a.name)),
    "agent-names",
  );
  const list = usePolling(
    () =>
      jobs.listJobs({
        limit: PAGE_SIZE,
        state: stateValue,
        agent: filter.agent,
        text: filter.text.trim(),
        pageToken: token,
      }),
    SAFETY_MS,
    [stateValue, filter.agent, filter.text, token],
  );
  // A job changed state (or was created): the page in view is read again.
  useJobChanges(() => list.refresh());
  const filtered = stateValue !== JobState.UNSPECIFIED || filter.agent !== "" || filter.text.trim() !== "";
  return (
    <section aria-labelledby="jobs-title">
      <h1 id="jobs-title">Jobs</h1>
      <form class="filters" role="search" aria-label="Filter jobs" onSubmit={(e) => e.preventDefault()}>
        <label>
          State{" "}
          <select value={filter.state} onChange={(e) => setFilter({ state: (e.target as HTMLSelectElement).value })}>
            <option value="">any</option>
            {JOB_STATES.map((s) => (
              <option key={s} value={stateName(s)}>
                {stateName(s)}
              </option>
            ))}
          </select>
        </label>
        <label>
          Agent{" "}
          <select value={filter.agent} onChange={(e) => setFilter({ agent: (e.target as HTMLSelectElement).value })}>
            <option value="">every agent</option>
            {(agentNames.value ?? [])
              .concat(filter.agent && !(agentNames.value ?? []).includes(filter.agent) ? [filter.agent] : [])
              .map((name) => (
                <option key={name} value={name}>
                  {name}
                </option>
              ))}
          </select>
        </label>
        <label>
          Text{" "}
          <input
            type="search"
            value={text}
            placeholder="a job id, or words of its input"
            size={32}
            onInput={(e) => setText((e.target as HTMLInputElement).value)}
          />
        </label>
      </form>
      {list.error ? (
        <p role="alert" class="error">
          {list.error}
        </p>
      ) : null}
      {list.value === undefined ? (
        <p>Loading…</p>
      ) : list.value.jobs.length === 0 ? (
        <p data-testid="no-jobs">No jobs{filtered ? " match" : ' yet: start one with `oz0 run AGENT "…"`'}.</p>
      ) : null}
      {list.value && list.value.jobs.length > 0 ? (
        <table class="jobs">
          <thead>
            <tr>
              <th scope="col">Job</th>
              <th scope="col">Agent</th>
              <th scope="col">State</th>
              <th scope="col">Input</th>
              <th scope="col">Created</th>
              <th scope="col">Took</th>
            </tr>
          </thead>
          <tbody>
            {list.value.jobs.map((job) => {
              const created = dateOf(job.createdAt);
              const start = dateOf(job.startedAt) ?? created;
              const end = dateOf(job.finishedAt);
              return (
                <tr key={job.id} data-job={job.id}>
                  <td>
                    <a href={href({ page: "job", jobId: job.id })}>{job.id}</a>
                  </td>
                  <td>
                    {job.agent?.name}
                    <span class="muted"> v{job.agent?.version}</span>
                  </td>
                  <td>
                    <span class={`state state-${stateName(job.state)}`} data-testid="job-state">
                      {stateName(job.state)}
                    </span>
                  </td>
                  <td class="input prose">{visible(job.input)}</td>
                  <td>{clock(created)}</td>
                  <td>{start && end ? duration(end.getTime() - start.getTime()) : ""}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      ) : null}
      <nav class="pages" aria-label="Pages of jobs">
        <button type="button" disabled={tokens.length <= 1} onClick={() => setTokens(tokens.slice(0, -1))}>
          ← Newer
        </button>
        <span data-testid="page-number">page {tokens.length}</span>
        <button
          type="button"
          disabled={!list.value?.nextPageToken}
          onClick={() => list.value?.nextPageToken && setTokens([...tokens, list.value.nextPageToken])}
        >
          Older →
        </button>
      </nav>
    </section>
  );
}
