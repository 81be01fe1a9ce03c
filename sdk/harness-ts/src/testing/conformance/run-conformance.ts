// Runs a harness through every conformance case and reports one line each.
import { readFileSync } from "node:fs";
import { CONFORMANCE_CASES } from "./conformance-cases.js";
import type { CapabilityName, CaseLevel, ConformanceCase } from "./conformance-cases.js";
import { ConformanceFailure, runScenario } from "./conformance-scenario.js";
import type { ScenarioSettings, TranscriptLine } from "./conformance-scenario.js";
import { hiddenProgramNotice, resolveHarnessCommand } from "./harness-command.js";
import { KNOWN_TOOL_PROFILES } from "./tool-profiles.js";
import type { ToolProfile } from "./tool-profiles.js";
import { calledProvider, MODEL_ROUTES, ROUTE_MODELS, routeName } from "./model-routes.js";
import type { ModelRoute, RouteSelection } from "./model-routes.js";
import { stopReasonName } from "./case-checks.js";

/** The version of the report's JSON form (`--json`); bumped only for incompatible changes. */
export const CONFORMANCE_REPORT_VERSION = 1;

/** Options of {@link runConformance}. */
export interface ConformanceOptions {
  /**
   * The harness command and its arguments. Arguments naming files under
   * `pluginDir` become absolute and a bare program is looked up on PATH, as
   * the orchestrator does with a plugin manifest's command.
   */
  command: string[];
  /** Added to the environment the stack gives (see the SDK README); wins over it. */
  env?: Record<string, string>;
  /** The plugin's folder: relative paths in `command` resolve here, and it is `OZ0_PLUGIN_DIR`. Default the current directory. */
  pluginDir?: string;
  /** SIGTERM-to-SIGKILL grace; default 10 s, the protocol's default. */
  graceMs?: number;
  /** Deadline of each scenario; default 60 s. */
  caseTimeoutMs?: number;
  /** Only these case ids (default all). An unknown id is a failed entry naming the known ones. */
  only?: string[];
  /**
   * Case ids known to fail for this harness (a burn-down list). Such a case
   * failing is reported `expected_failure` and does not count as failed;
   * such a case passing is a failure ("stale entry") so the list only shrinks.
   */
  expectedFailures?: string[];
  /**
   * The routes to run the cases on, chosen in the request by its model's
   * provider: `anthropic` (`anthropic/…` models, the Messages API),
   * `openai` (`openai/…`, Chat Completions), `both`, or `auto` (the default):
   * every route the harness calls when its session's model is of that
   * provider, found by one text-only session per route; a route it does not
   * call is reported in `untestedRoutes`, with what it did instead.
   */
  route?: RouteSelection;
  /** The harness's file tools; default the fake harnesses' (`read_file`/`write_file`) and Claude Code's (`Read`/`Write`). */
  toolProfiles?: readonly ToolProfile[];
  /** Called after each case, e.g. to print as you go. */
  onCaseDone?: (result: ConformanceCaseResult) => void;
  /** Keep each case's temporary directory. */
  keepTempDirs?: boolean;
  /** Keep every scenario's protocol transcript in the case results. */
  transcripts?: boolean;
}

/**
 * How one case went: `passed`; `failed` (a required case, or a stale
 * expected failure); `warning` (a recommended case failed); `not_applicable`
 * (the harness does not declare a capability the case needs, or offers no
 * tools the kit can drive); `expected_failure` (listed, and failing).
 */
export type ConformanceCaseStatus = "passed" | "failed" | "warning" | "not_applicable" | "expected_failure";

/** The result of one case. */
export interface ConformanceCaseResult {
  id: string;
  title: string;
  /** The rule it checks (`rule 5`, `ToolCall, ToolResult`, …). */
  rule: string;
  level: CaseLevel;
  status: ConformanceCaseStatus;
  /** Why it failed, warned, is not applicable, or is an expected failure; empty when it passed. */
  message: string;
  durationMs: number;
  /** The routes the case ran on (empty when it did not run); a failure's message names the route when there are two. */
  routes: ModelRoute[];
  /** With `transcripts`: each scenario's protocol lines, both ways, in order. */
  transcripts?: Array<{ scenario: string; route: ModelRoute; lines: TranscriptLine[] }>;
}

/** The result of a conformance run; its JSON form is what `--json` prints. */
export interface ConformanceReport {
  /** {@link CONFORMANCE_REPORT_VERSION}. */
  version: number;
  /** True when no case failed (warnings, not-applicable cases and expected failures do not count). */
  ok: boolean;
  /** The command as run (resolved). */
  command: string[];
  /** What `started` said (undefined when the harness sent none). */
  harness: { name: string; version: string } | undefined;
  /** Capabilities the harness declared in `started` (undefined when it sent none). */
  capabilities: Partial<Record<CapabilityName, boolean>> | undefined;
  /** Tool names the harness offered in its first model request (undefined when it made none). */
  offeredTools: string[] | undefined;
  /** The tool profile the kit drives the harness's tools with (undefined when none matched). */
  toolProfile: string | undefined;
  /** The routes the cases ran on. */
  routes: ModelRoute[];
  /** With `route: "auto"`, the routes the harness did not call, and what it did instead. */
  untestedRoutes: Array<{ route: ModelRoute; reason: string }>;
  /** What the results mean for the plugin's manifest, beyond passed and failed (the CLI prints each as `warning: …`). */
  notices: string[];
  passed: number;
  /** Failed cases, stale and unknown entries included; expected failures excluded. */
  failed: number;
  warnings: number;
  notApplicable: number;
  expectedFailures: number;
  cases: ConformanceCaseResult[];
}

interface Probe {
  harness: ConformanceReport["harness"];
  capabilities: ConformanceReport["capabilities"];
  offeredTools: string[] | undefined;
  toolProfile: string | undefined;
  /** Whether the harness called the route's provider (`/openai/…`) at all, and if not, what it did. */
  calledRoute: boolean;
  instead: string;
}

/**
 * Runs the harness through every case, one at a time, each with its own
 * scripted model and temporary working directory.
 */
export async function runConformance(options: ConformanceOptions): Promise<ConformanceReport> {
  const pluginDir = options.pluginDir ?? process.cwd();
  const command = resolveHarnessCommand(options.command, pluginDir);
  const selection = options.route ?? "auto";
  const candidates = selection === "auto" || selection === "both" ? MODEL_ROUTES : [selection];
  const settings: ScenarioSettings = {
    route: candidates[0] ?? "anthropic",
    command,
    env: options.env ?? {},
    pluginDir,
    graceMs: options.graceMs ?? 10_000,
    caseTimeoutMs: options.caseTimeoutMs ?? 60_000,
    toolProfiles: options.toolProfiles ?? KNOWN_TOOL_PROFILES,
    keepTempDirs: options.keepTempDirs ?? false,
  };
  const expected = new Set(options.expectedFailures ?? []);
  const known = new Set(CONFORMANCE_CASES.map((c) => c.id));
  const knownList = CONFORMANCE_CASES.map((c) => c.id).join(", ");
  const results: ConformanceCaseResult[] = [];
  const unknownEntry = (id: string, what: string): ConformanceCaseResult => ({
    id,
    title: what,
    rule: "",
    level: "required",
    status: "failed",
    message: `${what} names an unknown case ${JSON.stringify(id)}; known cases: ${knownList}`,
    durationMs: 0,
    routes: [],
  });
  for (const id of expected) if (!known.has(id)) results.push(unknownEntry(id, "the expected-failures list"));
  for (const id of options.only ?? []) if (!known.has(id)) results.push(unknownEntry(id, "--only"));

  const cases = CONFORMANCE_CASES.filter((c) => options.only === undefined || options.only.includes(c.id));
  // `auto` probes each route; otherwise one probe tells what the harness declares.
  const probes = new Map<ModelRoute, Probe>();
  for (const route of selection === "auto" ? candidates : candidates.slice(0, 1))
    probes.set(route, await probeHarness({ ...settings, route }));
  let routes = [...candidates];
  const untestedRoutes: ConformanceReport["untestedRoutes"] = [];
  if (selection === "auto") {
    routes = candidates.filter((route) => probes.get(route)?.calledRoute);
    // A harness that called no model at all is tested (and fails, saying why) on the first route.
    if (routes.length === 0) routes = candidates.slice(0, 1);
    for (const route of candidates) {
      if (!routes.includes(route)) untestedRoutes.push({ route, reason: probes.get(route)?.instead ?? "" });
    }
  }
  const probe = probes.get(routes[0] ?? "anthropic") ?? [...probes.values()][0]!;
  settings.capabilities = probe.capabilities;
  for (const testCase of cases) {
    const result = await runCase(
      testCase,
      settings,
      testCase.anyRoute ? routes.slice(0, 1) : routes,
      probe,
      expected.has(testCase.id),
      options.transcripts ?? false,
    );
    results.push(result);
    options.onCaseDone?.(result);
  }
  const count = (status: ConformanceCaseStatus): number => results.filter((r) => r.status === status).length;
  const failed = count("failed");
  return {
    version: CONFORMANCE_REPORT_VERSION,
    ok: failed === 0,
    command,
    harness: probe.harness,
    capabilities: probe.capabilities,
    offeredTools: probe.offeredTools,
    toolProfile: probe.toolProfile,
    routes,
    untestedRoutes,
    notices: [
      ...manifestNotices(probe, results),
      ...[hiddenProgramNotice(command, pluginDir)].filter((n) => n !== undefined),
    ],
    passed: count("passed"),
    failed,
    warnings: count("warning"),
    notApplicable: count("not_applicable"),
    expectedFailures: count("expected_failure"),
    cases: results,
  };
}

/**
 * A harness that declares no permissions capability passes the kit with its
 * permission cases not applicable; on the stack it then fails every job its
 * manifest calls permission-gated. Said where it cannot be missed.
 */
function manifestNotices(probe: Probe, results: readonly ConformanceCaseResult[]): string[] {
  const permissionCases = new Set(
    CONFORMANCE_CASES.filter((c) => c.requires?.includes("permissions")).map((c) => c.id),
  );
  const skipped = results.some((r) => r.status === "not_applicable" && permissionCases.has(r.id));
  if (probe.capabilities === undefined || probe.capabilities.permissions || !skipped) return [];
  return [
    "the permission cases were not run: the harness declared no permissions capability in started; so its plugin manifest must not say permissions: true (on the stack, a harness whose manifest says so and whose started does not fails each job at its start), and without it the orchestrator refuses agents on it that set harness.requires_approval, hooks or approvals",
  ];
}

/** Why a case cannot apply to this harness, or undefined when it applies. */
function notApplicable(testCase: ConformanceCase, probe: Probe, profiles: readonly ToolProfile[]): string | undefined {
  const missing = (testCase.requires ?? []).filter((name) => probe.capabilities?.[name] !== true);
  if (missing.length > 0) {
    if (probe.capabilities === undefined) return "capabilities unknown: the harness sent no started event";
    return `not declared: ${missing.map((name) => `capabilities.${name}`).join(", ")}`;
  }
  // Only when the kit saw the tools offered: a harness that never called its model is tested and fails.
  if (testCase.needsTools && probe.offeredTools !== undefined && probe.toolProfile === undefined) {
    return `no tools the kit can drive: the harness offers ${probe.offeredTools.join(", ") || "no tools"}; the kit drives ${profiles
      .map((p) => `${p.readFile.tool}/${p.writeFile.tool}`)
      .join(" or ")} (map yours with --tool-profile)`;
  }
  return undefined;
}

async function runCase(
  testCase: ConformanceCase,
  settings: ScenarioSettings,
  routes: readonly ModelRoute[],
  probe: Probe,
  expectedToFail: boolean,
  keepTranscripts: boolean,
): Promise<ConformanceCaseResult> {
  const base = { id: testCase.id, title: testCase.title, rule: testCase.rule, level: testCase.level };
  const why = notApplicable(testCase, probe, settings.toolProfiles);
  if (why !== undefined) {
    return {
      ...base,
      status: expectedToFail ? "failed" : "not_applicable",
      message: expectedToFail
        ? `listed as an expected failure but not applicable (${why}): remove it from the list`
        : why,
      durationMs: 0,
      routes: [],
    };
  }
  const transcripts: Array<{ scenario: string; route: ModelRoute; lines: TranscriptLine[] }> = [];
  const started = performance.now();
  const failures: string[] = [];
  for (const route of routes) {
    const caseSettings: ScenarioSettings = {
      ...settings,
      route,
      onTranscript: keepTranscripts
        ? (scenario, on, lines) => transcripts.push({ scenario, route: on, lines })
        : undefined,
    };
    try {
      await testCase.run(caseSettings);
    } catch (error) {
      const message =
        error instanceof ConformanceFailure
          ? withRule(error.message, testCase.rule)
          : `the kit failed: ${(error as Error).stack ?? String(error)}`;
      failures.push(routes.length > 1 ? `${routeName(route)}: ${message}` : message);
    }
  }
  // A message that ends with the harness's stderr takes lines of its own; the next route's starts on a new one.
  const failure =
    failures.length === 0 ? undefined : failures.join(failures.some((f) => f.includes("\n")) ? "\n" : "; ");
  const durationMs = performance.now() - started;
  const extra = { routes: [...routes], ...(keepTranscripts ? { transcripts } : {}) };
  if (expectedToFail) {
    return failure === undefined
      ? {
          ...base,
          status: "failed",
          message: "listed as an expected failure but passes now: remove it from the expected-failures list",
          durationMs,
          ...extra,
        }
      : { ...base, status: "expected_failure", message: failure, durationMs, ...extra };
  }
  if (failure === undefined) return { ...base, status: "passed", message: "", durationMs, ...extra };
  return {
    ...base,
    status: testCase.level === "required" ? "failed" : "warning",
    message: failure,
    durationMs,
    ...extra,
  };
}

/** `message (rule)`, the rule before the stderr lines a message may end with. */
function withRule(message: string, rule: string): string {
  const lineEnd = message.indexOf("\n");
  if (lineEnd === -1) return `${message} (${rule})`;
  return `${message.slice(0, lineEnd)} (${rule})${message.slice(lineEnd)}`;
}

/**
 * Runs a text-only session on `settings.route` to learn what the harness
 * declares, which tools it offers, and whether it calls that route at all.
 */
async function probeHarness(settings: ScenarioSettings): Promise<Probe> {
  const route = settings.route;
  try {
    const run = await runScenario(settings, {
      id: "probe",
      input: "Say hello.",
      probe: true,
      turn: () => ({ text: "Hello." }),
    });
    const started = run.outcome.started;
    const declared = started?.capabilities;
    const capabilities =
      started === undefined
        ? undefined
        : {
            permissions: declared?.permissions ?? false,
            runtimeTools: declared?.runtimeTools ?? false,
            structuredOutput: declared?.structuredOutput ?? false,
            streamingText: declared?.streamingText ?? false,
          };
    const profile =
      run.offeredTools === undefined
        ? undefined
        : settings.toolProfiles.find(
            (p) => run.offeredTools?.includes(p.readFile.tool) && run.offeredTools.includes(p.writeFile.tool),
          );
    const calls = [...run.refusedRequests, ...run.allRequests].filter((call) => call.method === "POST");
    const other = calls.find((call) => !calledProvider(call.path, route));
    const result = run.outcome.result;
    // A result the host refused (a lowercase stop reason, an unknown field's wrong type) is no result: the host's
    // error says why, rather than "without a result" of a harness that wrote one.
    const problem = run.outcome.error ? ` (${run.outcome.error.code}: ${run.outcome.error.message})` : "";
    const ended =
      result === undefined
        ? `ended ${run.outcome.status} without a result the host took${problem}`
        : `ended ${stopReasonName(result.stopReason)}${result.error ? `: ${result.error}` : ""}`;
    return {
      harness: started === undefined ? undefined : { name: started.harnessName, version: started.harnessVersion },
      capabilities,
      offeredTools: run.offeredTools,
      toolProfile: profile?.name,
      calledRoute: calls.some((call) => calledProvider(call.path, route)),
      instead:
        other === undefined
          ? `for a session of ${ROUTE_MODELS[route]} the harness made no model call (it ${ended})`
          : `for a session of ${ROUTE_MODELS[route]} the harness called ${other.method} ${other.path}, not ${routeName(route)}`,
    };
  } catch (error) {
    return {
      harness: undefined,
      capabilities: undefined,
      offeredTools: undefined,
      toolProfile: undefined,
      calledRoute: false,
      instead: `the kit's session of ${ROUTE_MODELS[route]} failed: ${(error as Error).message}`,
    };
  }
}

/**
 * Reads an expected-failures file: one case id per line; `#` starts a
 * comment (say why the case fails and what would fix it).
 */
export function readExpectedFailures(file: string): string[] {
  return readFileSync(file, "utf8")
    .split("\n")
    .map((line) => line.replace(/#.*/, "").trim())
    .filter((line) => line !== "");
}

const LABELS: Record<ConformanceCaseStatus, string> = {
  passed: "PASS ",
  failed: "FAIL ",
  warning: "WARN ",
  not_applicable: "N/A  ",
  expected_failure: "XFAIL",
};

/** One line per case, as the CLI prints it: `PASS  id: title`, `FAIL  id: title — why`, … */
export function formatCaseLine(result: ConformanceCaseResult): string {
  return `${LABELS[result.status]} ${result.id}: ${result.title}${result.message ? ` — ${result.message}` : ""}`;
}

/** The closing line: exactly `N passed, N failed`. */
export function formatSummary(report: ConformanceReport): string {
  return `${report.passed} passed, ${report.failed} failed`;
}

/** One line per route `auto` left untested, e.g. `not tested on the OpenAI route: for a session of openai/gpt-conformance the harness called …`. */
export function formatUntestedRoutes(report: ConformanceReport): string[] {
  return report.untestedRoutes.map((r) => `not tested on ${routeName(r.route)}: ${r.reason}`);
}

/** The line before the summary when something was neither passed nor failed, e.g. `5 not applicable, 1 warning`; empty otherwise. */
export function formatOtherCounts(report: ConformanceReport): string {
  const parts = [
    [report.notApplicable, "not applicable", "not applicable"],
    [report.warnings, "warning", "warnings"],
    [report.expectedFailures, "expected failure", "expected failures"],
  ] as const;
  return parts
    .filter(([n]) => n > 0)
    .map(([n, one, many]) => `${n} ${n === 1 ? one : many}`)
    .join(", ");
}
