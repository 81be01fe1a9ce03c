// Jobs, newest first, by state and agent; read again every two seconds so
// state changes show while the page is open.
import { useState } from "preact/hooks";
import { JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { jobs } from "../api.js";
import { clock, dateOf, duration, JOB_STATES, stateName } from "../format.js";
import { usePolling } from "../polling.js";
import { href } from "../router.js";

export function JobsPage() {
  const [state, setState] = useState<JobState>(JobState.UNSPECIFIED);
  const [agent, setAgent] = useState("");
  const list = usePolling(() => jobs.listJobs({ limit: 100, state, agent: agent.trim() }), 2_000, [state, agent]);
  return (
    <section aria-labelledby="jobs-title">
      <h1 id="jobs-title">Jobs</h1>
      <form class="filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          State{" "}
          <select value={String(state)} onChange={(e) => setState(Number((e.target as HTMLSelectElement).value) as JobState)}>
            <option value={String(JobState.UNSPECIFIED)}>any</option>
            {JOB_STATES.map((s) => (
              <option key={s} value={String(s)}>
                {stateName(s)}
              </option>
            ))}
          </select>
        </label>
        <label>
          Agent <input type="search" value={agent} placeholder="every agent" onInput={(e) => setAgent((e.target as HTMLInputElement).value)} />
        </label>
      </form>
      {list.error ? (
        <p role="alert" class="error">
          {list.error}
        </p>
      ) : null}
      {list.value === undefined ? <p>Loading…</p> : list.value.jobs.length === 0 ? <p>No jobs{state !== JobState.UNSPECIFIED || agent ? " match" : " yet: start one with `oz0 run AGENT \"…\"`"}.</p> : null}
      {list.value && list.value.jobs.length > 0 ? (
        <table class="jobs">
          <thead>
            <tr>
              <th scope="col">Job</th>
              <th scope="col">Agent</th>
              <th scope="col">State</th>
              <th scope="col">Input</th>
              <th scope="col">Started</th>
              <th scope="col">Took</th>
            </tr>
          </thead>
          <tbody>
            {list.value.jobs.map((job) => {
              const created = dateOf(job.createdAt);
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
                  <td class="input">{job.input}</td>
                  <td>{clock(created)}</td>
                  <td>{created && end ? duration(end.getTime() - created.getTime()) : ""}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      ) : null}
    </section>
  );
}
