export { isWildcardHost, PEER_ADDRESS, serve, registration } from "./serve.js";
export type { ServeOptions, RunningServer, ServiceRegistration } from "./serve.js";
export { HealthRegistry, LIVENESS, READINESS, ServingStatus } from "./health.js";
export { createLogger } from "./logger.js";
export { closeInheritedDescriptors } from "./inherited-descriptors.js";
export { ephemeralRangeStart, portBelowEphemeralRange } from "./ephemeral-ports.js";
export type { ClosedDescriptor } from "./inherited-descriptors.js";
export { SummarisedLog } from "./summarised-log.js";
export type { Counted, SummarisedLogOptions } from "./summarised-log.js";
export type { Logger, LoggerOptions } from "./logger.js";
export { onShutdownSignal, SHUTDOWN_LINGER_MS } from "./shutdown.js";
export {
  configFromEnvOrExit,
  EnvConfigError,
  envInteger,
  envNumber,
  envOneOf,
  envPort,
  envString,
  envUrl,
  envList,
  envUrlList,
} from "./env-config.js";
export { unexpectedErrorInterceptor } from "./error-interceptor.js";
export {
  DEFAULT_MAX_MESSAGE_BYTES,
  MAX_MESSAGE_BYTES_VARIABLE,
  envMaxMessageBytes,
  messageTooLarge,
} from "./message-size-limit.js";
export type { OversizedMessage } from "./message-size-limit.js";
export { timeRequestBody, writeHead } from "./protocol-sniffing-server.js";
export type { RequestHandler } from "./protocol-sniffing-server.js";
export {
  startTelemetry,
  telemetryConfigured,
  oz0Tracer,
  traceContextClientInterceptor,
  traceServer,
  traceServerInterceptor,
} from "./telemetry.js";
export type { Telemetry, TelemetryOptions, UntracedRpc, UntracedRpcPolicy } from "./telemetry.js";
export { otlpTracesTarget } from "./otlp-traces-target.js";
export type { OtlpTracesTarget } from "./otlp-traces-target.js";
export {
  CONTENT_ATTRIBUTES,
  GenAi,
  contextFromTraceparent,
  genAiClientMetrics,
  recording,
  traceContextOf,
  workMetrics,
} from "./genai-spans.js";
export type { GenAiClientMetrics } from "./genai-spans.js";
export { startInMemoryTelemetry } from "./in-memory-telemetry.js";
export type { InMemoryTelemetry } from "./in-memory-telemetry.js";
export { ACCESS_TABLE } from "./auth/access-table.js";
export type { Access } from "./auth/access-table.js";
export { Authenticator, credentialDigest } from "./auth/authenticator.js";
export type { AuthSettings, Authentication, SessionCredentials, SessionOrigin } from "./auth/authenticator.js";
export { audienceTokenVariable, authSettingsFromEnv, peerVariable } from "./auth/auth-settings.js";
export { bearerInterceptor, callerToken } from "./auth/bearer-credential.js";
export { NODE_IDENTITY_AUDIENCE, NODE_IDENTITY_HEADER } from "./auth/node-identity-token.js";
export { parsePeopleConfig, grantedRoles } from "./auth/people-config.js";
export type { PeopleConfig, OidcConfig, RoleGrant, StaticToken } from "./auth/people-config.js";
export { principalOf } from "./auth/principal.js";
export type { Principal, Role, ServiceName } from "./auth/principal.js";
export {
  ACCEPTED_PEERS,
  OWN_AUDIENCE_CREDENTIALS,
  credentialName,
  generateStackCredentials,
  newCredential,
  serviceIdentityEnv,
  stackCredentialNames,
  stackTokenFor,
} from "./auth/stack-credentials.js";
export type { AudienceCredentialName, StackCredentials } from "./auth/stack-credentials.js";
export { createScrubber, scanReadsStrings, scrubSecret, REDACTED } from "./secret-scrubber.js";
export type { FramedTextScrubber, HeldTextScrubber, SecretScrubber, TextSpan } from "./secret-scrubber.js";
