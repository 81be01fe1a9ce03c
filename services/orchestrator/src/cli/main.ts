#!/usr/bin/env node
// oz0 (also orchestrator-zero): the command line an operator uses.
import path from "node:path";
import { Command, CommanderError } from "commander";
import { usageWindow } from "./usage-window.js";
import { exitProcess } from "@oz0/harness";
import { defaultHome } from "../start-orchestrator.js";
import { startDevStack } from "../dev/dev-stack.js";
import { isolationNotice, removeDiscovery, writeDiscovery } from "../dev/embedded-stack.js";
import { DevLockHeldError, takeDevLock } from "../dev/dev-lock.js";
import { removeLogin, writeLogin } from "../dev/local-credentials.js";
import { consoleLink } from "./console-link.js";
import { CliError, describeError } from "./cli-error.js";
import {
  agentsList,
  agentsShow,
  agentsVersions,
  answer,
  approvalsList,
  jobsArtifacts,
  jobUsage,
  usageSummary,
  jobsLogs,
  jobsCancel,
  jobsList,
  jobsShow,
  jobsTranscript,
  pluginInstall,
  pluginList,
  runCommand,
  secretDelete,
  secretList,
  secretSet,
  type Output,
} from "./commands.js";
import { clientsFor, connect, type Connection } from "./connection.js";
import { followJob } from "./job-watch.js";
import { LiveTerminal } from "./live-terminal.js";
import { graphShow } from "./graph-commands.js";
import { applyEnvironmentKeys, chosenModelScript, embeddedStackEnv } from "./embedded-defaults.js";
import { EXIT } from "./exit-codes.js";
import { shellWord, terminalText } from "./terminal-text.js";
import { sourceWithoutCredentials } from "../plugins/plugin-registry.js";

const io: Output = { out: process.stdout, err: process.stderr };
const home = path.resolve(defaultHome());
let target = process.env.OZ0_URL || "the orchestrator";
/** How the orchestrator was found, for what an error advises (cli-error.ts). */
let targetMode: Connection["mode"] | undefined = process.env.OZ0_URL ? "url" : undefined;
let open: Connection | undefined;
/** `oz0 dev` handles its own signals (it stops the stack in order). */
let devRunning = false;

async function withConnection(
  fn: (conn: Connection) => Promise<number>,
  options: { modelScript?: string | undefined } = {},
): Promise<void> {
  const conn = await connect({ home, onEmbeddedStart: () => undefined, modelScript: options.modelScript });
  open = conn;
  target = conn.url;
  targetMode = conn.mode;
  try {
    process.exitCode = await fn(conn);
  } finally {
    open = undefined;
    await conn.close();
  }
}

const collect = (value: string, previous: string[]): string[] => [...previous, value];
const positiveInt = (value: string): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new CliError(`expected a whole number, got ${value}`, EXIT.usage);
  return n;
};

const MODEL_SCRIPT_HELP =
  "offline: the model answers every session from this script (JSON or YAML), even with a provider key; default $OZ0_MODEL_SCRIPT";

const program = new Command()
  .name("oz0")
  .description("Orchestrator Zero: run AI agents inside harnesses; watch, approve and cancel their jobs.")
  .version("0.1.0")
  .enablePositionalOptions()
  .showHelpAfterError("(run with --help for usage)")
  .exitOverride()
  .addHelpText(
    "after",
    `
Where commands go: OZ0_URL when set; else the stack \`oz0 dev\` runs (found in $OZ0_HOME/dev.json);
else an embedded stack started for the length of the command. OZ0_HOME defaults to ~/.oz0.

Exit status: 0 ok (job succeeded), 1 error, 2 usage, 3 job failed, 4 job cancelled, 5 job waits for approval.`,
  );

program
  .command("run")
  .description("run an agent and stream its text and tool calls live")
  .argument("<agent>", "the agent's name")
  .argument("<input>", "what to ask it")
  .option(
    "--attach <path>",
    "a file or directory copied into the session's working directory (repeatable)",
    collect,
    [],
  )
  .option("--json", "one JSON event per line")
  .option("--detach", "print the job id and return at once")
  .option("--model-script <file>", MODEL_SCRIPT_HELP)
  .action(
    async (
      agent: string,
      input: string,
      opts: { attach: string[]; json?: boolean; detach?: boolean; modelScript?: string },
    ) =>
      withConnection(
        (conn) =>
          runCommand({
            conn,
            agent,
            input,
            attach: opts.attach,
            json: Boolean(opts.json),
            detach: Boolean(opts.detach),
            io,
          }),
        opts,
      ),
  );

const jobs = program
  .command("jobs")
  .description("list, show, watch and cancel jobs; read their transcripts and harness logs; fetch their artifacts");
jobs
  .command("list")
  .description("newest first")
  .option("--state <state>", "pending, running, waiting, succeeded, failed or cancelled")
  .option("--agent <name>", "only this agent's jobs")
  .option("--limit <n>", "at most this many", positiveInt, 50)
  .option("--json", "one JSON job per line")
  .action(async (opts: { state?: string; agent?: string; limit: number; json?: boolean }) =>
    withConnection((conn) =>
      jobsList({
        conn,
        json: Boolean(opts.json),
        limit: opts.limit,
        ...(opts.state ? { state: opts.state } : {}),
        ...(opts.agent ? { agent: opts.agent } : {}),
        io,
      }),
    ),
  );
jobs
  .command("show")
  .description("state and what it does now, start and end to the millisecond, duration, cost, trace id, pinned version")
  .argument("<job>")
  .option("--json")
  .action(async (jobId: string, opts: { json?: boolean }) =>
    withConnection((conn) => jobsShow({ conn, jobId, json: Boolean(opts.json), io })),
  );
jobs
  .command("watch")
  .description("follow a job's events until it ends (exit status as for run)")
  .argument("<job>")
  .option("--after <seq>", "start after this event sequence number", positiveInt, 0)
  .option("--json", "one JSON event per line")
  .action(async (jobId: string, opts: { after: number; json?: boolean }) =>
    withConnection((conn) =>
      followJob({ conn, jobId, json: Boolean(opts.json), afterSeq: opts.after, stopWhenWaiting: false, io }),
    ),
  );
jobs
  .command("transcript")
  .description(
    'the job\'s public events as rows: one "Harness · KEY" row per harness operation, overlapping ones as "N parallel" (from the events service, through the orchestrator)',
  )
  .argument("<job>")
  .option("--json", "the Transcript API's response as JSON")
  .action(async (jobId: string, opts: { json?: boolean }) =>
    withConnection((conn) => jobsTranscript({ conn, jobId, json: Boolean(opts.json), io })),
  );
jobs
  .command("logs")
  .description(
    "what the job's harness wrote to stderr, every session of it (the session token redacted; each session's last 1 MiB by default)",
  )
  .argument("<job>")
  .option("--json", "one JSON piece per line: sessionId, text, droppedBytes")
  .action(async (jobId: string, opts: { json?: boolean }) =>
    withConnection((conn) => jobsLogs({ conn, jobId, json: Boolean(opts.json), io })),
  );
jobs
  .command("cancel")
  .argument("<job>")
  .option("--reason <text>", "why, for the record")
  .action(async (jobId: string, opts: { reason?: string }) =>
    withConnection((conn) => jobsCancel({ conn, jobId, ...(opts.reason ? { reason: opts.reason } : {}), io })),
  );
jobs
  .command("artifacts")
  .description("where a job's artifacts (the patch of what changed) are")
  .argument("<job>")
  .option("--out <dir>", "copy them into this directory")
  .option("--json")
  .action(async (jobId: string, opts: { out?: string; json?: boolean }) =>
    withConnection((conn) =>
      jobsArtifacts({
        conn,
        jobId,
        json: Boolean(opts.json),
        ...(opts.out ? { out: path.resolve(opts.out) } : {}),
        io,
      }),
    ),
  );

program
  .command("usage")
  .description(
    "what a job's model calls used, per agent, as the LLM proxy metered them (a graph run: each of its step jobs, then the sums); without a job, what every job's calls in a window used, per agent",
  )
  .argument("[job]")
  .option(
    "--since <when>",
    "without a job: calls started since then, how long ago (24h, 7d, 1h30m) or a date, or a date and time with its zone (2026-12-01, 2026-12-01T08:00Z); default the day before --until",
    "24h",
  )
  .option("--until <when>", "without a job: calls started before then, in the same forms (default: now)")
  .option("--json")
  .action(
    async (jobId: string | undefined, opts: { json?: boolean; since: string; until?: string }, command: Command) => {
      if (jobId !== undefined) {
        const window = ["since", "until"].filter((name) => command.getOptionValueSource(name) === "cli");
        if (window.length > 0)
          throw new CliError(
            `--${window[0]} sums every job's calls in a window: give a job or a window, not both (oz0 usage ${jobId}, or oz0 usage --${window[0]} ${window[0] === "since" ? opts.since : opts.until})`,
            EXIT.usage,
          );
        return withConnection((conn) => jobUsage({ conn, jobId, json: Boolean(opts.json), io }));
      }
      const { since, until } = usageWindow({
        ...(command.getOptionValueSource("since") === "cli" ? { since: opts.since } : {}),
        ...(opts.until !== undefined ? { until: opts.until } : {}),
        now: new Date(),
      });
      return withConnection((conn) => usageSummary({ conn, since, until, json: Boolean(opts.json), io }));
    },
  );

const agents = program.command("agents").description("agents and their immutable versions");
agents
  .command("list")
  .option("--json")
  .action(async (opts: { json?: boolean }) =>
    withConnection((conn) => agentsList({ conn, json: Boolean(opts.json), io })),
  );
agents
  .command("versions")
  .argument("<name>")
  .option("--json")
  .action(async (name: string, opts: { json?: boolean }) =>
    withConnection((conn) => agentsVersions({ conn, name, json: Boolean(opts.json), io })),
  );
agents
  .command("show")
  .argument("<name>")
  .option("--version <n>", "this version instead of the latest", positiveInt)
  .option("--json")
  .action(async (name: string, opts: { version?: number; json?: boolean }) =>
    withConnection((conn) =>
      agentsShow({ conn, name, json: Boolean(opts.json), ...(opts.version ? { version: opts.version } : {}), io }),
    ),
  );

program
  .command("graph")
  .description("graph harnesses (run one with `oz0 run GRAPH INPUT`)")
  .command("show")
  .description("draw a graph in the terminal, or print it as a Mermaid flowchart")
  .argument("<name>")
  .option("--version <n>", "this version instead of the latest", positiveInt)
  .option("--mermaid", "print a Mermaid flowchart")
  .action(async (name: string, opts: { version?: number; mermaid?: boolean }) =>
    withConnection((conn) =>
      graphShow({ conn, name, mermaid: Boolean(opts.mermaid), ...(opts.version ? { version: opts.version } : {}), io }),
    ),
  );

const plugin = program.command("plugin").description("install and list plugins");
plugin
  .command("install")
  .description("clone (git URL) or copy (path) a plugin, validate it, and publish its agents")
  .argument("<source>", "a git URL or a directory with oz0-plugin.yaml")
  .option("--json")
  .option(
    "--allow-host-hooks",
    "let the plugin's command hooks run: they run on the orchestrator's host (isolated by bubblewrap or Landlock when OZ0_HOOK_ISOLATION allows), not in a sandbox",
  )
  .option(
    "--git-credential-stdin",
    "read the git URL's credential (user:password, or a token) from standard input, for a private repository",
  )
  .action(async (source: string, opts: { json?: boolean; allowHostHooks?: boolean; gitCredentialStdin?: boolean }) => {
    // A command line is every local user's to read while oz0 runs (ps, /proc/<pid>/cmdline), a `user`- or
    // `none`-mode session's too; standard input is not. HTTP(S) only: the `git@` of an SSH URL is a login name,
    // not a credential, and --git-credential-stdin takes none for it.
    if (/^https?:\/\/[^/?#]*@/i.test(source))
      io.err.write(
        `oz0: warning: the credential in the URL can be read by every user of this machine while oz0 runs (ps, /proc); pipe it in instead: printf %s "$TOKEN" | oz0 plugin install --git-credential-stdin ${shellWord(sourceWithoutCredentials(source))}\n`,
      );
    const credential = opts.gitCredentialStdin ? (await readStdin()).trim() : undefined;
    return withConnection((conn) =>
      pluginInstall({
        conn,
        source,
        credential,
        json: Boolean(opts.json),
        allowHostHooks: Boolean(opts.allowHostHooks),
        io,
      }),
    );
  });
plugin
  .command("list")
  .option("--json")
  .action(async (opts: { json?: boolean }) =>
    withConnection((conn) => pluginList({ conn, json: Boolean(opts.json), io })),
  );

const secret = program.command("secret").description("provider keys, kept by the LLM proxy (write-only)");
secret
  .command("set")
  .description("set a secret from stdin; the value is never printed or stored by the orchestrator")
  .argument("<name>", "for example ANTHROPIC_API_KEY")
  .action(async (name: string) => withConnection((conn) => secretSet({ conn, name, io })));
secret
  .command("list")
  .description("the secrets the LLM proxy keeps: names and when each was set, never values")
  .option("--json", "one JSON object per line")
  .action(async (opts: { json?: boolean }) =>
    withConnection((conn) => secretList({ conn, json: Boolean(opts.json), io })),
  );
secret
  .command("delete")
  .description("delete a secret; its provider's calls fail until one is set again")
  .argument("<name>", "for example ANTHROPIC_API_KEY")
  .action(async (name: string) => withConnection((conn) => secretDelete({ conn, name, io })));

program
  .command("approvals")
  .description("tool calls that wait for a person")
  .command("list")
  .option("--job <job>", "only this job's")
  .option("--all", "answered ones too")
  .option("--json")
  .action(async (opts: { job?: string; all?: boolean; json?: boolean }) =>
    withConnection((conn) =>
      approvalsList({
        conn,
        all: Boolean(opts.all),
        json: Boolean(opts.json),
        ...(opts.job ? { jobId: opts.job } : {}),
        io,
      }),
    ),
  );
program
  .command("approve")
  .description("approve a waiting tool call")
  .argument("<job>")
  .argument("<call>", "the call id `oz0 approvals list` shows")
  .option("--input <json>", "run the call with this input instead")
  .action(async (jobId: string, callId: string, opts: { input?: string }) =>
    withConnection((conn) =>
      answer({ conn, jobId, callId, allow: true, ...(opts.input ? { input: opts.input } : {}), io }),
    ),
  );
program
  .command("deny")
  .description("deny a waiting tool call")
  .argument("<job>")
  .argument("<call>")
  // Checked here rather than by commander: its "error: required option" had no `oz0:` and did not say what a
  // reason is for, unlike every other usage error; and before connecting, so no embedded stack starts for it.
  .option("--reason <text>", "why, required: the model reads it (so it can try another way) and the record keeps it")
  .action(async (jobId: string, callId: string, opts: { reason?: string }) => {
    const reason = opts.reason?.trim();
    if (!reason)
      throw new CliError(
        `oz0 deny needs --reason TEXT: why the call is denied, which the model reads (so it can try another way) and the record keeps; for example: oz0 deny ${jobId} ${callId} --reason "not on a Friday"`,
        EXIT.usage,
      );
    await withConnection((conn) => answer({ conn, jobId, callId, allow: false, reason, io }));
  });

program
  .command("login")
  .description(
    "keep a credential for a remote orchestrator in $OZ0_HOME/credentials (read from standard input, or --token)",
  )
  .requiredOption("--url <url>", "the orchestrator, for example https://oz0.example.com")
  .option(
    "--token <token>",
    "the credential (an OIDC access or ID token from your issuer); default: read from standard input",
  )
  .action(async (opts: { url: string; token?: string }) => {
    // A command line is every local user's to read (ps, /proc/<pid>/cmdline) while the command runs: on a node of
    // the sandbox's `user` or `none` mode, a session's too (secrets review). Standard input is not.
    if (opts.token !== undefined)
      io.err.write(
        `oz0: warning: a credential given with --token can be read by every user of this machine while oz0 login runs (ps, /proc); pipe it in instead: <your issuer's CLI> | oz0 login --url ${opts.url}\n`,
      );
    const token = (opts.token ?? (await readStdin())).trim();
    if (!token)
      throw new CliError(
        "no credential given: pass --token TOKEN or pipe it in (for example from your identity provider's CLI)",
        EXIT.usage,
      );
    // Checked before it is kept: a wrong token is refused now, not at the next command.
    await clientsFor(opts.url, token).agents.listAgents({});
    writeLogin(home, { url: opts.url, token });
    io.out.write(
      `logged in to ${opts.url}; commands now go there (OZ0_URL and OZ0_TOKEN still take precedence; \`oz0 logout\` forgets it)\n`,
    );
  });
program
  .command("logout")
  .description("forget the credential `oz0 login` kept")
  .action(() => {
    io.out.write(removeLogin(home) ? "logged out\n" : "not logged in\n");
  });

program
  .command("console")
  .description(
    "print a one-time link that opens the web console logged in as you (the running `oz0 dev`, or OZ0_URL with your credential)",
  )
  .action(async () =>
    withConnection(async (conn) => {
      if (conn.mode === "embedded")
        throw new CliError(
          "the console needs a running orchestrator: start `oz0 dev` (or set OZ0_URL), then run `oz0 console` again",
        );
      io.out.write(`console: ${await consoleLink(conn.url, conn.clients.login)}\n`);
      return 0;
    }),
  );

program
  .command("dev")
  .description("run the whole stack in the foreground on loopback; other commands find it through $OZ0_HOME/dev.json")
  .option("--port <port>", "the orchestrator's port (0: any free one)", positiveInt, 7700)
  .option("--model-script <file>", MODEL_SCRIPT_HELP)
  .action(async (opts: { port: number; modelScript?: string }) => {
    // A bad script is refused before anything is taken or written.
    const modelScript = chosenModelScript(opts.modelScript);
    const say = (line: string): void => void io.err.write(`oz0: ${line}\n`);
    // Atomic: of two started at the same instant, exactly one runs.
    const lock = await takeDevLock(home, say).catch((error: unknown) => {
      throw error instanceof DevLockHeldError ? new CliError(error.message) : error;
    });
    devRunning = true;
    const defaults = embeddedStackEnv({ home, modelScript });
    io.err.write(`oz0: starting the stack (data in ${home}, logs in ${path.join(home, "logs")})\n`);
    const stack = await startDevStack({ home, orchestratorPort: opts.port, env: defaults.env, notify: say }).catch(
      async (error: unknown) => {
        await lock.release();
        throw error;
      },
    );
    if (stack.adopted.length > 0)
      defaults.notes.push(
        `still running from an oz0 dev that ended without stopping them, and adopted: ${stack.adopted.join(", ")}`,
      );
    if (!defaults.scripted) {
      const keys = await applyEnvironmentKeys((s) =>
        clientsFor(stack.urls.orchestrator, stack.ownerToken).secrets.setSecret(s),
      );
      defaults.notes.push(`provider keys from the environment handed to the LLM proxy: ${keys.join(", ")}`);
    }
    const notice = isolationNotice(stack);
    if (notice) defaults.notes.push(notice);
    const discover = (): void =>
      writeDiscovery(home, {
        url: stack.urls.orchestrator,
        pid: process.pid,
        orchestratorPid: stack.pids().orchestrator,
        urls: stack.urls,
        startedAt: new Date().toISOString(),
      });
    discover();
    stack.onRestart(discover);
    const consoleLine = await consoleLink(
      stack.urls.orchestrator,
      clientsFor(stack.urls.orchestrator, stack.ownerToken).login,
    ).then(
      (link) => `console       ${link}  (opens once, within 5 minutes; \`oz0 console\` prints a new one)`,
      (error: unknown) => `console       ${stack.urls.orchestrator}/ (no login link: ${(error as Error).message})`,
    );
    io.out.write(
      [
        `orchestrator  ${stack.urls.orchestrator}`,
        consoleLine,
        `sandbox       ${stack.urls.sandbox}`,
        `llm-proxy     ${stack.urls["llm-proxy"]}`,
        `events        ${stack.urls.events}`,
        ...defaults.notes.map((n) => `note: ${n}`),
        `ready: other oz0 commands now use this stack; a service that stops is started again (Ctrl-C stops them all)`,
        "",
      ].join("\n"),
    );
    await new Promise<void>((resolve) => {
      process.once("SIGINT", () => resolve());
      process.once("SIGTERM", () => resolve());
      process.once("SIGHUP", () => resolve());
    });
    removeDiscovery(home, process.pid);
    io.err.write("oz0: stopping the stack\n");
    await stack.close();
    await lock.release();
  });

async function readStdin(): Promise<string> {
  if (process.stdin.isTTY) io.err.write("paste the credential, then Enter and Ctrl-D:\n");
  let text = "";
  for await (const chunk of process.stdin) text += String(chunk);
  return text;
}

// `oz0 jobs list | head`: a reader that went away is not an error.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") exitProcess(Number(process.exitCode ?? 0));
  throw error;
});

let interrupted = false;
process.on("SIGINT", () => {
  if (devRunning) return;
  // A status line is not left on the screen for the shell's prompt to follow.
  LiveTerminal.clearAll();
  if (interrupted || !open) exitProcess(130);
  interrupted = true;
  const conn = open;
  if (conn.mode !== "embedded") io.err.write("\noz0: stopped following; the job keeps running (oz0 jobs watch JOB)\n");
  void conn.close().finally(() => exitProcess(130));
});

try {
  await program.parseAsync(process.argv);
} catch (error) {
  if (error instanceof CommanderError) {
    process.exitCode = error.exitCode === 0 ? EXIT.ok : EXIT.usage;
  } else {
    if (process.env.OZ0_DEBUG) console.error(error);
    // Inert: an error can quote what a plugin or a harness wrote (a YAML key, a tool name).
    io.err.write(`${terminalText(`oz0: ${describeError(error, { target, mode: targetMode })}`)}\n`);
    process.exitCode = error instanceof CliError ? error.exitCode : EXIT.error;
  }
}
// Idle HTTP/2 sessions to the orchestrator would keep the process alive for a
// while, so the CLI exits itself, but only once what it wrote has left: writes
// to a pipe are asynchronous, and exiting at once cut piped output at 64 KiB.
await Promise.all([drained(process.stdout), drained(process.stderr)]);
exitProcess(Number(process.exitCode ?? EXIT.ok));

/** Resolves when everything written to `stream` so far has been handed to the OS (or the reader went away). */
function drained(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => {
    if (stream.destroyed || !stream.writable) return resolve();
    stream.write("", () => resolve());
  });
}
