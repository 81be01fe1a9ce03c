// Runs dist/main.js as the runtime would (own process group, JSON lines on
// stdin and stdout) against the scripted model, and collects what happened.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";
import { create } from "@bufbuild/protobuf";
import type { JsonObject, MessageInitShape } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { PermissionRequest, SessionEvent } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { startHostSession } from "@oz0/harness/host";
import type { HostSession, PermissionAnswerInit, SessionOutcome } from "@oz0/harness/host";
import { startScriptedModel } from "@oz0/harness/testing";
import type { Script, ScriptedModel } from "@oz0/harness/testing";

type InitOf<T> = Exclude<T, { $typeName: string }>;
type AnswerInit = Omit<InitOf<PermissionAnswerInit>, "id">;

export const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));
export const FIXTURES = fileURLToPath(new URL("./fixtures/", import.meta.url));

/** tsx's ESM loader, for fixture agents written in TypeScript. */
const TSX_LOADER = pathToFileURL(
  path.join(path.dirname(createRequire(import.meta.url).resolve("tsx/package.json")), "dist", "loader.mjs"),
).href;

/** A provider-key-shaped secret planted in the harness's environment; it must reach nobody. */
export const PLANTED_SECRET = "sk-ant-api03-PLANTED-provider-key-that-must-never-leave-0123456789";
export const TOKEN = "oz0-session-token-acp-5c1d";
export const HEADERS = { "Oz0-Job": "job-acp-7", "Oz0-Agent": "acp-coder@2" };

/** The harness options that run a fixture agent (a .ts file in test/fixtures) through tsx. */
export function fixtureAgent(name: string, extra: JsonObject = {}): JsonObject {
  // The agent runs in the (temporary) working directory, so tsx is named by its resolved URL.
  return { agent: { command: [process.execPath, "--import", TSX_LOADER, path.join(FIXTURES, name)], ...extra } };
}

export interface HarnessRun {
  outcome: SessionOutcome;
  events: SessionEvent[];
  model: ScriptedModel;
  workingDir: string;
  stateDir: string;
  stderr: string;
}

export interface HarnessRunOptions {
  /** The scripted model's turns, given the session's directories (tools need absolute paths). */
  turns: (dirs: { workingDir: string; stateDir: string }) => Script;
  harnessOptions?: JsonObject;
  /** Fields of the session request to set or override. */
  request?: InitOf<MessageInitShape<typeof SessionRequestSchema>>;
  /** Answers each permission request; default: allow. Undefined leaves it unanswered. */
  answer?: (request: PermissionRequest) => AnswerInit | undefined;
  onEvent?: (event: SessionEvent, session: HostSession) => void;
  /** Extra arguments of main.js (for example `--agent claude`). */
  args?: string[];
  /** Prepares the directories (files in the working directory, Claude Code's configuration) before the session. */
  setup?: (dirs: { workingDir: string; stateDir: string }) => Promise<void>;
  /** Point the request at another endpoint than the scripted model (the LLM proxy). */
  llm?: (model: ScriptedModel) => Promise<{ anthropicBaseUrl: string; token: string; headers: Record<string, string> }>;
}

export async function runHarness(options: HarnessRunOptions): Promise<HarnessRun> {
  const root = await mkdtemp(path.join(os.tmpdir(), "oz0-harness-acp-"));
  const workingDir = path.join(root, "work");
  const stateDir = path.join(root, "state");
  await mkdir(workingDir);
  await mkdir(stateDir);
  await options.setup?.({ workingDir, stateDir });
  const model = await startScriptedModel({ turns: options.turns({ workingDir, stateDir }) });
  const llm = options.llm ? await options.llm(model) : { anthropicBaseUrl: model.url, token: TOKEN, headers: HEADERS };
  const request = create(SessionRequestSchema, {
    protocolVersion: 1,
    sessionId: "session-acp-1",
    jobId: HEADERS["Oz0-Job"],
    agent: { name: "acp-coder", version: 2 },
    model: { primary: "anthropic/claude-sonnet-4-5" },
    instructions: "Answer in one short sentence.",
    input: "Do the task.",
    workingDir,
    stateDir,
    permissions: true,
    llm: { ...llm, openaiBaseUrl: `${model.url}/v1` },
    ...(options.harnessOptions ? { harnessOptions: options.harnessOptions } : {}),
    ...options.request,
  });
  const events: SessionEvent[] = [];
  let stderr = "";
  const session: HostSession = startHostSession({
    command: ["node", MAIN, ...(options.args ?? [])],
    cwd: workingDir,
    // What a node would pass, plus provider keys that must not get through.
    env: {
      PATH: process.env["PATH"] ?? "/usr/bin:/bin",
      HOME: stateDir,
      ANTHROPIC_API_KEY: PLANTED_SECRET,
      OPENAI_API_KEY: PLANTED_SECRET,
    },
    request,
    onStderr: (chunk) => void (stderr += chunk.toString("utf8")),
    onEvent: (event) => {
      events.push(event);
      const e = event.event;
      if (e.case === "permissionRequest") {
        const answer = options.answer ? options.answer(e.value) : { allow: true };
        if (answer !== undefined) queueMicrotask(() => session.answerPermission({ id: e.value.id, ...answer }));
      }
      options.onEvent?.(event, session);
    },
  });
  const outcome = await session.outcome;
  await model.close();
  return { outcome, events, model, workingDir, stateDir, stderr };
}

type EventOf<C> = Extract<SessionEvent["event"], { case: C }>["value"];

/** The values of every event of one kind, in order. */
export function ofCase<C extends NonNullable<SessionEvent["event"]["case"]>>(
  events: SessionEvent[],
  kind: C,
): EventOf<C>[] {
  const found: EventOf<C>[] = [];
  for (const e of events) if (e.event.case === kind) found.push(e.event.value as EventOf<C>);
  return found;
}

export async function removeRun(run: HarnessRun): Promise<void> {
  await rm(path.dirname(run.workingDir), { recursive: true, force: true });
}

export { writeFile };
