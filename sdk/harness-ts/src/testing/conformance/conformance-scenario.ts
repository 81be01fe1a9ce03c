// One conformance scenario: a scripted model on the LLM proxy's routes, a
// fresh working directory, the environment the real stack gives, the harness
// run through the real host side, and everything recorded for checks (events,
// model calls, the protocol transcript, processes left behind).
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { Transform } from "node:stream";
import type { TransformCallback } from "node:stream";
import { create, fromJson } from "@bufbuild/protobuf";
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type {
  PermissionAnswer_Outcome,
  PermissionRequest,
  RuntimeToolCall,
  SessionEvent,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import { startHostSession } from "../../host/index.js";
import type { HarnessLauncher, HostSession, SessionOutcome } from "../../host/index.js";
import { startScriptedModel } from "../scripted-model.js";
import type { ScriptedRequest, ScriptedTurn } from "../scripted-model.js";
import { stateSubdirectories } from "../../host/session-environment.js";
import { sessionEnvironment } from "./session-environment.js";
import { newLeftovers, STRAGGLER_MS, sweepSession, trackingLauncher } from "./session-processes.js";
import type { LeftoverProcesses } from "./session-processes.js";
import { detectToolProfile, KNOWN_TOOL_PROFILES, offeredToolNames } from "./tool-profiles.js";
import { isOnRoute, offRouteMessage, ROUTE_MODELS } from "./model-routes.js";
import type { ModelRoute } from "./model-routes.js";
import type { ToolProfile } from "./tool-profiles.js";
import { checkResultAndExit } from "./case-checks.js";

export { check, ConformanceFailure } from "./conformance-failure.js";

/** Settings shared by every scenario of one conformance run. */
export interface ScenarioSettings {
  /** The harness command, already resolved (absolute paths). */
  command: string[];
  /** Extra environment for the harness, on top of the stack's. */
  env: Record<string, string>;
  /** The plugin folder (`OZ0_PLUGIN_DIR`). */
  pluginDir: string;
  graceMs: number;
  /** Each scenario's deadline: a harness that hangs fails instead of blocking the run. */
  caseTimeoutMs: number;
  /** Profiles to recognise the harness's tools by. */
  toolProfiles: readonly ToolProfile[];
  /** Keep the temporary directories (for debugging). */
  keepTempDirs: boolean;
  /** What the harness declared in `started` during the kit's first session (undefined when it sent none). */
  capabilities?: Partial<Record<"permissions" | "runtimeTools" | "structuredOutput" | "streamingText", boolean>>;
  /** The route the scenarios' requests name, by their model's provider. */
  route: ModelRoute;
  /** Called with every scenario's protocol transcript. */
  onTranscript?: (scenario: string, route: ModelRoute, lines: TranscriptLine[]) => void;
}

/** One line of the protocol as it crossed the pipes. */
export interface TranscriptLine {
  /** `runtime`: a stdin line (the request, an answer); `harness`: a stdout line (an event). */
  from: "runtime" | "harness";
  line: string;
}

/** What a scenario's scripted model sees and decides with. */
export interface TurnContext {
  /** The harness's tools, recognised from the first model request (the first known profile when none matched). */
  profile: ToolProfile;
  /** True when the harness offers the tools of `profile`. */
  hasTools: boolean;
  workDir: string;
  caseDir: string;
  /** Model calls so far (side calls excluded), this one included. */
  call: number;
  session: HostSession;
}

/** A scenario's answer to a permission request. */
export interface ScenarioPermissionAnswer {
  allow: boolean;
  input?: JsonObject;
  reason?: string;
  /** Default OUTCOME_ANSWERED. */
  outcome?: PermissionAnswer_Outcome;
}

/** How to set up and drive one scenario. */
export interface ScenarioSpec {
  /** Short name used in ids and directory names. */
  id: string;
  input: string;
  permissions?: boolean;
  maxTurns?: number;
  /** Runtime tools offered in the request. */
  runtimeTools?: Array<{ name: string; description: string; inputSchema: JsonObject }>;
  outputSchema?: JsonObject;
  /** The model's answer to each call. */
  turn: (request: ScriptedRequest, context: TurnContext) => ScriptedTurn | Promise<ScriptedTurn>;
  /** Default: allow as asked. */
  answerPermission?: (request: PermissionRequest, context: ScenarioRun) => ScenarioPermissionAnswer;
  /** Default: an error saying the tool is unknown. */
  answerRuntimeTool?: (call: RuntimeToolCall) => { output?: JsonValue; isError?: boolean; error?: string };
  /** Called for every event before the default answers. */
  onEvent?: (event: SessionEvent, context: ScenarioRun) => void;
  /** Add unknown fields to every stdin line (rule 2). */
  injectUnknownFields?: boolean;
  /** Send this `protocolVersion` in the request line instead of PROTOCOL_VERSION_1 (rule 1). */
  protocolVersion?: string;
  /** The scenario drives the harness's file tools: not recognising them is a violation. */
  needsTools?: boolean;
  /** Not a case but the kit's look at what the harness declares and calls: rule 3 is left to the cases. */
  probe?: boolean;
}

/** Everything a scenario recorded. */
export interface ScenarioRun {
  outcome: SessionOutcome;
  events: SessionEvent[];
  /** Model calls that consumed a turn (side calls excluded). */
  modelRequests: ScriptedRequest[];
  /** Every request the scripted model got (on the proxy's routes). */
  allRequests: ScriptedRequest[];
  /** Calls the scripted model refused with the proxy's 404: paths the LLM proxy does not serve. */
  refusedRequests: Array<{ method: string; path: string }>;
  workDir: string;
  caseDir: string;
  sessionId: string;
  jobId: string;
  agentHeader: string;
  token: string;
  /** Problems noticed while the session ran (checked by the case). */
  violations: string[];
  profile: ToolProfile | undefined;
  /** Tool names offered in the first model request (undefined when the harness made none). */
  offeredTools: string[] | undefined;
  /** Processes alive after the harness exited (all killed by the kit). */
  leftovers: Pick<LeftoverProcesses, "inGroup" | "inGroupProcesses" | "escaped">;
  transcript: TranscriptLine[];
  /** How many bytes the harness wrote to stderr in all (the outcome keeps only the end). */
  stderrBytes: number;
  /** The scenario drives the harness's file tools (its spec's `needsTools`). */
  needsTools: boolean;
  /** Whether an event arrived before the session's deadline (block-buffered stdout delivers none). */
  wroteBeforeDeadline: boolean;
}

/**
 * Runs one scenario, then `verify` on what happened while the working
 * directory still exists (it is removed afterwards). Returns the run.
 */
export async function runScenario(
  settings: ScenarioSettings,
  spec: ScenarioSpec,
  verify: (run: ScenarioRun) => void = () => {},
): Promise<ScenarioRun> {
  const caseDir = await realpath(await mkdtemp(path.join(tmpdir(), `oz0-conformance-${spec.id}-`)));
  const workDir = path.join(caseDir, "work");
  const stateDir = path.join(caseDir, "state");
  await mkdir(workDir);
  for (const dir of [stateDir, ...stateSubdirectories(stateDir)]) await mkdir(dir, { recursive: true });
  const sessionId = `session-${spec.id}-${randomBytes(4).toString("hex")}`;
  const jobId = `job-conformance-${spec.id}`;
  const agentHeader = "conformance-agent@3";
  const token = `oz0st_${randomBytes(12).toString("hex")}`;
  const events: SessionEvent[] = [];
  const violations: string[] = [];
  const transcript: TranscriptLine[] = [];
  const leftovers = newLeftovers();
  let profile: ToolProfile | undefined;
  let hasTools = false;
  let offeredTools: string[] | undefined;
  let calls = 0;
  let session: HostSession | undefined;
  let stderrBytes = 0;
  let wroteBeforeDeadline = false;
  const run = {} as ScenarioRun;

  const model = await startScriptedModel({
    routes: "llm-proxy",
    turns: async (request) => {
      // A call of the other route is not the agent's turn: on the real stack it would reach the
      // other provider with a model it does not have. Refused here as that provider would.
      if (!isOnRoute(request.path, settings.route)) {
        const message = `the conformance kit: ${offRouteMessage(settings.route, request, true)}`;
        return { fail: { status: 404, message } };
      }
      calls++;
      if (profile === undefined) {
        offeredTools = offeredToolNames(request.body);
        profile = detectToolProfile(offeredTools, settings.toolProfiles);
        hasTools = profile !== undefined;
        if (profile === undefined) {
          if (spec.needsTools) {
            violations.push(
              `the harness offered no tools the kit knows how to drive (offered: ${offeredTools.join(", ") || "none"}; known: ${settings.toolProfiles
                .map((p) => `${p.readFile.tool}/${p.writeFile.tool}`)
                .join(", ")}; map yours with --tool-profile)`,
            );
          }
          profile = settings.toolProfiles[0] ?? KNOWN_TOOL_PROFILES[0];
        }
      }
      run.profile = profile;
      run.offeredTools = offeredTools;
      if (session === undefined || profile === undefined) return { text: "not ready" };
      return spec.turn(request, { profile, hasTools, workDir, caseDir, call: calls, session });
    },
  });

  try {
    const request = create(SessionRequestSchema, {
      protocolVersion: 1,
      sessionId,
      jobId,
      agent: { name: "conformance-agent", version: 3 },
      model: { primary: ROUTE_MODELS[settings.route], fallbacks: [] },
      instructions: "You are being tested by the Orchestrator Zero conformance kit.",
      input: spec.input,
      workingDir: workDir,
      stateDir,
      permissions: spec.permissions ?? false,
      limits: { maxTurns: spec.maxTurns ?? 10 },
      llm: {
        anthropicBaseUrl: model.anthropicBaseUrl,
        openaiBaseUrl: model.openaiBaseUrl,
        token,
        headers: { "Oz0-Job": jobId, "Oz0-Agent": agentHeader },
      },
      trace: { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", tracestate: "" },
      runtimeTools: spec.runtimeTools ?? [],
      outputSchema: spec.outputSchema,
    });
    const env = { ...sessionEnvironment({ request, pluginDir: settings.pluginDir }), ...settings.env };
    const rewrite = (line: string, index: number): string => {
      let out = line;
      if (index === 0 && spec.protocolVersion !== undefined)
        out = JSON.stringify({ ...(JSON.parse(out) as object), protocolVersion: spec.protocolVersion });
      if (spec.injectUnknownFields) out = addUnknownFields(out);
      return out;
    };
    const deadline = new Date(Date.now() + settings.caseTimeoutMs);
    session = startHostSession({
      command: settings.command,
      cwd: workDir,
      env,
      request,
      graceMs: settings.graceMs,
      deadline,
      // The tracking launcher innermost: it starts the harness inside its container.
      launcher: recordingLauncher(trackingLauncher(sessionId, leftovers), transcript, rewrite),
      onStderr: (chunk) => (stderrBytes += chunk.length),
      onEvent: (event) => {
        if (Date.now() < deadline.getTime()) wroteBeforeDeadline = true;
        events.push(event);
        spec.onEvent?.(event, run);
        const current = session;
        if (current === undefined) return;
        if (event.event.case === "permissionRequest") {
          const answer = spec.answerPermission?.(event.event.value, run) ?? { allow: true };
          current.answerPermission({ ...answer, id: event.event.value.id });
        } else if (event.event.case === "runtimeToolCall") {
          const call = event.event.value;
          const answer = spec.answerRuntimeTool?.(call) ?? {
            isError: true,
            error: `no runtime tool named ${call.name}`,
          };
          current.sendRuntimeToolResult({
            id: call.id,
            isError: answer.isError ?? false,
            error: answer.error ?? "",
            output: answer.output === undefined ? undefined : fromJson(ValueSchema, answer.output),
          });
        }
      },
    });
    Object.assign(run, {
      events,
      workDir,
      caseDir,
      sessionId,
      jobId,
      agentHeader,
      token,
      violations,
      modelRequests: [],
      allRequests: model.requests,
      refusedRequests: model.refused,
      leftovers: { inGroup: false, inGroupProcesses: [], escaped: leftovers.escaped },
      transcript,
      offeredTools,
      stderrBytes: 0,
      needsTools: spec.needsTools ?? false,
      wroteBeforeDeadline: false,
    });
    const outcome = await session.outcome;
    // The host stopped the harness if it failed to start; then nothing was launched and nothing is left.
    if (session.pid === undefined) leftovers.settle();
    // Never wait forever, whatever the launcher saw.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      leftovers.settled,
      new Promise<void>((resolve) => (timer = setTimeout(resolve, STRAGGLER_MS + settings.graceMs))),
    ]);
    clearTimeout(timer);
    // Whatever is still alive now (started late, or missed at exit) goes too.
    // (Members of the group are the group's verdict, just killed; they may not have died yet.)
    for (const p of sweepSession(sessionId))
      if (p.pgid !== session.pid && !leftovers.escaped.some((e) => e.pid === p.pid)) leftovers.escaped.push(p);
    run.outcome = outcome;
    run.stderrBytes = stderrBytes;
    run.wroteBeforeDeadline = wroteBeforeDeadline;
    run.leftovers = {
      inGroup: leftovers.inGroup,
      inGroupProcesses: leftovers.inGroupProcesses,
      escaped: leftovers.escaped,
    };
    run.modelRequests = model.requests.filter(
      (r) =>
        !r.sideCall && r.wire !== "anthropic-count-tokens" && r.wire !== "models" && isOnRoute(r.path, settings.route),
    );
    // Each wrong call once, first: a harness on the wrong route fails every case for that reason.
    const offRoute = [
      // Only model calls: a client's HEAD or GET of its base URL (Claude Code checks it can connect) is no call, and the proxy 404s it harmlessly.
      ...model.refused
        .filter((call) => call.method === "POST")
        .map((call) => offRouteMessage(settings.route, call, false)),
      ...model.requests
        .filter((r) => !isOnRoute(r.path, settings.route))
        .map((call) => offRouteMessage(settings.route, call, true)),
    ];
    violations.unshift(...new Set(offRoute));
    run.profile = profile;
    run.offeredTools = offeredTools;
    settings.onTranscript?.(spec.id, settings.route, transcript);
    verify(run);
    // After the case's own checks, whose findings say more: rule 3 holds in every case, as on the stack.
    if (!spec.probe) checkResultAndExit(run);
    return run;
  } finally {
    sweepSession(sessionId);
    await model.close();
    if (!settings.keepTempDirs) await rm(caseDir, { recursive: true, force: true });
  }
}

/**
 * Wraps a launcher to record every protocol line both ways, and to rewrite
 * stdin lines (`rewrite(line, index)`) before the harness reads them.
 */
function recordingLauncher(
  inner: HarnessLauncher,
  transcript: TranscriptLine[],
  rewrite: (line: string, index: number) => string,
): HarnessLauncher {
  return {
    launch(spec) {
      const launched = inner.launch(spec);
      const realStdin = launched.child.stdin;
      let pending = "";
      let index = 0;
      const injector = new Transform({
        transform(chunk: Buffer, _encoding, callback: TransformCallback) {
          pending += chunk.toString("utf8");
          const lines = pending.split("\n");
          pending = lines.pop() ?? "";
          const out = lines.map((line) => {
            if (line.trim() === "") return line;
            const rewritten = rewrite(line, index++);
            transcript.push({ from: "runtime", line: rewritten });
            return rewritten;
          });
          callback(null, out.length === 0 ? "" : `${out.join("\n")}\n`);
        },
      });
      injector.pipe(realStdin);
      realStdin.on("error", () => {});
      (launched.child as { stdin: unknown }).stdin = injector;
      // Listening before the host does: an event is recorded before the answer it gets.
      let partial = "";
      launched.child.stdout.on("data", (chunk: Buffer) => {
        partial += chunk.toString("utf8");
        const lines = partial.split("\n");
        partial = lines.pop() ?? "";
        for (const line of lines) if (line.trim() !== "") transcript.push({ from: "harness", line });
      });
      launched.child.stdout.on("end", () => {
        if (partial.trim() !== "") transcript.push({ from: "harness", line: partial });
      });
      return launched;
    },
  };
}

/** A transcript as text: one protocol line per line, `stdin  ` before what the runtime wrote, `stdout ` before what the harness wrote. */
export function formatTranscript(lines: readonly TranscriptLine[]): string {
  return lines.map((l) => `${l.from === "runtime" ? "stdin " : "stdout"} ${l.line}`).join("\n");
}

/** Adds unknown fields at the top level and inside every nested message. */
export function addUnknownFields(line: string): string {
  const visit = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(visit);
    if (value === null || typeof value !== "object") return value;
    const object = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, visit(v)]));
    return { ...object, oz0ConformanceUnknownField: { from: "a future runtime", n: 1 } };
  };
  const parsed = JSON.parse(line) as Record<string, unknown>;
  // Only objects that are messages get extra fields; Struct payloads (inputs, schemas) are left alone.
  const messageKeys = new Set(["agent", "model", "limits", "llm", "trace", "permissionAnswer", "runtimeToolResult"]);
  const out: Record<string, unknown> = {
    ...parsed,
    oz0ConformanceUnknownField: "ignored",
    oz0ConformanceUnknownList: [1, 2, 3],
  };
  for (const key of messageKeys) {
    const nested = parsed[key];
    if (nested !== null && typeof nested === "object" && !Array.isArray(nested)) {
      const copy: Record<string, unknown> = {
        ...(nested as Record<string, unknown>),
        oz0ConformanceUnknownField: visit({ deep: true }),
      };
      out[key] = copy;
    }
  }
  return JSON.stringify(out);
}

/** Request bodies as text, to look for what the model was told. */
export function requestText(request: ScriptedRequest | undefined): string {
  return request === undefined ? "" : JSON.stringify(request.body ?? null);
}
