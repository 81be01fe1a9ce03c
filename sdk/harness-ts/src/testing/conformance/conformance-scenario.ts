// One conformance scenario: a scripted model, a fresh working directory, the
// harness run through the real host side, and everything recorded for checks.
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
import type { PermissionRequest, RuntimeToolCall, SessionEvent } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { processGroupLauncher, startHostSession } from "../../host/index.js";
import type { HarnessLauncher, HostSession, SessionOutcome } from "../../host/index.js";
import { startScriptedModel } from "../scripted-model.js";
import type { ScriptedRequest, ScriptedTurn } from "../scripted-model.js";
import { detectToolProfile, KNOWN_TOOL_PROFILES, offeredToolNames } from "./tool-profiles.js";
import type { ToolProfile } from "./tool-profiles.js";

/** A conformance check that did not hold; its message says what the harness did wrong. */
export class ConformanceFailure extends Error {
  override name = "ConformanceFailure";
}

/** Settings shared by every scenario of one conformance run. */
export interface ScenarioSettings {
  command: string[];
  /** Extra environment for the harness (on top of PATH, HOME and the planted keys). */
  env: Record<string, string>;
  graceMs: number;
  /** Each scenario's deadline: a harness that hangs fails instead of blocking the run. */
  caseTimeoutMs: number;
  /** Profiles to recognise the harness's tools by. */
  toolProfiles: readonly ToolProfile[];
  /** Keep the temporary directories (for debugging). */
  keepTempDirs: boolean;
}

/** Provider keys planted in the harness's environment; none may ever reach the model. */
export const PLANTED_PROVIDER_KEYS: Readonly<Record<string, string>> = {
  ANTHROPIC_API_KEY: "sk-ant-api03-PLANTED-BY-OZ0-CONFORMANCE-never-send-me",
  OPENAI_API_KEY: "sk-proj-PLANTED-BY-OZ0-CONFORMANCE-never-send-me",
};

/** What a scenario's scripted model sees and decides with. */
export interface TurnContext {
  /** The harness's tools, recognised from the first model request. */
  profile: ToolProfile;
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
}

/** Everything a scenario recorded. */
export interface ScenarioRun {
  outcome: SessionOutcome;
  events: SessionEvent[];
  /** Model calls that consumed a turn (side calls excluded). */
  modelRequests: ScriptedRequest[];
  /** Every request the scripted model got. */
  allRequests: ScriptedRequest[];
  workDir: string;
  caseDir: string;
  jobId: string;
  agentHeader: string;
  token: string;
  /** Problems noticed while the session ran (checked by the case). */
  violations: string[];
  profile: ToolProfile | undefined;
}

/**
 * Runs one scenario, then `verify` on what happened while the working
 * directory still exists (it is removed afterwards). Returns the run.
 */
export async function runScenario(settings: ScenarioSettings, spec: ScenarioSpec, verify: (run: ScenarioRun) => void = () => {}): Promise<ScenarioRun> {
  const caseDir = await realpath(await mkdtemp(path.join(tmpdir(), `oz0-conformance-${spec.id}-`)));
  const workDir = path.join(caseDir, "work");
  const stateDir = path.join(caseDir, "state");
  await mkdir(workDir);
  await mkdir(stateDir);
  const jobId = `job-conformance-${spec.id}`;
  const agentHeader = "conformance-agent@3";
  const token = `oz0st_${randomBytes(12).toString("hex")}`;
  const events: SessionEvent[] = [];
  const violations: string[] = [];
  let profile: ToolProfile | undefined;
  let calls = 0;
  let session: HostSession | undefined;
  const run = {} as ScenarioRun;

  const model = await startScriptedModel({
    turns: async (request) => {
      calls++;
      if (profile === undefined) {
        const offered = offeredToolNames(request.body);
        profile = detectToolProfile(offered, settings.toolProfiles);
        if (profile === undefined) {
          violations.push(
            `the harness offered no tools the kit knows how to drive (offered: ${offered.join(", ") || "none"}; known: ${settings.toolProfiles
              .map((p) => `${p.writeFile.tool}/${p.readFile.tool}`)
              .join(", ")})`,
          );
          profile = settings.toolProfiles[0] ?? KNOWN_TOOL_PROFILES[0];
        }
      }
      run.profile = profile;
      if (session === undefined || profile === undefined) return { text: "not ready" };
      return spec.turn(request, { profile, workDir, caseDir, call: calls, session });
    },
  });

  try {
    const request = create(SessionRequestSchema, {
      protocolVersion: 1,
      sessionId: `session-${spec.id}-${randomBytes(4).toString("hex")}`,
      jobId,
      agent: { name: "conformance-agent", version: 3 },
      model: { primary: "anthropic/claude-conformance", fallbacks: [] },
      instructions: "You are being tested by the Orchestrator Zero conformance kit.",
      input: spec.input,
      workingDir: workDir,
      stateDir,
      permissions: spec.permissions ?? false,
      limits: { maxTurns: spec.maxTurns ?? 10 },
      llm: {
        anthropicBaseUrl: model.url,
        openaiBaseUrl: `${model.url}/v1`,
        token,
        headers: { "Oz0-Job": jobId, "Oz0-Agent": agentHeader },
      },
      trace: { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", tracestate: "" },
      runtimeTools: spec.runtimeTools ?? [],
      outputSchema: spec.outputSchema,
    });
    session = startHostSession({
      command: settings.command,
      cwd: workDir,
      env: { PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin", HOME: stateDir, TMPDIR: stateDir, ...PLANTED_PROVIDER_KEYS, ...settings.env },
      request,
      graceMs: settings.graceMs,
      deadline: new Date(Date.now() + settings.caseTimeoutMs),
      launcher: spec.injectUnknownFields ? unknownFieldLauncher() : undefined,
      onEvent: (event) => {
        events.push(event);
        spec.onEvent?.(event, run);
        const current = session;
        if (current === undefined) return;
        if (event.event.case === "permissionRequest") {
          const answer = spec.answerPermission?.(event.event.value, run) ?? { allow: true };
          current.answerPermission({ ...answer, id: event.event.value.id });
        } else if (event.event.case === "runtimeToolCall") {
          const call = event.event.value;
          const answer = spec.answerRuntimeTool?.(call) ?? { isError: true, error: `no runtime tool named ${call.name}` };
          current.sendRuntimeToolResult({
            id: call.id,
            isError: answer.isError ?? false,
            error: answer.error ?? "",
            output: answer.output === undefined ? undefined : fromJson(ValueSchema, answer.output),
          });
        }
      },
    });
    Object.assign(run, { events, workDir, caseDir, jobId, agentHeader, token, violations, modelRequests: [], allRequests: model.requests });
    const outcome = await session.outcome;
    run.outcome = outcome;
    run.modelRequests = model.requests.filter((r) => !r.sideCall && r.wire !== "anthropic-count-tokens" && r.wire !== "models");
    run.profile = profile;
    verify(run);
    return run;
  } finally {
    await model.close();
    if (!settings.keepTempDirs) await rm(caseDir, { recursive: true, force: true });
  }
}

/** Launches with the default launcher, adding unknown fields to every line written to stdin. */
function unknownFieldLauncher(): HarnessLauncher {
  const inner = processGroupLauncher();
  return {
    launch(spec) {
      const launched = inner.launch(spec);
      const realStdin = launched.child.stdin;
      const injector = new Transform({
        transform(chunk: Buffer, _encoding, callback: TransformCallback) {
          const lines = chunk.toString("utf8").split("\n");
          callback(null, lines.map((line) => (line.trim() === "" ? line : addUnknownFields(line))).join("\n"));
        },
      });
      injector.pipe(realStdin);
      realStdin.on("error", () => {});
      (launched.child as { stdin: unknown }).stdin = injector;
      return launched;
    },
  };
}

/** Adds unknown fields at the top level and inside every nested object. */
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
  const out: Record<string, unknown> = { ...parsed, oz0ConformanceUnknownField: "ignored", oz0ConformanceUnknownList: [1, 2, 3] };
  for (const key of messageKeys) {
    const nested = parsed[key];
    if (nested !== null && typeof nested === "object" && !Array.isArray(nested)) {
      const copy: Record<string, unknown> = { ...(nested as Record<string, unknown>), oz0ConformanceUnknownField: visit({ deep: true }) };
      out[key] = copy;
    }
  }
  return JSON.stringify(out);
}

/** Request bodies as text, to look for what the model was told. */
export function requestText(request: ScriptedRequest | undefined): string {
  return request === undefined ? "" : JSON.stringify(request.body ?? null);
}

/** Fails with `message` unless `condition` holds. */
export function check(condition: unknown, message: string): asserts condition {
  if (!condition) throw new ConformanceFailure(message);
}
