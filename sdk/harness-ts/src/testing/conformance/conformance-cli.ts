// oz0-harness-conformance [--json] [--expected-failures FILE] [--only ID,...] [--grace-ms N] -- COMMAND [ARGS...]
import { formatCaseLine, formatSummary, readExpectedFailures, runConformance } from "./run-conformance.js";

const USAGE = "usage: oz0-harness-conformance [--json] [--expected-failures FILE] [--only ID,...] [--grace-ms N] [--case-timeout-ms N] -- COMMAND [ARGS...]";

function parse(argv: string[]): { json: boolean; command: string[]; expectedFailures?: string[]; only?: string[]; graceMs?: number; caseTimeoutMs?: number } {
  const separator = argv.indexOf("--");
  const flags = separator === -1 ? argv : argv.slice(0, separator);
  const command = separator === -1 ? [] : argv.slice(separator + 1);
  const out: ReturnType<typeof parse> = { json: false, command };
  for (let i = 0; i < flags.length; i++) {
    const flag = flags[i];
    const value = (): string => {
      const next = flags[++i];
      if (next === undefined) throw new Error(`${flag} needs a value`);
      return next;
    };
    if (flag === "--json") out.json = true;
    else if (flag === "--expected-failures") out.expectedFailures = readExpectedFailures(value());
    else if (flag === "--only") out.only = value().split(",");
    else if (flag === "--grace-ms") out.graceMs = Number(value());
    else if (flag === "--case-timeout-ms") out.caseTimeoutMs = Number(value());
    else throw new Error(`unknown option ${flag}`);
  }
  if (command.length === 0) throw new Error("no harness command after --");
  return out;
}

// A reader that stops early (`| head`) is not an error of the harness under test.
process.stdout.on("error", (error: NodeJS.ErrnoException) => {
  if (error.code === "EPIPE") process.exit(process.exitCode ?? 1);
  throw error;
});

let args: ReturnType<typeof parse>;
try {
  args = parse(process.argv.slice(2));
} catch (error) {
  process.stderr.write(`${(error as Error).message}\n${USAGE}\n`);
  process.exit(2);
}

const report = await runConformance({
  command: args.command,
  expectedFailures: args.expectedFailures,
  only: args.only,
  graceMs: args.graceMs,
  caseTimeoutMs: args.caseTimeoutMs,
  onCaseDone: (result) => {
    if (!args.json) process.stdout.write(`${formatCaseLine(result)}\n`);
  },
});
if (args.json) {
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
} else {
  for (const result of report.cases.filter((r) => r.title === "expected failure")) process.stdout.write(`${formatCaseLine(result)}\n`);
  process.stdout.write(`${formatSummary(report)}\n`);
}
process.exitCode = report.ok ? 0 : 1;
