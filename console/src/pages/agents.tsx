// Agents, read-only: every agent at its latest version; one agent's every
// version with its definition, rendered instructions, harness operations and
// skills; and a line diff between any two of its versions. Versions are
// immutable, so what is shown for a version is what every job pinned to it ran.
// A plugin's author writes every text here: each is shown through visible()
// (format.ts), so a bidirectional override or a control character in it is
// shown as an escape, not obeyed, as in a job's patch. What the agent runs
// with or tells its model (operation keys, skills, the instructions, the
// definition, and so the diff) goes through visibleExactly() besides: a
// character a page draws as nothing is an escape there too, emoji's joiners
// included, so a version cannot carry words the reviewer did not see.
import { useState } from "preact/hooks";
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { BudgetSource, type AgentVersion } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { agents } from "../api.js";
import { diffLines, withContext } from "../diff.js";
import { clock, dateOf, usd, visible, visibleExactly } from "../format.js";
import { useRead } from "../reads.js";
import { href } from "../router.js";

export function AgentsPage() {
  const list = useRead((signal) => agents.listAgents({}, { signal }), "agents");
  return (
    <section aria-labelledby="agents-title">
      <h1 id="agents-title">Agents</h1>
      {list.error ? (
        <p role="alert" class="error">
          {list.error}
        </p>
      ) : null}
      {list.value === undefined ? (
        <p>Loading…</p>
      ) : list.value.agents.length === 0 ? (
        <p>No agents yet: install a plugin with `oz0 plugin install PATH`.</p>
      ) : null}
      {list.value && list.value.agents.length > 0 ? (
        <table class="jobs">
          <thead>
            <tr>
              <th scope="col">Agent</th>
              <th scope="col">Latest</th>
              <th scope="col">Runtime</th>
              <th scope="col">Budget</th>
              <th scope="col">Plugin</th>
              <th scope="col">Published</th>
              <th scope="col">Description</th>
            </tr>
          </thead>
          <tbody>
            {list.value.agents.map((a) => (
              <tr key={a.name} data-agent={a.name}>
                <td>
                  <a
                    href={
                      a.runtime === "graph"
                        ? href({ page: "graph", name: a.name, run: "" })
                        : href({ page: "agent", name: a.name, version: 0 })
                    }
                  >
                    {a.name}
                  </a>
                </td>
                <td>v{a.version}</td>
                <td>{a.runtime}</td>
                <td>
                  <Budget agent={a} />
                </td>
                <td>
                  {visible(a.plugin)} {visible(a.pluginVersion)}
                </td>
                <td>{clock(dateOf(a.publishedAt))}</td>
                <td>{visible(a.description)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </section>
  );
}

/** What a session of the version may spend, and whose setting that is (nothing for a graph). */
function Budget({ agent }: { agent: AgentVersion }) {
  switch (agent.budgetSource) {
    case BudgetSource.AGENT:
      return <span title="the agent's harness.max_budget_usd">{usd(agent.budgetUsd)} a session</span>;
    case BudgetSource.ORCHESTRATOR_DEFAULT:
      return (
        <span title="the orchestrator's OZ0_DEFAULT_MAX_BUDGET_USD: the agent sets none">
          {usd(agent.budgetUsd)} a session (default)
        </span>
      );
    case BudgetSource.NONE:
      return (
        <strong title="set the agent's harness.max_budget_usd, or the orchestrator's OZ0_DEFAULT_MAX_BUDGET_USD">
          none: spends without limit
        </strong>
      );
    default:
      return null;
  }
}

export function AgentPage({ name, version }: { name: string; version: number }) {
  const versions = useRead((signal) => agents.listAgentVersions({ name }, { signal }), `versions|${name}`);
  const all = versions.value?.versions ?? [];
  const shown = (version ? all.find((v) => v.version === version) : all[all.length - 1]) ?? undefined;
  const [against, setAgainst] = useState<number>(0);
  const older = all.filter((v) => shown && v.version !== shown.version);
  const base =
    all.find((v) => v.version === against) ?? (shown ? all.filter((v) => v.version < shown.version).pop() : undefined);
  return (
    <section aria-labelledby="agent-title">
      <h1 id="agent-title">
        Agent {name}
        {shown ? ` v${shown.version}` : ""}
      </h1>
      {versions.error ? (
        <p role="alert" class="error">
          {versions.error}
        </p>
      ) : null}
      {versions.value === undefined ? <p>Loading…</p> : null}
      {versions.value && all.length === 0 ? <p>No agent {name}.</p> : null}
      {all.length > 0 ? (
        <nav aria-label="Versions" class="versions">
          Versions:{" "}
          {all.map((v) => (
            <a
              key={v.version}
              href={href({ page: "agent", name, version: v.version })}
              aria-current={shown?.version === v.version ? "page" : undefined}
            >
              v{v.version}
            </a>
          ))}
        </nav>
      ) : null}
      {shown ? <VersionView agent={shown} /> : null}
      {shown && older.length > 0 ? (
        <>
          <h2>Changes</h2>
          <label>
            Compare v{shown.version} with{" "}
            <select
              value={String(base?.version ?? "")}
              onChange={(e) => setAgainst(Number((e.target as HTMLSelectElement).value))}
            >
              {older.map((v) => (
                <option key={v.version} value={String(v.version)}>
                  v{v.version}
                </option>
              ))}
            </select>
          </label>
          {base ? <VersionDiff from={base} to={shown} /> : null}
        </>
      ) : null}
    </section>
  );
}

function VersionView({ agent }: { agent: AgentVersion }) {
  const definition = (agent.definition ?? {}) as JsonObject;
  const { instructions_text: instructions, ...rest } = definition;
  const operations = Array.isArray(definition.harness_operations)
    ? (definition.harness_operations as JsonObject[])
    : [];
  const skills = Array.isArray(definition.skills) ? definition.skills : [];
  return (
    <>
      <dl class="facts">
        <dt>Runtime</dt>
        <dd>{agent.runtime}</dd>
        <dt>Plugin</dt>
        <dd>
          {visible(agent.plugin)} {visible(agent.pluginVersion)}
        </dd>
        <dt>Published</dt>
        <dd>{clock(dateOf(agent.publishedAt))}</dd>
        <dt>Content hash</dt>
        <dd>
          <code>{agent.contentHash}</code>
        </dd>
        {agent.description ? (
          <>
            <dt>Description</dt>
            <dd>{visible(agent.description)}</dd>
          </>
        ) : null}
      </dl>
      <h2>Operations</h2>
      {operations.length === 0 ? (
        <p class="muted">None.</p>
      ) : (
        <ul data-testid="operations">
          {operations.map((op) => (
            <li key={String(op.key)}>
              <code>{visibleExactly(String(op.key))}</code> {op.description ? visible(String(op.description)) : ""}{" "}
              {op.timeout_ms ? <span class="muted">(timeout {Number(op.timeout_ms) / 1000} s)</span> : null}
            </li>
          ))}
        </ul>
      )}
      <h2>Skills</h2>
      {skills.length === 0 ? (
        <p class="muted">None.</p>
      ) : (
        <ul data-testid="skills">
          {skills.map((s, i) => (
            <li key={i}>
              <code>{visibleExactly(typeof s === "string" ? s : stable(s))}</code>
            </li>
          ))}
        </ul>
      )}
      <h2>Instructions</h2>
      {typeof instructions === "string" ? (
        <pre data-testid="instructions">{visibleExactly(instructions)}</pre>
      ) : (
        <p class="muted">None.</p>
      )}
      <details>
        <summary>
          <h2 class="inline">Definition</h2> <span class="muted">(the whole of it, as published)</span>
        </summary>
        <pre data-testid="definition">{visibleExactly(stable(rest))}</pre>
      </details>
    </>
  );
}

function VersionDiff({ from, to }: { from: AgentVersion; to: AgentVersion }) {
  const lines = diffLines(documentOf(from), documentOf(to));
  const changed = lines.filter((l) => l.kind !== "same").length;
  return (
    <>
      <p class="muted" data-testid="diff-summary">
        v{from.version} → v{to.version}:{" "}
        {changed === 0
          ? "no line differs (only the harness or its files changed: compare the content hashes)"
          : `${changed} lines differ`}
      </p>
      <pre class="diff" data-testid="version-diff" tabIndex={0}>
        {withContext(lines).map((l, i) =>
          l.kind === "skip" ? (
            <span key={i} class="diff-hunk">
              {`  … ${l.count} unchanged line${l.count === 1 ? "" : "s"}`}
              {"\n"}
            </span>
          ) : (
            <span key={i} class={l.kind === "add" ? "diff-add" : l.kind === "del" ? "diff-del" : "diff-context"}>
              {l.kind === "add" ? "+ " : l.kind === "del" ? "- " : "  "}
              {l.text}
              {"\n"}
            </span>
          ),
        )}
      </pre>
    </>
  );
}

/**
 * What a diff compares: the definition, then the rendered instructions, visibleExactly(): a plugin's author writes
 * them, and a new version is reviewed here before it runs, so neither an override nor a character a page draws as
 * nothing (tag characters spell words a model reads and no page shows) may make it read as another.
 */
function documentOf(agent: AgentVersion): string {
  const { instructions_text: instructions, ...rest } = (agent.definition ?? {}) as JsonObject;
  return visibleExactly(`${stable(rest)}\n# instructions\n${typeof instructions === "string" ? instructions : ""}`);
}

/** Indented JSON with keys in order, so two versions line up. */
function stable(value: JsonValue): string {
  return JSON.stringify(sortKeys(value), null, 2);
}

function sortKeys(value: JsonValue): JsonValue {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === "object")
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .map((k) => [k, sortKeys((value as JsonObject)[k]!)]),
    );
  return value;
}
