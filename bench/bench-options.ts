// The benchmarks' command-line options, parsed one way for all of them.
// Strict, because a hand-written parser that skipped unknown flags let a
// misspelt `--event 2000` run the default 100,000 events and report numbers
// for a run nobody asked for. A count given a non-number is refused for the
// same reason: `Number("2k")` would run NaN iterations, i.e. none.
import path from "node:path";
import { parseArgs } from "node:util";

/**
 * One option. `internal` ones are what a bench passes to the helper
 * processes it spawns of itself (`--role proxy`, `--worker`): accepted and
 * listed as known in errors, but left out of `--help`, which is for people.
 */
export type BenchOptionSpec =
  | { type: "number"; default?: number; internal?: boolean }
  | { type: "string"; default?: string; internal?: boolean }
  | { type: "boolean"; internal?: boolean };

type ValueOf<S extends BenchOptionSpec> = S extends { type: "boolean" }
  ? boolean
  : S extends { type: "number" }
    ? S extends { default: number }
      ? number
      : number | undefined
    : S extends { default: string }
      ? string
      : string | undefined;

export type BenchOptionValues<T extends Record<string, BenchOptionSpec>> = { [K in keyof T]: ValueOf<T[K]> };

/**
 * Parse `argv` (the script's own arguments) against `specs`. `--help` prints a
 * usage line made from the specs and exits 0; an unknown flag, a missing value
 * or a non-number for a number prints why, the known flags and the usage, and
 * exits 2, before the bench starts anything (a broker, a database) to clean up.
 * Both `--name value` and `--name=value` are accepted.
 */
export function benchOptions<const T extends Record<string, BenchOptionSpec>>(
  specs: T,
  argv: string[] = process.argv.slice(2),
): BenchOptionValues<T> {
  const script = path.relative(process.cwd(), process.argv[1] ?? "bench");
  const entries = Object.entries(specs);
  const usage = [
    "usage: node --import tsx",
    script,
    ...entries.filter(([, spec]) => !spec.internal).map(([name, spec]) => `[--${name}${placeholder(spec)}]`),
  ].join(" ");
  const fail = (why: string): never => {
    const known = [...entries.map(([name]) => `--${name}`), "--help"].join(", ");
    process.stderr.write(`${script}: ${why}\nknown options: ${known}\n${usage}\n`);
    process.exit(2);
  };

  let parsed: ReturnType<typeof parseArgs>["values"];
  try {
    // Numbers are read as strings and checked below: parseArgs has no number type.
    const options = Object.fromEntries(
      entries.map(([name, spec]) => [
        name,
        { type: spec.type === "boolean" ? ("boolean" as const) : ("string" as const) },
      ]),
    );
    parsed = parseArgs({
      args: argv,
      options: { ...options, help: { type: "boolean", short: "h" } },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (error) {
    // Node's own message names the flag or value; only its parse errors are the user's to fix.
    if ((error as { code?: string }).code?.startsWith("ERR_PARSE_ARGS_")) fail((error as Error).message);
    throw error;
  }
  if (parsed.help) {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  }

  const values: Record<string, number | string | boolean | undefined> = {};
  for (const [name, spec] of entries) {
    const raw = parsed[name];
    if (spec.type === "boolean") values[name] = raw === true;
    else if (typeof raw !== "string") values[name] = spec.default;
    else if (spec.type === "string") values[name] = raw;
    else {
      // Number("") and Number(" ") are 0, which would pass for a count silently.
      const n = Number(raw);
      values[name] = raw.trim() !== "" && Number.isFinite(n) ? n : fail(`--${name} takes a number, not '${raw}'`);
    }
  }
  return values as BenchOptionValues<T>;
}

/** What `--help` shows after a flag: its default where it has one worth showing. */
function placeholder(spec: BenchOptionSpec): string {
  if (spec.type === "boolean") return "";
  if (spec.default !== undefined && spec.default !== "") return ` ${spec.default}`;
  return spec.type === "number" ? " N" : " VALUE";
}
