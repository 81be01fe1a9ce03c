// The one way every service serves its API.
import type { DescService } from "@bufbuild/protobuf";
import {
  createContextKey,
  createContextValues,
  type ConnectRouter,
  type Interceptor,
  type ServiceImpl,
} from "@connectrpc/connect";
import { compressionBrotli, compressionGzip, connectNodeAdapter } from "@connectrpc/connect-node";
import { Health } from "@oz0/proto/grpc/health/v1/health_pb";
import { ServerReflection as ReflectionV1 } from "@oz0/proto/grpc/reflection/v1/reflection_pb";
import { ServerReflection as ReflectionV1alpha } from "@oz0/proto/grpc/reflection/v1alpha/reflection_pb";
import type { AddressInfo, Server as TcpServer } from "node:net";
import { ACCESS_TABLE } from "./auth/access-table.js";
import { accessGate, streamsEndWithTheirCredential } from "./auth/auth-interceptor.js";
import type { Authenticator } from "./auth/authenticator.js";
import { RefusalLog } from "./auth/refusal-log.js";
import { hiddenUnexpected, unexpectedErrorInterceptor } from "./error-interceptor.js";
import { traceServer, type UntracedRpcPolicy } from "./telemetry.js";
import { HealthRegistry } from "./health.js";
import { createLogger, type Logger } from "./logger.js";
import { DEFAULT_MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES_VARIABLE, type OversizedMessage } from "./message-size-limit.js";
import { createSniffingServer, writeHead, type RequestHandler } from "./protocol-sniffing-server.js";
import { ReflectionIndex, reflectionServiceV1, reflectionServiceV1alpha } from "./reflection.js";
import { decodingBinaryBodies, handingOnDecodedMessages } from "./undecodable-requests.js";

/** What connect decodes request bodies with (its own defaults, named so the body check uses the same). */
const ACCEPT_COMPRESSION = [compressionGzip, compressionBrotli];

/**
 * The address the request's connection comes from, as the server's socket
 * sees it (an IPv4 peer of a dual-stack listener without its `::ffff:`
 * prefix); undefined once the socket closed. A handler reads it with
 * `context.values.get(PEER_ADDRESS)`: the node API binds a node's advertised
 * URL to where its heartbeats come from.
 */
export const PEER_ADDRESS = createContextKey<string | undefined>(undefined, { description: "peer address" });

/** One RPC service and its implementation. */
export interface ServiceRegistration<S extends DescService = DescService> {
  service: S;
  impl: Partial<ServiceImpl<S>>;
}

/** Pair a service with its implementation, keeping the implementation type-checked. */
export function registration<S extends DescService>(service: S, impl: Partial<ServiceImpl<S>>): ServiceRegistration {
  return { service, impl } as unknown as ServiceRegistration;
}

export interface ServeOptions {
  /** The service's name in logs and health, for example `sandbox`. */
  name: string;
  /** Address to listen on. Default 127.0.0.1. */
  host?: string;
  /** Port to listen on; 0 picks a free one. */
  port: number;
  services: ServiceRegistration[];
  /**
   * Who may call: every RPC but health needs a principal this authenticator
   * knows, and the access table's role or service for its method. There is no
   * open mode; a service that accepts nobody still serves health.
   */
  auth: Authenticator;
  /** Where callers of this server find their credential, for Unauthenticated messages. */
  credentialHint?: string;
  /** Plain HTTP handler for requests that are not RPCs (the LLM proxy's HTTP API). */
  fallback?: RequestHandler;
  interceptors?: Interceptor[];
  /**
   * Where an RPC that arrives with no trace context is traced (default: a
   * trace of its own; health checks: none). The events service puts a Publish in the traces of the
   * events it carries, and traces none for events that belong to no trace.
   */
  untracedRpcs?: UntracedRpcPolicy;
  logger?: Logger;
  /** Mark the server ready as soon as it listens. Default true. */
  readyOnListen?: boolean;
  /**
   * A client that has not sent its request's headers by then is disconnected
   * (an HTTP/2 connection that has opened no stream by then is closed).
   * Default 10 s.
   */
  headersTimeoutMs?: number;
  /** An HTTP/2 connection with no request open for this long is closed. Default an hour (longer than clients keep theirs). */
  idleSessionTimeoutMs?: number;
  /**
   * A request whose body has not arrived whole by then is answered 408, on
   * either protocol; client- and bidi-streaming RPCs are exempt on HTTP/2.
   * Default 120 s.
   */
  requestTimeoutMs?: number;
  /**
   * The largest request message an RPC may carry, decompressed, in bytes
   * (OZ0_MAX_MESSAGE_BYTES, message-size-limit.ts); a larger one is refused
   * ResourceExhausted as soon as its size is known. Default 4 MiB.
   */
  maxMessageBytes?: number;
}

export interface RunningServer {
  /** `http://host:port`. */
  readonly url: string;
  readonly port: number;
  readonly health: HealthRegistry;
  readonly logger: Logger;
  /**
   * Stop taking requests (readiness goes NOT_SERVING first), give streams
   * `graceMs` to finish, then close every connection.
   */
  close(options?: { graceMs?: number }): Promise<void>;
}

/** `::ffff:10.0.0.7` (an IPv4 peer of a listener on `::`) as `10.0.0.7`, the spelling a URL gives it. */
function unmappedAddress(address: string | undefined): string | undefined {
  return address?.startsWith("::ffff:") && address.includes(".") ? address.slice("::ffff:".length) : address;
}

/**
 * Health checks come every few seconds from probes and belong to no trace:
 * without a caller's trace context they leave no span (each was a lone
 * one-span trace), on every service. Other RPCs go where the server's policy
 * says, a trace of their own by default.
 */
function untracedOrProbe(policy: UntracedRpcPolicy | undefined): UntracedRpcPolicy {
  return (request) => (request.service.typeName === Health.typeName ? "none" : (policy?.(request) ?? "root"));
}

export async function serve(options: ServeOptions): Promise<RunningServer> {
  const logger = options.logger ?? createLogger({ name: options.name });
  assertEveryMethodHasAccess(options.services);
  const health = new HealthRegistry(options.services.map((s) => s.service.typeName));
  const reflection = new ReflectionIndex([...options.services.map((s) => s.service), Health, ReflectionV1]);
  const hint = options.credentialHint ? { credentialHint: options.credentialHint } : {};
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const refusals = new RefusalLog({ logger });
  const gateOptions = {
    ...hint,
    unexpected: (error: unknown, procedure: string) => hiddenUnexpected(error, logger, procedure),
    refusals,
  };
  const gate = accessGate(options.auth, gateOptions);
  const routes = (router: ConnectRouter): void => {
    for (const { service, impl } of options.services) router.service(service, impl);
    router.service(Health, health.service());
    router.service(ReflectionV1, reflectionServiceV1(reflection));
    router.service(ReflectionV1alpha, reflectionServiceV1alpha(reflection));
    // connect-node takes the router's handlers once this returns.
    const bodyCheck = {
      compressions: ACCEPT_COMPRESSION,
      maxMessageBytes,
      onOversized: (refusal: OversizedMessage) =>
        logger.warn(
          { code: "MESSAGE_TOO_LARGE", ...refusal, setting: MAX_MESSAGE_BYTES_VARIABLE },
          "a request message over the size limit was refused",
        ),
    };
    router.handlers.splice(
      0,
      router.handlers.length,
      ...router.handlers.map((h) => decodingBinaryBodies(h, bodyCheck)),
    );
  };
  const handler = connectNodeAdapter({
    routes,
    acceptCompression: ACCEPT_COMPRESSION,
    readMaxBytes: maxMessageBytes,
    // Who may call is decided before a byte of the body is read, on every protocol.
    requestGate: gate,
    interceptors: [
      // First: it puts back the request messages the body check decoded (connect parsed empty ones).
      handingOnDecodedMessages(),
      // The gate decides once a call opens; a stream is asked again before each message it sends.
      streamsEndWithTheirCredential(options.auth, gateOptions),
      traceServer({ untraced: untracedOrProbe(options.untracedRpcs) }),
      unexpectedErrorInterceptor(logger),
      ...(options.interceptors ?? []),
    ],
    fallback: options.fallback as Parameters<typeof connectNodeAdapter>[0]["fallback"],
    contextValues: (req) => createContextValues().set(PEER_ADDRESS, unmappedAddress(req.socket.remoteAddress)),
  });
  const openEnded = openEndedPaths([...options.services.map((s) => s.service), ReflectionV1, ReflectionV1alpha]);
  const server = createSniffingServer(guarded(handler as RequestHandler, logger), {
    ...(options.headersTimeoutMs ? { headersTimeoutMs: options.headersTimeoutMs } : {}),
    ...(options.requestTimeoutMs ? { requestTimeoutMs: options.requestTimeoutMs } : {}),
    ...(options.idleSessionTimeoutMs ? { idleSessionTimeoutMs: options.idleSessionTimeoutMs } : {}),
    openEndedRequest: (path) => openEnded.has(path),
  });
  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    server.tcp.once("error", reject);
    server.tcp.listen(options.port, host, () => {
      server.tcp.off("error", reject);
      resolve();
    });
  });
  const port = (server.tcp.address() as AddressInfo).port;
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${port}`;
  if (options.readyOnListen ?? true) health.setReady(true);
  logger.info({ url }, `${options.name} listening`);

  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    health,
    logger,
    close({ graceMs = 5_000 } = {}) {
      closing ??= (async () => {
        health.setReady(false);
        await server.stopAccepting();
        const deadline = Date.now() + graceMs;
        while (Date.now() < deadline && (await openConnections(server.tcp)) > 0) {
          await new Promise((r) => setTimeout(r, 50));
        }
        server.destroyConnections();
        refusals.close();
        logger.info(`${options.name} stopped`);
      })();
      return closing;
    },
  };
}

/** The paths of the methods whose request stream stays open as long as the call (client- and bidi-streaming). */
function openEndedPaths(services: DescService[]): Set<string> {
  return new Set(
    services.flatMap((service) =>
      service.methods
        .filter((m) => m.methodKind === "client_streaming" || m.methodKind === "bidi_streaming")
        .map((m) => `/${service.typeName}/${m.name}`),
    ),
  );
}

/** Nothing is open by omission: a method with no line in the access table stops the service at start. */
function assertEveryMethodHasAccess(services: ServiceRegistration[]): void {
  const missing = services
    .flatMap(({ service }) => service.methods.map((m) => `${service.typeName}/${m.name}`))
    .filter((m) => !(m in ACCESS_TABLE));
  if (missing.length > 0)
    throw new Error(
      `no access rule for ${missing.join(", ")}: add each to ACCESS_TABLE in lib/serving/src/auth/access-table.ts`,
    );
}

function openConnections(tcp: TcpServer): Promise<number> {
  return new Promise((resolve) => tcp.getConnections((err, count) => resolve(err ? 0 : count)));
}

/**
 * One malformed request must never take the server down: connect-node parses
 * the authority with `new URL` synchronously, and some clients send an IPv6
 * authority without brackets (`::1:7700`). Bracket it, and answer anything
 * else that throws with 400 instead of an uncaught exception.
 */
function guarded(handler: RequestHandler, logger: Logger): RequestHandler {
  return (req, res) => {
    for (const name of [":authority", "host"]) {
      const value = req.headers[name];
      if (typeof value === "string") req.headers[name] = bracketIpv6Authority(value);
    }
    try {
      handler(req, res);
    } catch (error) {
      logger.warn({ err: error, url: req.url }, "malformed request refused");
      if (!res.headersSent) {
        writeHead(res, 400, { "content-type": "text/plain" });
        res.end("malformed request: check the :authority / Host header and the path\n");
      }
    }
  };
}

/** `::1:7700` → `[::1]:7700`; anything already well-formed is returned as is. */
/**
 * Whether `host` (as OZ0_HOST gives it) listens on every address: then the
 * server's own URL (`http://0.0.0.0:7702`) is no address a peer can call, and
 * whoever tells peers where it is must name another.
 */
export function isWildcardHost(host: string): boolean {
  return WILDCARD_HOSTS.has(host);
}

const WILDCARD_HOSTS = new Set(["", "0.0.0.0", "::", "[::]"]);

export function bracketIpv6Authority(authority: string): string {
  if (authority.startsWith("[") || authority.split(":").length <= 2) return authority;
  const lastColon = authority.lastIndexOf(":");
  const port = authority.slice(lastColon + 1);
  return /^\d+$/.test(port) ? `[${authority.slice(0, lastColon)}]:${port}` : `[${authority}]`;
}
