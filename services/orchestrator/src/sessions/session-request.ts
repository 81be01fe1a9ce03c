// The one place a session's start is written: the SessionRequest and the
// harness command every session of the orchestrator starts with, whether it
// is a job's session, a harness operation's scratch session or a graph's
// custom step. What differs between them is passed in; what a harness may
// rely on (the protocol version, the agent's model, limits, skills, the LLM
// proxy's address and headers) is set the same way for all.
import { create, type JsonObject as ProtoJsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { ProtocolVersion, SessionRequestSchema, type RuntimeTool } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { sessionSkills } from "../agents/agent-skills.js";
import { resolveHarnessCommand } from "../agents/harness-command.js";
import type { AgentVersionRecord } from "../store/job-store.js";
import type { MintedToken, StartSessionOptions } from "./session-runner.js";

/** A session of an agent version: a job's, or a harness operation's scratch session. */
export interface AgentSessionInit {
  sessionId: string;
  jobId: string;
  agent: AgentVersionRecord;
  /** The session token the LLM proxy minted for it. */
  token: MintedToken;
  input: string;
  /** Replaces the version's rendered instructions (a harness operation adds its own to them). */
  instructions?: string;
  /** When the session must end; none when the agent sets no timeout. */
  deadline?: Date;
  runtimeTools: RuntimeTool[];
  /** The structured result the harness must end with (a harness operation's result_schema). */
  outputSchema?: ProtoJsonObject;
  /** Copied into the session's working directory. */
  attachments?: string[];
  /** Run in the live working directory of this other session (a harness operation's scratch session). */
  shareWorkingDirOf?: string;
}

/** How an agent version's session starts: its request and its harness's command. */
export function agentSessionStart(init: AgentSessionInit): StartSessionOptions {
  const { agent, token } = init;
  const definition = agent.definition;
  const request = create(SessionRequestSchema, {
    protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1,
    sessionId: init.sessionId,
    jobId: init.jobId,
    agent: { name: agent.name, version: agent.version },
    model: { primary: definition.model.primary, fallbacks: definition.model.fallbacks ?? [] },
    instructions: init.instructions ?? agent.instructions,
    input: init.input,
    limits: {
      maxTurns: definition.limits?.max_steps ?? 0,
      ...(init.deadline ? { deadline: timestampFromDate(init.deadline) } : {}),
    },
    harnessOptions: (definition.harness ?? {}) as ProtoJsonObject,
    permissions: agent.harness.manifest.permissions ?? false,
    runtimeTools: init.runtimeTools,
    ...(init.outputSchema ? { outputSchema: init.outputSchema } : {}),
    // The version's whole skill catalogue: every session of it sees the same.
    skills: sessionSkills(agent),
    llm: {
      anthropicBaseUrl: token.anthropicBaseUrl,
      openaiBaseUrl: token.openaiBaseUrl,
      token: token.token,
      headers: { ...token.headers, "Oz0-Job": init.jobId, "Oz0-Agent": agent.name },
    },
  });
  return {
    request,
    command: resolveHarnessCommand(agent.harness),
    pluginDir: agent.harness.pluginPath,
    attachments: init.attachments ?? [],
    ...(init.shareWorkingDirOf ? { shareWorkingDirOf: init.shareWorkingDirOf } : {}),
  };
}

/**
 * A session of the orchestrator's own program (a graph's custom step): no
 * agent version, no model, no tool policy; `command` runs with `pluginDir`
 * as the plugin folder.
 */
export function programSessionStart(init: {
  sessionId: string;
  jobId: string;
  name: string;
  input: string;
  command: string[];
  pluginDir: string;
}): StartSessionOptions {
  return {
    request: create(SessionRequestSchema, {
      protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1,
      sessionId: init.sessionId,
      jobId: init.jobId,
      agent: { name: init.name, version: 0 },
      instructions: "",
      input: init.input,
      permissions: false,
    }),
    command: init.command,
    pluginDir: init.pluginDir,
    attachments: [],
  };
}
