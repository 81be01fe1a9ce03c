// The sessions' way to the trace collector. A harness's spans belong to its
// job's trace (its request carries the session span's traceparent), but the
// harness has no network under bubblewrap and must never see the collector's
// credentials (OTEL_EXPORTER_OTLP_HEADERS). So the sandbox listens on
// loopback for OTLP/HTTP trace exports, and sends each one on to the
// collector it exports to itself, with its own headers. Under bubblewrap the
// session reaches this listener through the same per-session socket forward
// as the LLM proxy. Only trace exports pass, bounded in size and in how many
// are in flight, so a session cannot use the relay as a way out or a weight.
//
// Each session posts to a path of its own,
// `/sessions/<session>/<job>/<trace id>/<mac>/v1/traces`: the mac, keyed by
// this relay's secret, says the sandbox gave that path to that session, so no
// session can post as another, and the relay passes on only the spans of
// that trace, stamped with that session and job (session-trace-export.ts).
// The secret is kept in the sandbox's root, so a sandbox that takes sessions
// over after a restart knows their paths. Each session has a share of the
// exports in flight: one session's slow exports cannot hold the slots every
// other session's need. A body that has not arrived whole in time is answered
// 408 and gives its slot back.
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { constants } from "node:fs";
import { open, rename, writeFile } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { timeRequestBody, type Logger, type OtlpTracesTarget } from "@oz0/serving";
import {
  partialSuccessAnswer,
  stampSessionExport,
  UnreadableExportError,
  type SessionTraceIdentity,
} from "./session-trace-export.js";

/** The path OTLP/HTTP trace exports are posted to. */
export const OTLP_TRACES_PATH = "/v1/traces";
/** Largest export passed on (the OTLP exporters batch 512 spans at most by default, far below). */
const MAX_BODY_BYTES = 4 * 1024 * 1024;
/** Exports in flight to the collector at once, across sessions; more get 429 and the exporter retries. */
const MAX_IN_FLIGHT = 16;
/** A session's share of them: four sessions' worst cannot fill them all. */
const MAX_IN_FLIGHT_PER_SESSION = 4;
/** A collector that does not answer in this time fails the export, not the relay. */
const UPSTREAM_TIMEOUT_MS = 10_000;
/** An export's body that has not arrived whole in this time is dropped (408): a trickling one would hold its slot. */
const BODY_TIMEOUT_MS = 10_000;
const CONTENT_TYPES = new Set(["application/x-protobuf", "application/json"]);

export interface TelemetryRelay {
  /** `http://127.0.0.1:PORT`: where sessions post. */
  readonly url: string;
  /** The path a session posts its exports to, its own. */
  exportPath(session: SessionTraceIdentity): string;
  close(): Promise<void>;
}

export async function startTelemetryRelay(options: {
  target: OtlpTracesTarget;
  logger: Logger;
  /** The key of the paths' macs, kept across restarts ({@link relaySecret}). */
  secret: Buffer;
  /** Default BODY_TIMEOUT_MS. */
  bodyTimeoutMs?: number;
}): Promise<TelemetryRelay> {
  const { target, logger, secret } = options;
  const bodyTimeoutMs = options.bodyTimeoutMs ?? BODY_TIMEOUT_MS;
  const segments = (session: SessionTraceIdentity): string =>
    [session.sessionId, session.jobId, session.traceId].map((part) => encodeURIComponent(part)).join("/");
  const mac = (session: SessionTraceIdentity): string =>
    createHmac("sha256", secret).update(segments(session)).digest("base64url").slice(0, 22);
  /** The session a request's path names: undefined for a path that is not an export's, null for a mac this relay did not make. */
  const sessionOf = (url: string | undefined): SessionTraceIdentity | null | undefined => {
    const match = /^\/sessions\/([^/]*)\/([^/]*)\/([0-9a-f]{32}|)\/([^/]+)\/v1\/traces$/.exec(url ?? "");
    if (match === null) return url === OTLP_TRACES_PATH ? null : undefined;
    let session: SessionTraceIdentity;
    try {
      session = {
        sessionId: decodeURIComponent(match[1]!),
        jobId: decodeURIComponent(match[2]!),
        traceId: match[3]!,
      };
    } catch {
      return null;
    }
    const expected = Buffer.from(mac(session));
    const given = Buffer.from(match[4]!);
    return given.length === expected.length && timingSafeEqual(given, expected) ? session : null;
  };
  let inFlight = 0;
  const inFlightOf = new Map<string, number>();
  let warned = false;
  const server = http.createServer((request, response) => {
    const answer = (status: number, message: string): void => {
      // The body is read and dropped (not cut off): a client still sending it gets the answer, not a broken pipe.
      response.writeHead(status, { "content-type": "text/plain; charset=utf-8" }).end(`${message}\n`);
      request.resume();
    };
    const session = sessionOf(request.url);
    if (session === undefined)
      return answer(404, "only OTLP trace exports are relayed: POST to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    // Spans that cannot be told to be the session's own would be anybody's.
    if (session === null) return answer(403, "post to the OTEL_EXPORTER_OTLP_TRACES_ENDPOINT this session was given");
    if (request.method !== "POST") return answer(405, "POST to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    const share = session.sessionId;
    const contentType = (request.headers["content-type"] ?? "").split(";")[0]!.trim();
    if (!CONTENT_TYPES.has(contentType))
      return answer(415, "send application/x-protobuf or application/json (OTLP/HTTP)");
    if (Number(request.headers["content-length"] ?? 0) > MAX_BODY_BYTES)
      return answer(413, `an export is at most ${MAX_BODY_BYTES} bytes`);
    const sessionInFlight = inFlightOf.get(share) ?? 0;
    if (sessionInFlight >= MAX_IN_FLIGHT_PER_SESSION)
      return answer(429, `this session has ${sessionInFlight} exports in flight, its most; retry later`);
    if (inFlight >= MAX_IN_FLIGHT) return answer(429, "too many exports in flight; retry later");
    inFlight++;
    inFlightOf.set(share, sessionInFlight + 1);
    timeRequestBody(request, response, bodyTimeoutMs);
    relay({ request, contentType, target, session })
      .then(
        ({ status, body }) => response.writeHead(status, { "content-type": contentType }).end(body),
        (error: unknown) => {
          // Answered already: the body did not arrive in time (408), or the client went away. (Not
          // `request.destroyed`: a request whose body was read whole is destroyed, and its client waits.)
          if (response.headersSent || response.destroyed) return;
          if (error instanceof BodyTooLargeError) return answer(413, error.message);
          if (error instanceof UnreadableExportError) return answer(400, error.message);
          // Once per relay: a collector that is down would otherwise log a line per export.
          if (!warned)
            logger.warn(
              { err: error, collector: target.url },
              "could not pass a session's trace export on to the collector",
            );
          warned = true;
          answer(502, "the collector did not take the export");
        },
      )
      .finally(() => {
        inFlight--;
        const left = inFlightOf.get(share)! - 1;
        if (left === 0) inFlightOf.delete(share);
        else inFlightOf.set(share, left);
      });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    exportPath: (session) => `/sessions/${segments(session)}/${mac(session)}${OTLP_TRACES_PATH}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The file in the sandbox's root that keeps the relay's secret. */
const SECRET_FILE = "telemetry-relay.key";
const SECRET_BYTES = 32;

/**
 * The relay's secret, made once per sandbox root and kept there (0600; the
 * root is the sandbox's, never bound into a session): a sandbox that takes
 * sessions over after a restart knows the paths it gave them. A file that is
 * not the sandbox's own 0600 secret is replaced.
 */
export async function relaySecret(root: string): Promise<Buffer> {
  const file = path.join(root, SECRET_FILE);
  try {
    const handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW);
    try {
      const stat = await handle.stat();
      if (stat.isFile() && stat.size === SECRET_BYTES && (stat.mode & 0o077) === 0 && stat.uid === process.getuid?.())
        return await handle.readFile();
    } finally {
      await handle.close();
    }
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== "ENOENT" && code !== "ELOOP") throw error;
  }
  const secret = randomBytes(SECRET_BYTES);
  const written = `${file}.${process.pid}.new`;
  await writeFile(written, secret, { mode: 0o600, flag: "w" });
  await rename(written, file);
  return secret;
}

class BodyTooLargeError extends Error {}

async function relay(options: {
  request: http.IncomingMessage;
  contentType: string;
  target: OtlpTracesTarget;
  session: SessionTraceIdentity;
}): Promise<{ status: number; body: Uint8Array }> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of options.request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new BodyTooLargeError(`an export is at most ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  // A body cut short (its client gone, or its time up) is not an export.
  if (!options.request.complete) throw new Error("the export's body did not arrive whole");
  const json = options.contentType === "application/json";
  const stamped = stampSessionExport({ body: Buffer.concat(chunks), json, session: options.session });
  const dropped =
    stamped.rejectedSpans > 0
      ? partialSuccessAnswer({ rejectedSpans: stamped.rejectedSpans, traceId: options.session.traceId, json })
      : undefined;
  if (stamped.body === undefined) return { status: 200, body: dropped ?? new Uint8Array() };
  const upstream = await fetch(options.target.url, {
    method: "POST",
    // The collector's credentials are added here; the session's own headers are not passed on.
    headers: { ...options.target.headers, "content-type": options.contentType },
    body: stamped.body,
    signal: AbortSignal.timeout(UPSTREAM_TIMEOUT_MS),
  });
  const answer = Buffer.from(await upstream.arrayBuffer());
  // The spans the relay dropped are told as a partial success (the collector's own is then not passed on).
  return { status: upstream.status, body: upstream.ok && dropped !== undefined ? dropped : answer };
}
