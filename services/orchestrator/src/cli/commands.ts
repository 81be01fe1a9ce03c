// The `oz0` commands, each a client of the orchestrator's API.
import { closeSync, constants, existsSync, lstatSync, mkdirSync, openSync, writeSync } from "node:fs";
import path from "node:path";
import { toJson, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ConnectError } from "@connectrpc/connect";
import {
  AgentVersionSchema,
  GetJobLogsResponseSchema,
  StepJobUsageSchema,
  JobSchema,
  JobState,
  PluginSchema,
  ApprovalSchema,
  ApprovalState,
  type Approval,
  type Job,
} from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { stringify } from "yaml";
import { inputChangedText } from "./approval-prompt.js";
import { CliError } from "./cli-error.js";
import { strangersProblem } from "../dev/local-credentials.js";
import type { Connection } from "./connection.js";
import { describeJob, stateName } from "./event-printer.js";
import { EXIT } from "./exit-codes.js";
import { followJob, listAllApprovals, TERMINAL } from "./job-watch.js";
import { MAX_PAGE_SIZE } from "../jobs/job-pages.js";
import { sourceWithoutCredentials } from "../plugins/plugin-registry.js";
import { fieldText, inputText, jsonLine, shellWord, terminalLine, terminalText } from "./terminal-text.js";
import { transcriptRows } from "./transcript-rows.js";
import { budgetText, NOMINAL_NOTE, usageLine } from "./usage-format.js";
import {
  GetUsageResponseSchema,
  SecretInfoSchema,
  SummarizeUsageResponseSchema,
} from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { TranscriptResponseSchema } from "@oz0/proto/oz0/events/v1/events_pb";

export interface Output {
  out: NodeJS.WritableStream;
  err: NodeJS.WritableStream;
}

function resolveLocal(p: string): string {
  return path.resolve(p);
}

export async function runCommand(options: {
  conn: Connection;
  agent: string;
  input: string;
  attach: string[];
  json: boolean;
  detach: boolean;
  io: Output;
}): Promise<number> {
  const { conn, io } = options;
  const attachments = options.attach.map((a) => {
    const abs = resolveLocal(a);
    if (!existsSync(abs)) throw new CliError(`attachment ${a} does not exist; check the path`);
    return abs;
  });
  if (options.detach && conn.mode === "embedded") {
    throw new CliError(
      `--detach needs a running orchestrator (the embedded stack stops with the command), and no oz0 dev runs for OZ0_HOME=${conn.home}: start \`oz0 dev\` in another terminal with the same OZ0_HOME (an oz0 dev of another data folder is not seen), or set OZ0_URL`,
    );
  }
  for (const note of conn.notes) if (!options.json) io.err.write(`oz0: ${note}\n`);
  const { job } = await conn.clients.jobs.runAgent({ agent: options.agent, input: options.input, attachments });
  if (!job) throw new CliError("the orchestrator returned no job");
  if (options.detach) {
    io.out.write(options.json ? `${jsonLine(toJson(JobSchema, job))}\n` : `${job.id}\n`);
    return EXIT.ok;
  }
  if (!options.json) io.err.write(`job ${job.id}: ${job.agent?.name} v${job.agent?.version}\n`);
  const code = await followJob({ conn, jobId: job.id, json: options.json, stopWhenWaiting: true, io });
  if (!options.json && code !== EXIT.waiting) {
    const { artifacts } = await conn.clients.jobs.getArtifacts({ jobId: job.id });
    if (artifacts.length === 0) io.out.write(`no artifacts (see \`oz0 jobs show ${job.id}\`)\n`);
    else io.out.write(`artifacts of ${job.id} are in ${path.dirname(artifacts[0]!.path)}\n`);
  }
  return code;
}

function jobLine(job: Job): string {
  const created = job.createdAt
    ? new Date(Number(job.createdAt.seconds) * 1000).toISOString().replace("T", " ").slice(0, 19)
    : "";
  return terminalLine(
    `${job.id}  ${stateName(job.state).padEnd(9)}  ${`${job.agent?.name} v${job.agent?.version}`.padEnd(20)}  ${created}  ${job.input.replace(/\s+/g, " ").slice(0, 50)}`,
  );
}

export async function jobsList(options: {
  conn: Connection;
  json: boolean;
  limit: number;
  state?: string;
  agent?: string;
  io: Output;
}): Promise<number> {
  let state = JobState.UNSPECIFIED;
  if (options.state) {
    const found = JobState[options.state.toUpperCase() as keyof typeof JobState] as JobState | undefined;
    if (found === undefined || found === JobState.UNSPECIFIED) {
      throw new CliError(
        `unknown state ${options.state}: use pending, running, waiting, succeeded, failed or cancelled`,
        EXIT.usage,
      );
    }
    state = found;
  }
  // A page holds at most MAX_PAGE_SIZE jobs: a larger --limit pages on.
  const jobs: Job[] = [];
  let pageToken = "";
  do {
    const page = await options.conn.clients.jobs.listJobs({
      limit: Math.min(options.limit - jobs.length, MAX_PAGE_SIZE),
      state,
      agent: options.agent ?? "",
      pageToken,
    });
    jobs.push(...page.jobs);
    pageToken = page.nextPageToken;
  } while (pageToken !== "" && jobs.length < options.limit);
  if (options.json) for (const job of jobs) options.io.out.write(`${jsonLine(toJson(JobSchema, job))}\n`);
  else if (jobs.length === 0) options.io.out.write('no jobs yet: start one with `oz0 run AGENT "INPUT"`\n');
  else for (const job of jobs) options.io.out.write(`${jobLine(job)}\n`);
  return EXIT.ok;
}

export async function jobsShow(options: {
  conn: Connection;
  jobId: string;
  json: boolean;
  io: Output;
}): Promise<number> {
  const { job } = await options.conn.clients.jobs.getJob({ jobId: options.jobId });
  if (!job) throw new CliError(`job ${options.jobId} not found`);
  if (options.json) {
    options.io.out.write(`${jsonLine(toJson(JobSchema, job))}\n`);
    return EXIT.ok;
  }
  // Its cost is the LLM proxy's metering; a job shows without it when that cannot be had. Its budget is its pinned
  // version's (the agent's own, or the orchestrator's default), shown when that version can be read.
  const [usage, agent] = await Promise.all([
    options.conn.clients.jobs.getJobUsage({ jobId: options.jobId }).then(
      (response) => response,
      (error: unknown) => ConnectError.from(error).rawMessage,
    ),
    options.conn.clients.agents.getAgent({ name: job.agent?.name ?? "", version: job.agent?.version ?? 0 }).then(
      (response) => response.agent,
      () => undefined,
    ),
  ]);
  options.io.out.write(`${describeJob(job, { usage, ...(agent ? { agent } : {}) })}\n`);
  return EXIT.ok;
}

export async function jobsCancel(options: {
  conn: Connection;
  jobId: string;
  reason?: string;
  io: Output;
}): Promise<number> {
  // A job that had ended is left as it was; printing its end state alone read as if this command had ended it.
  // Asked first (the answer to CancelJob cannot tell "ended now" from "had ended"); when that cannot be asked,
  // the cancel below still says what it can.
  const before = await options.conn.clients.jobs.getJob({ jobId: options.jobId }).then(
    (r) => r.job,
    () => undefined,
  );
  if (before && TERMINAL.has(before.state)) {
    const ended = before.finishedAt ? ` at ${isoOf(before.finishedAt)}` : "";
    options.io.out.write(
      `job ${options.jobId} had already ended (${stateName(before.state)}${ended}); nothing was cancelled\n`,
    );
    return EXIT.ok;
  }
  const { job } = await options.conn.clients.jobs.cancelJob({ jobId: options.jobId, reason: options.reason ?? "" });
  options.io.out.write(
    `job ${options.jobId}: ${job && TERMINAL.has(job.state) ? stateName(job.state) : "cancelling"}\n`,
  );
  return EXIT.ok;
}

export async function jobUsage(options: {
  conn: Connection;
  jobId: string;
  json: boolean;
  io: Output;
}): Promise<number> {
  const response = await options.conn.clients.jobs.getJobUsage({ jobId: options.jobId });
  const usage = response.usage;
  if (!usage) throw new CliError(`no usage recorded for job ${options.jobId}`);
  if (options.json) {
    // The proxy's form, as before, and a graph run's jobs beside it.
    const json = toJson(GetUsageResponseSchema, usage) as JsonObject;
    if (response.steps.length > 0) json.steps = response.steps.map((s) => toJson(StepJobUsageSchema, s));
    options.io.out.write(`${jsonLine(json)}\n`);
    return EXIT.ok;
  }
  // A graph run: each job it ran, then the sums.
  for (const step of response.steps) {
    options.io.out.write(
      `${terminalLine(`${usageLine(`step ${step.step}`, step.usage)}  ${step.jobId} (${step.agent?.name ?? "?"} v${step.agent?.version ?? "?"})`)}\n`,
    );
  }
  for (const a of usage.agents) options.io.out.write(`${usageLine(`agent ${a.agent}`, a.usage)}\n`);
  options.io.out.write(
    `${usageLine(`${response.steps.length > 0 ? "graph run" : "job"} ${options.jobId}`, usage.total)}\n`,
  );
  if (usage.total?.nominal) options.io.out.write(`${NOMINAL_NOTE}\n`);
  return EXIT.ok;
}

/** What every job's model calls that started in [since, until) used, per agent: what the agents spent. */
export async function usageSummary(options: {
  conn: Connection;
  since: Date;
  until: Date;
  json: boolean;
  io: Output;
}): Promise<number> {
  const { usage } = await options.conn.clients.jobs.summarizeUsage({
    since: timestampFromDate(options.since),
    until: timestampFromDate(options.until),
  });
  if (!usage) throw new CliError("the orchestrator returned no usage");
  if (options.json) {
    options.io.out.write(`${jsonLine(toJson(SummarizeUsageResponseSchema, usage))}\n`);
    return EXIT.ok;
  }
  options.io.out.write(
    `model calls started from ${options.since.toISOString()} to ${options.until.toISOString()}, every job\n`,
  );
  if (usage.agents.length === 0) {
    options.io.out.write("none: no agent called a model then\n");
    return EXIT.ok;
  }
  for (const a of usage.agents) options.io.out.write(`${terminalLine(usageLine(`agent ${a.agent}`, a.usage))}\n`);
  options.io.out.write(`${usageLine("all agents", usage.total)}\n`);
  if (usage.total?.nominal) options.io.out.write(`${NOMINAL_NOTE}\n`);
  return EXIT.ok;
}

/**
 * What the harness wrote to stderr in every session of the job, as stored:
 * the text on stdout as written, and on stderr which session it comes from
 * and how much of it was not kept.
 */
export async function jobsLogs(options: {
  conn: Connection;
  jobId: string;
  json: boolean;
  io: Output;
}): Promise<number> {
  const { io } = options;
  let session: string | undefined;
  let endsLine = true;
  for await (const piece of options.conn.clients.jobs.getJobLogs({ jobId: options.jobId })) {
    if (options.json) {
      io.out.write(`${jsonLine(toJson(GetJobLogsResponseSchema, piece))}\n`);
      continue;
    }
    if (piece.sessionId !== session) {
      // Each session starts on a line of its own.
      if (!endsLine) io.out.write("\n");
      endsLine = true;
      session = piece.sessionId;
      io.err.write(`oz0: stderr of session ${session}\n`);
    }
    if (piece.droppedBytes > 0n) io.err.write(`oz0: [${piece.droppedBytes} bytes of it not kept]\n`);
    if (piece.text === "") continue;
    // A harness's own stderr: printed inert, as the rest of its text (`--json` has it as it came).
    io.out.write(terminalText(piece.text));
    endsLine = piece.text.endsWith("\n");
  }
  if (session === undefined && !options.json)
    io.err.write(
      `oz0: job ${options.jobId} has no harness stderr: its harness wrote none, or no session of it has started\n`,
    );
  return EXIT.ok;
}

/** The job's transcript (GetJobTranscript) as readable rows, or as the API's JSON with `--json`. */
export async function jobsTranscript(options: {
  conn: Connection;
  jobId: string;
  json: boolean;
  io: Output;
}): Promise<number> {
  const { transcript } = await options.conn.clients.jobs.getJobTranscript({ jobId: options.jobId });
  if (!transcript) throw new CliError(`the orchestrator returned no transcript for job ${options.jobId}`);
  if (options.json) {
    options.io.out.write(`${jsonLine(toJson(TranscriptResponseSchema, transcript))}\n`);
    return EXIT.ok;
  }
  if (transcript.rows.length === 0) {
    // Events reach the events service a moment after they happen.
    options.io.out.write(
      `job ${options.jobId} has no public events yet; they reach the events service shortly after they happen: run this again\n`,
    );
    return EXIT.ok;
  }
  for (const line of transcriptRows(transcript)) options.io.out.write(`${line}\n`);
  return EXIT.ok;
}

export async function jobsArtifacts(options: {
  conn: Connection;
  jobId: string;
  out?: string;
  json: boolean;
  io: Output;
}): Promise<number> {
  const { artifacts, contents } = await options.conn.clients.jobs.getArtifacts({
    jobId: options.jobId,
    includeContent: Boolean(options.out),
  });
  if (artifacts.length === 0) {
    options.io.out.write(`job ${options.jobId} has no artifacts\n`);
    return EXIT.ok;
  }
  if (options.out) {
    mkdirSync(options.out, { recursive: true });
    assertOwnOutFolder(options.out);
  }
  artifacts.forEach((a, i) => {
    let where = a.path;
    if (options.out) {
      where = path.join(options.out, a.name);
      writeArtifact(where, contents[i] ?? new Uint8Array());
    }
    options.io.out.write(
      options.json
        ? `${jsonLine({ name: a.name, path: where, sizeBytes: Number(a.sizeBytes), mediaType: a.mediaType })}\n`
        : // A name is the harness's (a file it made in a folder of artifact_paths): inert.
          `${terminalLine(where)}\n`,
    );
  });
  return EXIT.ok;
}

/**
 * Refuses an `--out` folder that is a link, or that another user owns or every user may write: the artifacts' names
 * are the session's, and a folder in /tmp is anybody's to make first, with links at those names that would lead the
 * operator's writes (root's, often) into files of the node (local stack review).
 */
function assertOwnOutFolder(dir: string): void {
  const entry = lstatSync(dir);
  const problem = entry.isSymbolicLink()
    ? "is a link"
    : !entry.isDirectory()
      ? "is not a folder"
      : strangersProblem(entry);
  if (problem !== undefined)
    throw new CliError(
      `--out ${dir} ${problem}; give a folder of your own, for example --out "$(mktemp -d)"`,
      EXIT.usage,
    );
}

/** Writes one artifact, never through a link at its name (O_NOFOLLOW), replacing a file of that name. */
function writeArtifact(where: string, bytes: Uint8Array): void {
  let fd: number;
  try {
    fd = openSync(where, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW, 0o644);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ELOOP")
      throw new CliError(
        `${where} is a link; artifacts are never written through one: remove it, or give another --out`,
        EXIT.usage,
      );
    throw error;
  }
  try {
    for (let at = 0; at < bytes.byteLength;) at += writeSync(fd, bytes, at);
  } finally {
    closeSync(fd);
  }
}

export async function agentsList(options: { conn: Connection; json: boolean; io: Output }): Promise<number> {
  const { agents } = await options.conn.clients.agents.listAgents({});
  if (options.json) for (const a of agents) options.io.out.write(`${jsonLine(toJson(AgentVersionSchema, a))}\n`);
  else if (agents.length === 0)
    options.io.out.write("no agents yet: install a plugin with `oz0 plugin install <git url|path>`\n");
  else
    for (const a of agents)
      options.io.out.write(
        `${terminalLine(`${a.name.padEnd(20)} v${String(a.version).padEnd(4)} ${a.runtime.padEnd(28)} ${budgetText(a, "short").padEnd(16)} ${a.description}`)}\n`,
      );
  return EXIT.ok;
}

export async function agentsVersions(options: {
  conn: Connection;
  name: string;
  json: boolean;
  io: Output;
}): Promise<number> {
  const { versions } = await options.conn.clients.agents.listAgentVersions({ name: options.name });
  for (const a of versions) {
    const published = a.publishedAt ? new Date(Number(a.publishedAt.seconds) * 1000).toISOString() : "";
    options.io.out.write(
      options.json
        ? `${jsonLine(toJson(AgentVersionSchema, a))}\n`
        : `${terminalLine(`v${a.version}  ${published}  ${a.contentHash.slice(0, 19)}  plugin ${a.plugin} ${a.pluginVersion}`)}\n`,
    );
  }
  return EXIT.ok;
}

export async function agentsShow(options: {
  conn: Connection;
  name: string;
  version?: number;
  json: boolean;
  io: Output;
}): Promise<number> {
  const { agent } = await options.conn.clients.agents.getAgent({ name: options.name, version: options.version ?? 0 });
  if (!agent) throw new CliError(`unknown agent ${options.name}`);
  if (options.json) {
    options.io.out.write(`${jsonLine(toJson(AgentVersionSchema, agent))}\n`);
  } else {
    const definition = { ...(agent.definition as JsonObject | undefined) };
    const instructions = definition.instructions_text;
    delete definition.instructions_text;
    // A plugin's words (its YAML, its instructions): inert, so the lines an operator audits (tools,
    // requires_approval, hooks) cannot be written over by what follows them.
    options.io.out.write(
      `${terminalLine(`# ${agent.name} v${agent.version} (${agent.contentHash}), plugin ${agent.plugin} ${agent.pluginVersion}`)}\n`,
    );
    const budget = budgetText(agent, "long");
    if (budget) options.io.out.write(`# budget: ${budget}\n`);
    options.io.out.write(terminalText(stringify(definition)));
    if (typeof instructions === "string")
      options.io.out.write(
        terminalText(`# instructions (${String(definition.instructions)}):\n${instructions.replace(/^/gm, "#   ")}\n`),
      );
  }
  return EXIT.ok;
}

/**
 * A git URL with `credential` (`user:password`, or a token alone, sent as the user) as its user and password: what
 * `--git-credential-stdin` read, so that it was never on oz0's command line. The URL must be HTTP(S) and hold none.
 */
export function sourceWithCredential(source: string, credential: string): string {
  let url: URL;
  try {
    url = new URL(source);
  } catch {
    throw new CliError(
      `--git-credential-stdin needs a git URL (https://host/org/plugin.git), not ${source}`,
      EXIT.usage,
    );
  }
  if (url.protocol !== "https:" && url.protocol !== "http:")
    throw new CliError(
      `--git-credential-stdin is for HTTP(S) git URLs; ${url.protocol} URLs take no credential`,
      EXIT.usage,
    );
  if (url.username !== "" || url.password !== "")
    throw new CliError("the URL has a credential already: give it on standard input alone", EXIT.usage);
  if (credential === "")
    throw new CliError(
      'no credential on standard input: pipe it in, for example printf %s "$TOKEN" | oz0 plugin install --git-credential-stdin <url>',
      EXIT.usage,
    );
  const colon = credential.indexOf(":");
  url.username = encodeURIComponent(colon === -1 ? credential : credential.slice(0, colon));
  url.password = colon === -1 ? "" : encodeURIComponent(credential.slice(colon + 1));
  return url.href;
}

export async function pluginInstall(options: {
  conn: Connection;
  source: string;
  /** The git URL's credential, read from standard input (--git-credential-stdin). */
  credential?: string | undefined;
  json: boolean;
  allowHostHooks?: boolean;
  io: Output;
}): Promise<number> {
  const local = path.resolve(options.source);
  const source =
    options.credential !== undefined
      ? sourceWithCredential(options.source, options.credential)
      : existsSync(local)
        ? local
        : options.source;
  const { plugin, published, reasons, warnings } = await options.conn.clients.plugins.installPlugin({
    source,
    allowHostHooks: options.allowHostHooks ?? false,
  });
  if (!plugin) throw new CliError("the orchestrator returned no plugin");
  const why = (name: string): string[] => reasons.find((r) => r.agent === name)?.reasons ?? [];
  if (options.json) {
    options.io.out.write(
      `${jsonLine({ plugin: toJson(PluginSchema, plugin), published: published.map((p) => ({ name: p.name, version: p.version, reasons: why(p.name) })), warnings })}\n`,
    );
  } else {
    options.io.out.write(
      `${terminalLine(`installed plugin ${plugin.name} ${plugin.version} from ${sourceWithoutCredentials(options.source)}`)}\n`,
    );
    for (const p of published) {
      const because = why(p.name);
      options.io.out.write(
        `${terminalLine(`  published agent ${p.name} v${p.version}${because.length > 0 ? `: ${because.join("; ")}` : ""}`)}\n`,
      );
    }
    if (published.length === 0 && plugin.agents.length > 0)
      options.io.out.write("  no agent changed: every agent keeps its version\n");
    for (const warning of warnings) options.io.err.write(`${terminalLine(`warning: ${warning}`)}\n`);
  }
  return EXIT.ok;
}

export async function pluginList(options: { conn: Connection; json: boolean; io: Output }): Promise<number> {
  const { plugins } = await options.conn.clients.plugins.listPlugins({});
  if (options.json) for (const p of plugins) options.io.out.write(`${jsonLine(toJson(PluginSchema, p))}\n`);
  else if (plugins.length === 0)
    options.io.out.write("no plugins installed: install one with `oz0 plugin install <git url|path>`\n");
  else
    for (const p of plugins) {
      options.io.out.write(
        `${terminalLine(`${p.name.padEnd(20)} ${p.version.padEnd(10)} harnesses: ${p.harnesses.map((h) => h.name).join(", ") || "-"}  agents: ${p.agents.length}  (${p.source})`)}\n`,
      );
    }
  return EXIT.ok;
}

export async function secretSet(options: { conn: Connection; name: string; io: Output }): Promise<number> {
  if (process.stdin.isTTY)
    options.io.err.write(`oz0: type the value of ${options.name}, then Ctrl-D (it is not echoed back later)\n`);
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(Buffer.from(chunk as Buffer));
  const value = Buffer.concat(chunks)
    .toString("utf8")
    .replace(/\r?\n$/, "");
  if (!value)
    throw new CliError(
      `no value on stdin: pipe it in, for example printf %s "$${options.name}" | oz0 secret set ${options.name}`,
    );
  await options.conn.clients.secrets.setSecret({ name: options.name, value });
  options.io.out.write(`secret ${options.name} set\n`);
  return EXIT.ok;
}

/** The provider keys the LLM proxy keeps: names and times, never values. */
export async function secretList(options: { conn: Connection; json: boolean; io: Output }): Promise<number> {
  const { secrets } = await options.conn.clients.secrets.listSecrets({});
  if (options.json) for (const s of secrets) options.io.out.write(`${jsonLine(toJson(SecretInfoSchema, s))}\n`);
  else if (secrets.length === 0)
    options.io.out.write(
      'no secrets: set one with `printf %s "$ANTHROPIC_API_KEY" | oz0 secret set ANTHROPIC_API_KEY`\n',
    );
  else
    for (const s of secrets)
      options.io.out.write(`${terminalLine(`${s.name.padEnd(28)} set ${isoOf(s.updatedAt ?? s.createdAt)}`)}\n`);
  return EXIT.ok;
}

export async function secretDelete(options: { conn: Connection; name: string; io: Output }): Promise<number> {
  await options.conn.clients.secrets.deleteSecret({ name: options.name });
  options.io.out.write(`secret ${options.name} deleted\n`);
  return EXIT.ok;
}

/** A timestamp as ISO text, or "" when unset. */
function isoOf(t: { seconds: bigint } | undefined): string {
  return t ? new Date(Number(t.seconds) * 1000).toISOString() : "";
}

/**
 * Where a call stands, for `oz0 approvals list`: a waiting call with its deadline, an answered one with who
 * answered and when. With `--all` both kinds share the list, and an answered call printed like a waiting one
 * (deadline and all) read as if it still waited.
 */
function approvalStateText(a: Approval): string {
  const at = a.answeredAt ? ` at ${isoOf(a.answeredAt)}` : "";
  const by = a.answeredBy ? ` by ${fieldText(a.answeredBy)}` : "";
  const reason = a.reason ? `: ${fieldText(a.reason)}` : "";
  switch (a.state) {
    case ApprovalState.APPROVED:
      return `approved${by}${at}`;
    case ApprovalState.DENIED:
      return `denied${by}${at}${reason}`;
    case ApprovalState.TIMED_OUT:
      return `timed out (denied, nobody answered)${at}`;
    case ApprovalState.CANCELLED:
      return `cancelled (the job ended first)${at}${reason}`;
    default:
      return a.deadline ? `waiting (denied if unanswered by ${isoOf(a.deadline)})` : "waiting";
  }
}

export async function approvalsList(options: {
  conn: Connection;
  jobId?: string;
  all: boolean;
  json: boolean;
  io: Output;
}): Promise<number> {
  const approvals = await listAllApprovals(options.conn, { jobId: options.jobId ?? "", includeAnswered: options.all });
  // The list does not say whether the job exists: a mistyped id read as "nothing waits", so ask for the job
  // (its NotFound says so, as every other command about a job does).
  if (approvals.length === 0 && options.jobId) await options.conn.clients.jobs.getJob({ jobId: options.jobId });
  if (options.json) for (const a of approvals) options.io.out.write(`${jsonLine(toJson(ApprovalSchema, a))}\n`);
  else if (approvals.length === 0) {
    options.io.out.write(
      options.all
        ? "no calls have waited for approval\n"
        : "nothing waits for approval (--all lists answered calls too)\n",
    );
    // A job waiting on an oz0 dev of another data folder is not seen from here: say where this looked.
    if (options.conn.mode === "embedded")
      options.io.err.write(
        `oz0: no oz0 dev runs for OZ0_HOME=${options.conn.home}, so this asked a stack started for this command; a job of an oz0 dev started with another OZ0_HOME is not seen\n`,
      );
  } else
    for (const a of approvals) {
      // The input always: a title is the harness's own words for the call, and could say anything. The input an
      // approval runs, with the harness's beside it when a hook changed it. One line, inert: the tool, title and
      // inputs are the harness's (or a hook's).
      options.io.out.write(
        `${terminalLine(`${a.jobId}  ${shellWord(a.callId)}  ${fieldText(a.tool)}  ${a.title ? `${fieldText(a.title)}  ` : ""}${inputText(a.inputToRun ?? a.input ?? {})}${inputChangedText(a)}  ${approvalStateText(a)}`)}\n`,
      );
    }
  return EXIT.ok;
}

export async function answer(options: {
  conn: Connection;
  jobId: string;
  callId: string;
  allow: boolean;
  input?: string;
  reason?: string;
  io: Output;
}): Promise<number> {
  let input: JsonObject | undefined;
  if (options.input) {
    try {
      input = JSON.parse(options.input) as JsonObject;
    } catch {
      throw new CliError(
        `--input is not valid JSON: pass an object, for example --input '{"command":"npm test"}'`,
        EXIT.usage,
      );
    }
    if (input === null || typeof input !== "object" || Array.isArray(input))
      throw new CliError("--input must be a JSON object", EXIT.usage);
  }
  const { approval } = await options.conn.clients.jobs.answerPermission({
    jobId: options.jobId,
    callId: options.callId,
    allow: options.allow,
    ...(input ? { input } : {}),
    reason: options.reason ?? "",
  });
  options.io.out.write(
    `call ${approval?.callId ?? options.callId} of job ${options.jobId} ${options.allow ? "approved" : "denied"}\n`,
  );
  return EXIT.ok;
}
