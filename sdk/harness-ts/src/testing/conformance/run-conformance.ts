// Runs a harness through every conformance case and reports one line each.
import { readFileSync } from "node:fs";
import { CONFORMANCE_CASES } from "./conformance-cases.js";
import type { CapabilityName, ConformanceCase } from "./conformance-cases.js";
import { ConformanceFailure, runScenario } from "./conformance-scenario.js";
import type { ScenarioSettings } from "./conformance-scenario.js";
import { KNOWN_TOOL_PROFILES } from "./tool-profiles.js";
import type { ToolProfile } from "./tool-profiles.js";

/** Options of {@link runConformance}. */
export interface ConformanceOptions {
  /** The harness command and its arguments. */
  command: string[];
  /** Extra environment for the harness (PATH, HOME and planted provider keys are set by the kit). */
  env?: Record<string, string>;
  /** SIGTERM-to-SIGKILL grace; default 10 s, the protocol's default. */
  graceMs?: number;
  /** Deadline of each case; default 60 s. */
  caseTimeoutMs?: number;
  /** Only these case ids (default all). */
  only?: string[];
  /**
   * Case ids known to fail for this harness (a burn-down list). Such a case
   * failing is reported `xfail` and does not count as failed; such a case
   * passing is a failure ("stale entry") so the list only shrinks.
   */
  expectedFailures?: string[];
  /** How to recognise the harness's file tools; default the fake harnesses' and Claude Code's. */
  toolProfiles?: readonly ToolProfile[];
  /** Called after each case, e.g. to print as you go. */
  onCaseDone?: (result: ConformanceCaseResult) => void;
  /** Keep each case's temporary directory. */
  keepTempDirs?: boolean;
}

/** How one case went. */
export type ConformanceCaseStatus = "passed" | "failed" | "skipped" | "expected_failure";

/** The result of one case. */
export interface ConformanceCaseResult {
  id: string;
  title: string;
  status: ConformanceCaseStatus;
  /** Why it failed, was skipped, or is an expected failure. */
  message: string;
  durationMs: number;
}

/** The result of a conformance run. */
export interface ConformanceReport {
  cases: ConformanceCaseResult[];
  passed: number;
  /** Failed cases, stale expected failures included; expected failures excluded. */
  failed: number;
  skipped: number;
  expectedFailures: number;
  /** Capabilities the harness declared in `started` (undefined when it never sent one). */
  capabilities: Partial<Record<CapabilityName, boolean>> | undefined;
  /** True when every required case passed. */
  ok: boolean;
}

/**
 * Runs the harness through every case, one at a time, each with its own
 * scripted model and temporary working directory.
 */
export async function runConformance(options: ConformanceOptions): Promise<ConformanceReport> {
  const settings: ScenarioSettings = {
    command: options.command,
    env: options.env ?? {},
    graceMs: options.graceMs ?? 10_000,
    caseTimeoutMs: options.caseTimeoutMs ?? 60_000,
    toolProfiles: options.toolProfiles ?? KNOWN_TOOL_PROFILES,
    keepTempDirs: options.keepTempDirs ?? false,
  };
  const expected = new Set(options.expectedFailures ?? []);
  const known = new Set(CONFORMANCE_CASES.map((c) => c.id));
  const cases = CONFORMANCE_CASES.filter((c) => options.only === undefined || options.only.includes(c.id));
  const capabilities = await declaredCapabilities(settings);
  const results: ConformanceCaseResult[] = [];

  for (const id of expected) {
    if (!known.has(id)) results.push({ id, title: "expected failure", status: "failed", message: `the expected-failures list names an unknown case ${JSON.stringify(id)}`, durationMs: 0 });
  }
  for (const testCase of cases) {
    const result = await runCase(testCase, settings, capabilities, expected.has(testCase.id));
    results.push(result);
    options.onCaseDone?.(result);
  }
  const count = (status: ConformanceCaseStatus): number => results.filter((r) => r.status === status).length;
  const failed = count("failed");
  return { cases: results, passed: count("passed"), failed, skipped: count("skipped"), expectedFailures: count("expected_failure"), capabilities, ok: failed === 0 };
}

async function runCase(
  testCase: ConformanceCase,
  settings: ScenarioSettings,
  capabilities: Partial<Record<CapabilityName, boolean>> | undefined,
  expectedToFail: boolean,
): Promise<ConformanceCaseResult> {
  const base = { id: testCase.id, title: testCase.title };
  if (testCase.requires !== undefined && capabilities?.[testCase.requires] !== true) {
    const why = capabilities === undefined ? "capabilities unknown: the harness sent no started event" : `not declared: capabilities.${testCase.requires}`;
    return { ...base, status: "skipped", message: why, durationMs: 0 };
  }
  const started = performance.now();
  let failure: string | undefined;
  try {
    await testCase.run(settings);
  } catch (error) {
    failure = error instanceof ConformanceFailure ? error.message : `the kit failed: ${(error as Error).stack ?? String(error)}`;
  }
  const durationMs = performance.now() - started;
  if (expectedToFail) {
    return failure === undefined
      ? { ...base, status: "failed", message: "listed as an expected failure but passes now: remove it from the expected-failures list", durationMs }
      : { ...base, status: "expected_failure", message: failure, durationMs };
  }
  return failure === undefined ? { ...base, status: "passed", message: "", durationMs } : { ...base, status: "failed", message: failure, durationMs };
}

/** Runs a text-only session once to learn what the harness declares. */
async function declaredCapabilities(settings: ScenarioSettings): Promise<Partial<Record<CapabilityName, boolean>> | undefined> {
  try {
    const run = await runScenario(settings, { id: "capabilities", input: "Say hello.", turn: () => ({ text: "Hello." }) });
    const declared = run.outcome.started?.capabilities;
    if (run.outcome.started === undefined) return undefined;
    return {
      permissions: declared?.permissions ?? false,
      runtimeTools: declared?.runtimeTools ?? false,
      structuredOutput: declared?.structuredOutput ?? false,
      streamingText: declared?.streamingText ?? false,
    };
  } catch {
    return undefined;
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

/** One line per case, as the CLI prints it. */
export function formatCaseLine(result: ConformanceCaseResult): string {
  const label = { passed: "PASS ", failed: "FAIL ", skipped: "SKIP ", expected_failure: "XFAIL" }[result.status];
  return `${label} ${result.id}: ${result.title}${result.message ? ` — ${result.message}` : ""}`;
}

/** The closing line: exactly `N passed, N failed`. */
export function formatSummary(report: ConformanceReport): string {
  return `${report.passed} passed, ${report.failed} failed`;
}
