// oz0-harness-conformance [OPTIONS] -- COMMAND [ARGS...]: the conformance kit's command line.
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { CONFORMANCE_CASES } from "./conformance-cases.js";
import {
  formatCaseLine,
  formatOtherCounts,
  formatSummary,
  formatUntestedRoutes,
  readExpectedFailures,
  runConformance,
} from "./run-conformance.js";
import type { ConformanceReport } from "./run-conformance.js";
import { formatTranscript } from "./conformance-scenario.js";
import { loadToolProfile } from "./tool-profiles.js";
import { parseRouteSelection } from "./model-routes.js";
import type { RouteSelection } from "./model-routes.js";
import type { ToolProfile } from "./tool-profiles.js";

interface Flag {
  name: string;
  value?: string;
  help: string;
}

/** Every option, in the order `--help` lists them. */
export const CLI_FLAGS: readonly Flag[] = [
  {
    name: "--only",
    value: "ID[,ID...]",
    help: "run only these cases; an unknown id is a usage error that lists the known ones",
  },
  {
    name: "--expected-failures",
    value: "FILE",
    help: "case ids that may fail for now, one a line, # comments; a listed case that passes fails the run",
  },
  {
    name: "--route",
    value: "auto|anthropic|openai|both",
    help: "the model routes to run the cases on (the request's model is anthropic/… or openai/…); default auto: each route the harness calls",
  },
  {
    name: "--tool-profile",
    value: "NAME|FILE",
    help: "how to call the harness's file tools: oz0 (read_file/write_file), claude-code (Read/Write) or a JSON file; repeatable; default both built-in profiles",
  },
  {
    name: "--plugin-dir",
    value: "DIR",
    help: "where relative paths in COMMAND resolve, and OZ0_PLUGIN_DIR; default the current directory",
  },
  {
    name: "--env",
    value: "NAME=VALUE",
    help: "add a variable to the harness's environment (on top of the stack's); repeatable",
  },
  {
    name: "--grace-ms",
    value: "N",
    help: "SIGTERM-to-SIGKILL grace, and how long a harness may run after its result; default 10000",
  },
  {
    name: "--case-timeout-ms",
    value: "N",
    help: "each session's deadline: a harness still running then fails the case; default 60000",
  },
  { name: "--json", help: "print the report as JSON (versioned: see the README) instead of one line per case" },
  {
    name: "--transcripts",
    value: "DIR",
    help: "write each case's protocol transcript (every line, both ways) to DIR/CASE.txt",
  },
  {
    name: "--keep-temp-dirs",
    help: "keep each case's working and state directories (their paths are in the transcripts)",
  },
  { name: "--list", help: "list the cases (id, level, rule, title) and exit" },
  { name: "--help", help: "this text (also -h)" },
];

export function usageText(): string {
  const width = Math.max(...CLI_FLAGS.map((f) => `${f.name}${f.value ? ` ${f.value}` : ""}`.length));
  const lines = CLI_FLAGS.map((f) => `  ${`${f.name}${f.value ? ` ${f.value}` : ""}`.padEnd(width)}  ${f.help}`);
  return [
    "usage: oz0-harness-conformance [OPTIONS] -- COMMAND [ARGS...]",
    "",
    "Runs a harness through every conformance case, each in a working directory of its own with a",
    "scripted model on the LLM proxy's routes and the environment the real stack gives. Arguments",
    "of COMMAND naming files under --plugin-dir become absolute; a bare program is looked up on PATH.",
    "",
    "options:",
    ...lines,
    "",
    `cases: ${CONFORMANCE_CASES.map((c) => c.id).join(", ")}`,
    "",
    "output: one line per case (PASS, FAIL, WARN, N/A, XFAIL), then a line for each route --route auto",
    "left untested, then a line of other counts when there are any, then exactly `N passed, N failed`.",
    "exit status: 0 no case failed; 1 a case failed; 2 usage error.",
  ].join("\n");
}

interface Args {
  json: boolean;
  list: boolean;
  help: boolean;
  command: string[];
  expectedFailures?: string[];
  only?: string[];
  graceMs?: number;
  caseTimeoutMs?: number;
  toolProfiles?: ToolProfile[];
  route?: RouteSelection;
  pluginDir?: string;
  env: Record<string, string>;
  transcripts?: string;
  keepTempDirs: boolean;
}

function parse(argv: string[]): Args {
  const separator = argv.indexOf("--");
  const flags = separator === -1 ? argv : argv.slice(0, separator);
  const command = separator === -1 ? [] : argv.slice(separator + 1);
  const out: Args = { json: false, list: false, help: false, command, env: {}, keepTempDirs: false };
  const number = (flag: string, text: string): number => {
    const n = Number(text);
    if (!Number.isInteger(n) || n <= 0)
      throw new Error(`${flag} needs a positive whole number of milliseconds, got ${JSON.stringify(text)}`);
    return n;
  };
  for (let i = 0; i < flags.length; i++) {
    const flag = flags[i] ?? "";
    const value = (): string => {
      const next = flags[++i];
      if (next === undefined) throw new Error(`${flag} needs a value`);
      return next;
    };
    if (flag === "--help" || flag === "-h") out.help = true;
    else if (flag === "--json") out.json = true;
    else if (flag === "--list") out.list = true;
    else if (flag === "--keep-temp-dirs") out.keepTempDirs = true;
    else if (flag === "--expected-failures") out.expectedFailures = readExpectedFailures(value());
    else if (flag === "--only")
      out.only = value()
        .split(",")
        .map((id) => id.trim())
        .filter(Boolean);
    else if (flag === "--grace-ms") out.graceMs = number(flag, value());
    else if (flag === "--case-timeout-ms") out.caseTimeoutMs = number(flag, value());
    else if (flag === "--plugin-dir") out.pluginDir = path.resolve(value());
    else if (flag === "--transcripts") out.transcripts = path.resolve(value());
    else if (flag === "--route") out.route = parseRouteSelection(value());
    else if (flag === "--tool-profile") (out.toolProfiles ??= []).push(loadToolProfile(value()));
    else if (flag === "--env") {
      const pair = value();
      const eq = pair.indexOf("=");
      if (eq <= 0) throw new Error(`--env needs NAME=VALUE, got ${JSON.stringify(pair)}`);
      out.env[pair.slice(0, eq)] = pair.slice(eq + 1);
    } else throw new Error(`unknown option ${flag}`);
  }
  const known = new Set(CONFORMANCE_CASES.map((c) => c.id));
  const unknown = (out.only ?? []).filter((id) => !known.has(id));
  if (unknown.length > 0)
    throw new Error(`--only names unknown case(s) ${unknown.join(", ")}; known cases: ${[...known].join(", ")}`);
  if (out.only?.length === 0) throw new Error("--only needs at least one case id");
  if (command.length === 0 && !out.help && !out.list) throw new Error("no harness command after --");
  return out;
}

function writeTranscripts(dir: string, report: ConformanceReport): void {
  mkdirSync(dir, { recursive: true });
  for (const result of report.cases) {
    if (!result.transcripts?.length) continue;
    const text = result.transcripts
      .map((t) => `# scenario ${t.scenario} (${t.route} route)\n${formatTranscript(t.lines)}`)
      .join("\n\n");
    writeFileSync(path.join(dir, `${result.id}.txt`), `${text}\n`);
  }
}

// A reader that stops early (`| head`) is not an error of the harness under test.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(process.exitCode ?? 1);
  throw error;
});

let args: Args;
try {
  args = parse(process.argv.slice(2));
} catch (error) {
  process.stderr.write(`oz0-harness-conformance: ${(error as Error).message}\n\n${usageText()}\n`);
  process.exit(2);
}

if (args.help) {
  process.stdout.write(`${usageText()}\n`);
  process.exit(0);
}
if (args.list) {
  for (const c of CONFORMANCE_CASES) process.stdout.write(`${c.id}\t${c.level}\t${c.rule}\t${c.title}\n`);
  process.exit(0);
}

const report = await runConformance({
  command: args.command,
  expectedFailures: args.expectedFailures,
  only: args.only,
  graceMs: args.graceMs,
  caseTimeoutMs: args.caseTimeoutMs,
  toolProfiles: args.toolProfiles,
  route: args.route,
  pluginDir: args.pluginDir,
  env: args.env,
  keepTempDirs: args.keepTempDirs,
  transcripts: args.transcripts !== undefined,
  onCaseDone: (result) => {
    if (!args.json) process.stdout.write(`${formatCaseLine(result)}\n`);
  },
});
if (args.transcripts !== undefined) writeTranscripts(args.transcripts, report);
if (args.json) {
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
} else {
  // Entries that are not cases (unknown ids in a list) were not printed as they ran.
  for (const result of report.cases.filter((r) => r.rule === "")) process.stdout.write(`${formatCaseLine(result)}\n`);
  for (const line of formatUntestedRoutes(report)) process.stdout.write(`${line}\n`);
  for (const notice of report.notices) process.stdout.write(`warning: ${notice}\n`);
  const other = formatOtherCounts(report);
  if (other !== "") process.stdout.write(`${other}\n`);
  process.stdout.write(`${formatSummary(report)}\n`);
}
process.exitCode = report.ok ? 0 : 1;
