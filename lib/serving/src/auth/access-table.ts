// The one table of who may call what, for every method of every service in
// proto/. A method missing here is refused at start (serve() checks every
// method it registers), and a test walks every proto so a new method cannot
// ship without a line here.
import type { Role, ServiceName } from "./principal.js";

export type Access =
  /** Anyone, with or without a credential: health, and redeeming a login code (the code is the credential). */
  | { open: true }
  /** Any authenticated principal (server reflection). */
  | { anyPrincipal: true }
  /** People with this role (roles imply others, see impliedRoles), and the listed services / nodes. */
  | { role?: Role; services?: readonly ServiceName[]; node?: boolean };

const orchestratorOnly = { services: ["orchestrator"] } as const;

export const ACCESS_TABLE: Readonly<Record<string, Access>> = {
  // Health stays open: probes and load balancers carry no credential.
  "grpc.health.v1.Health/Check": { open: true },
  "grpc.health.v1.Health/Watch": { open: true },
  "grpc.reflection.v1.ServerReflection/ServerReflectionInfo": { anyPrincipal: true },
  "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": { anyPrincipal: true },

  // The orchestrator's public API: people.
  "oz0.orchestrator.v1.JobService/RunAgent": { role: "operator" },
  "oz0.orchestrator.v1.JobService/GetJob": { role: "viewer" },
  "oz0.orchestrator.v1.JobService/ListJobs": { role: "viewer" },
  "oz0.orchestrator.v1.JobService/WatchJob": { role: "viewer" },
  "oz0.orchestrator.v1.JobService/WatchJobs": { role: "viewer" },
  "oz0.orchestrator.v1.JobService/CancelJob": { role: "operator" },
  "oz0.orchestrator.v1.JobService/GetArtifacts": { role: "viewer" },
  "oz0.orchestrator.v1.JobService/AnswerPermission": { role: "approver" },
  "oz0.orchestrator.v1.JobService/ListApprovals": { role: "viewer" },
  "oz0.orchestrator.v1.JobService/GetJobUsage": { role: "viewer" },
  "oz0.orchestrator.v1.JobService/SummarizeUsage": { role: "viewer" },
  "oz0.orchestrator.v1.JobService/GetJobLogs": { role: "viewer" },
  "oz0.orchestrator.v1.JobService/GetJobTranscript": { role: "viewer" },
  "oz0.orchestrator.v1.JobService/WatchJobTranscript": { role: "viewer" },
  "oz0.orchestrator.v1.PluginService/InstallPlugin": { role: "admin" },
  "oz0.orchestrator.v1.PluginService/ListPlugins": { role: "viewer" },
  "oz0.orchestrator.v1.AgentService/ListAgents": { role: "viewer" },
  "oz0.orchestrator.v1.AgentService/ListAgentVersions": { role: "viewer" },
  "oz0.orchestrator.v1.AgentService/GetAgent": { role: "viewer" },
  "oz0.orchestrator.v1.SecretService/SetSecret": { role: "admin" },
  // Names and times only, but which providers are keyed is the admin's to know.
  "oz0.orchestrator.v1.SecretService/ListSecrets": { role: "admin" },
  "oz0.orchestrator.v1.SecretService/DeleteSecret": { role: "admin" },
  // The console's log-in: a person mints a one-time code for themselves; the
  // code is the proof when it is redeemed, so redeeming is open.
  "oz0.orchestrator.v1.LoginService/CreateLoginCode": { role: "viewer" },
  "oz0.orchestrator.v1.LoginService/RedeemLoginCode": { open: true },
  "oz0.orchestrator.v1.LoginService/WhoAmI": { role: "viewer" },
  "oz0.orchestrator.v1.LoginService/Logout": { role: "viewer" },
  // Served on the orchestrator's node listener only.
  "oz0.orchestrator.v1.SandboxNodeService/Heartbeat": { node: true },

  // The sandbox: only orchestrators start and stop sessions; the heartbeat sidecar lists them.
  "oz0.sandbox.v1.SandboxService/RunSession": orchestratorOnly,
  "oz0.sandbox.v1.SandboxService/ListSessions": { services: ["orchestrator"], node: true },
  "oz0.sandbox.v1.SandboxService/CancelSession": orchestratorOnly,

  // The LLM proxy's control API: only orchestrators mint tokens and hold the keys' names.
  "oz0.llmproxy.v1.SecretService/SetSecret": orchestratorOnly,
  "oz0.llmproxy.v1.SecretService/DeleteSecret": orchestratorOnly,
  "oz0.llmproxy.v1.SecretService/ListSecrets": orchestratorOnly,
  "oz0.llmproxy.v1.LlmProxyService/MintSessionToken": orchestratorOnly,
  "oz0.llmproxy.v1.LlmProxyService/RevokeSessionToken": orchestratorOnly,
  "oz0.llmproxy.v1.LlmProxyService/GetUsage": orchestratorOnly,
  "oz0.llmproxy.v1.LlmProxyService/SummarizeUsage": orchestratorOnly,

  // Events: producers publish; people read the public stream.
  "oz0.events.v1.EventsService/Publish": { services: ["orchestrator", "llm-proxy"] },
  "oz0.events.v1.EventsService/PublishStream": { services: ["orchestrator", "llm-proxy"] },
  // The orchestrator asks for a job's transcript, and follows its events to send it again (WatchJobTranscript), on
  // behalf of its callers: clients then need only the orchestrator's address, as the events service is internal in a cluster.
  "oz0.events.v1.EventsService/Watch": { role: "viewer", services: ["orchestrator"] },
  "oz0.events.v1.EventsService/Transcript": { role: "viewer", services: ["orchestrator"] },
};

/** `oz0.orchestrator.v1.JobService/RunAgent` → `JobService/RunAgent`, for messages. */
export function shortMethodName(qualified: string): string {
  const [service = "", method = ""] = qualified.split("/");
  return `${service.slice(service.lastIndexOf(".") + 1)}/${method}`;
}
