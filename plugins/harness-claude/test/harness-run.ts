// Runs dist/main.js as the runtime would (own process group, JSON lines on
// stdin and stdout) against the scripted model, with the real Claude Code
// binary, and collects what happened.
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { create, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import {
  SessionRequestSchema,
  type PermissionRequest,
  type RuntimeToolCall,
  type SessionEvent,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import {
  startHostSession,
  type HostSession,
  type PermissionAnswerInit,
  type RuntimeToolResultInit,
  type SessionOutcome,
} from "@oz0/harness/host";
import { startScriptedModel, type Script, type ScriptedModel } from "@oz0/harness/testing";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startLlmProxy } from "@oz0/llm-proxy";
import { LlmProxyService, SecretService, type GetUsageResponse } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { testCredentials } from "@oz0/serving/testing";

/** The init-object form of a message (not the message itself). */
type InitOf<T> = Exclude<T, { $typeName: string }>;
type AnswerInit = Omit<InitOf<PermissionAnswerInit>, "id">;
type ToolResultInit = Omit<InitOf<RuntimeToolResultInit>, "id">;

export const MAIN = fileURLToPath(new URL("../dist/main.js", import.meta.url));

/** A provider-key-shaped secret planted in the harness's environment; it must reach nobody. */
export const PLANTED_SECRET = "sk-ant-api03-PLANTED-provider-key-that-must-never-leave-0123456789";

/** The tenant's Anthropic key, held by the proxy only (when the run goes through it). */
export const CUSTODY_KEY = "sk-ant-api03-CUSTODY-key-held-by-the-proxy-only-9876543210";

export interface HarnessRun {
  outcome: SessionOutcome;
  /** The proxy's metering of the job, when the run went through the proxy. */
  usage?: GetUsageResponse;
  events: SessionEvent[];
  model: ScriptedModel;
  workingDir: string;
  stateDir: string;
  stderr: string;
}

export interface HarnessRunOptions {
  /** The scripted model's turns, given the session's directories (tools need absolute paths). */
  turns: (dirs: { workingDir: string; stateDir: string }) => Script;
  /** Fields of the session request to set or override. */
  request?: InitOf<MessageInitShape<typeof SessionRequestSchema>>;
  /** Answers each permission request; default: allow. */
  answer?: (request: PermissionRequest) => AnswerInit;
  runtimeTool?: (call: RuntimeToolCall) => ToolResultInit;
  /** Called once per event, with the running session (to cancel it, for example). */
  onEvent?: (event: SessionEvent, session: HostSession, model: ScriptedModel) => void;
  /**
   * Put the real LLM proxy between the harness and the scripted model: the
   * request's endpoint and token are minted by the proxy, which holds the
   * provider key.
   */
  viaProxy?: boolean;
  /** Files to create in the working directory first. */
  files?: Record<string, string>;
  /** More environment for the harness process (what a sandbox would add, such as its trace relay). */
  env?: Record<string, string>;
}

export const TOKEN = "oz0-session-token-7f3a";
export const HEADERS = { "Oz0-Job": "job-42", "Oz0-Agent": "coder@3" };

export async function runHarness(options: HarnessRunOptions): Promise<HarnessRun> {
  const root = await mkdtemp(path.join(os.tmpdir(), "oz0-harness-claude-"));
  const workingDir = path.join(root, "work");
  const stateDir = path.join(root, "state");
  await mkdir(workingDir);
  await mkdir(stateDir);
  const { writeFile } = await import("node:fs/promises");
  for (const [name, content] of Object.entries(options.files ?? {}))
    await writeFile(path.join(workingDir, name), content);

  const model = await startScriptedModel({ turns: options.turns({ workingDir, stateDir }) });
  let llm: { anthropicBaseUrl: string; token: string; headers: Record<string, string> } = {
    anthropicBaseUrl: model.url,
    token: TOKEN,
    headers: HEADERS,
  };
  const proxy = options.viaProxy
    ? await startLlmProxy({
        auth: testCredentials.settingsFor("llm-proxy"),
        providers: [
          {
            name: "anthropic",
            baseUrl: model.url,
            keySecret: "ANTHROPIC_API_KEY",
            prices: { "*": { input: 3, output: 15, cacheRead: 0.3, cacheWrite: 3.75 } },
          },
        ],
        kek: Buffer.alloc(32, 7),
      })
    : undefined;
  const control = proxy
    ? createClient(LlmProxyService, createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] }))
    : undefined;
  if (proxy && control) {
    await createClient(
      SecretService,
      createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] }),
    ).setSecret({ name: "ANTHROPIC_API_KEY", value: CUSTODY_KEY });
    const minted = await control.mintSessionToken({
      job: HEADERS["Oz0-Job"],
      agent: HEADERS["Oz0-Agent"],
      session: "session-1",
    });
    llm = { anthropicBaseUrl: minted.anthropicBaseUrl, token: minted.token, headers: { ...minted.headers } };
  }
  const request = create(SessionRequestSchema, {
    protocolVersion: 1,
    sessionId: "session-1",
    jobId: "job-42",
    agent: { name: "coder", version: 3 },
    model: { primary: "anthropic/claude-sonnet-4-5" },
    instructions: "Answer in one short sentence.",
    input: "Do the task.",
    workingDir,
    stateDir,
    permissions: true,
    llm,
    ...options.request,
  });
  const events: SessionEvent[] = [];
  let stderr = "";
  const session: HostSession = startHostSession({
    command: ["node", MAIN],
    cwd: workingDir,
    // What a node would pass, plus a provider key that must not get through.
    env: {
      PATH: process.env["PATH"] ?? "/usr/bin:/bin",
      HOME: stateDir,
      ANTHROPIC_API_KEY: PLANTED_SECRET,
      OPENAI_API_KEY: PLANTED_SECRET,
      ...options.env,
    },
    request,
    onStderr: (chunk) => void (stderr += chunk.toString("utf8")),
    onEvent: (event) => {
      events.push(event);
      const e = event.event;
      if (e.case === "permissionRequest") {
        const answer: AnswerInit = options.answer?.(e.value) ?? { allow: true };
        queueMicrotask(() => session.answerPermission({ id: e.value.id, ...answer }));
      } else if (e.case === "runtimeToolCall") {
        const result: ToolResultInit = options.runtimeTool?.(e.value) ?? {
          isError: true,
          error: "this test serves no runtime tools",
        };
        queueMicrotask(() => session.sendRuntimeToolResult({ id: e.value.id, ...result }));
      }
      options.onEvent?.(event, session, model);
    },
  });
  const outcome = await session.outcome;
  const usage = control ? await control.getUsage({ job: HEADERS["Oz0-Job"] }) : undefined;
  await proxy?.close();
  await model.close();
  return { outcome, events, model, workingDir, stateDir, stderr, ...(usage ? { usage } : {}) };
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

export type { JsonObject };
