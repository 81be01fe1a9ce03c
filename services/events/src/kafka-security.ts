// How the relay's Kafka client proves who it is (SASL) and protects the
// connection (TLS). Read from the environment by events-config.ts; handed to
// the producer thread, which gives it to kafkajs. The password is only ever
// in `sasl.password`: what is logged or reported comes from
// `describeKafkaSecurity`, which leaves it out.
import type { KafkaConfig } from "kafkajs";

/** The SASL mechanisms the relay offers, as Kafka's clients name them (kafkajs takes them in lower case). */
export const SASL_MECHANISMS = ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"] as const;
export type SaslMechanism = (typeof SASL_MECHANISMS)[number];

export interface KafkaSecurity {
  /** Authenticate as this Kafka user. */
  sasl?: { mechanism: SaslMechanism; username: string; password: string };
  /** Connect with TLS; `ca` (PEM) is what the brokers' certificates must chain to, instead of Node's roots. */
  tls?: { ca?: string };
}

/** What may be logged of the settings: the mechanism and the user, never the password. */
export function describeKafkaSecurity(security: KafkaSecurity | undefined): {
  sasl: { mechanism: SaslMechanism; username: string } | "off";
  tls: "off" | "system CAs" | "CA file";
} {
  const sasl = security?.sasl;
  return {
    sasl: sasl ? { mechanism: sasl.mechanism, username: sasl.username } : "off",
    tls: !security?.tls ? "off" : security.tls.ca !== undefined ? "CA file" : "system CAs",
  };
}

/** kafkajs's `ssl` and `sasl` for the settings. */
export function kafkajsSecurity(security: KafkaSecurity | undefined): Pick<KafkaConfig, "ssl" | "sasl"> {
  const options: Pick<KafkaConfig, "ssl" | "sasl"> = {};
  if (security?.tls) options.ssl = security.tls.ca !== undefined ? { ca: [security.tls.ca] } : true;
  const sasl = security?.sasl;
  if (sasl) {
    const { username, password } = sasl;
    // Spelled out per mechanism: kafkajs's types tie each mechanism to its own options.
    if (sasl.mechanism === "SCRAM-SHA-512") options.sasl = { mechanism: "scram-sha-512", username, password };
    else if (sasl.mechanism === "SCRAM-SHA-256") options.sasl = { mechanism: "scram-sha-256", username, password };
    else options.sasl = { mechanism: "plain", username, password };
  }
  return options;
}

/** Why a Kafka request failed, as far as the operator can act on it. */
export type KafkaFailure = "authentication" | "authorization" | "tls" | "unavailable";

/** The names Node gives a TLS handshake that did not verify the broker. */
const TLS_VERIFY_CODES = new Set([
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "CERT_HAS_EXPIRED",
  "CERT_NOT_YET_VALID",
  "ERR_TLS_CERT_ALTNAME_INVALID",
  "EPROTO",
  "ERR_SSL_WRONG_VERSION_NUMBER",
]);

interface ErrorLike {
  name?: unknown;
  type?: unknown;
  code?: unknown;
  message?: unknown;
  cause?: unknown;
  originalError?: unknown;
  errors?: unknown;
}

/**
 * Classifies a kafkajs error: wrong credentials (KafkaJSSASLAuthenticationError),
 * a missing ACL (a `*_AUTHORIZATION_FAILED` protocol error, also inside
 * kafkajs's retry and aggregate errors), a TLS handshake that failed, or
 * anything else (the broker is down or unreachable).
 */
export function kafkaFailure(error: unknown): KafkaFailure {
  const seen = new Set<unknown>();
  const found = new Set<KafkaFailure>();
  const visit = (value: unknown): void => {
    if (typeof value !== "object" || value === null || seen.has(value)) return;
    seen.add(value);
    const e = value as ErrorLike;
    if (e.name === "KafkaJSSASLAuthenticationError") found.add("authentication");
    if (typeof e.type === "string" && e.type.endsWith("_AUTHORIZATION_FAILED")) found.add("authorization");
    if (typeof e.code === "string" && TLS_VERIFY_CODES.has(e.code)) found.add("tls");
    if (typeof e.message === "string" && /certificate|SSL routines|TLS/i.test(e.message)) found.add("tls");
    visit(e.cause);
    visit(e.originalError);
    if (Array.isArray(e.errors)) for (const inner of e.errors) visit(inner);
  };
  visit(error);
  for (const failure of ["authentication", "authorization", "tls"] as const) if (found.has(failure)) return failure;
  return "unavailable";
}
