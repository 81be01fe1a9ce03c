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
// Each session posts to a path of its own, `/sessions/<id>/<mac>/v1/traces`
// (the mac, keyed by this relay's secret, so no session can post as
// another), and has a share of the exports in flight: one session's slow
// exports cannot hold the slots every other session's need. A body that has
// not arrived whole in time is answered 408 and gives its slot back.
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { timeRequestBody, type Logger, type OtlpTracesTarget } from "@oz0/serving";

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
/** The share of exports posted to the plain path or with a mac this relay did not make (sessions a previous run started). */
const UNNAMED = "";
const CONTENT_TYPES = new Set(["application/x-protobuf", "application/json"]);

export interface TelemetryRelay {
  /** `http://127.0.0.1:PORT`: where sessions post. */
  readonly url: string;
  /** The path a session posts its exports to, its own. */
  exportPath(sessionId: string): string;
  close(): Promise<void>;
}

export async function startTelemetryRelay(options: {
  target: OtlpTracesTarget;
  logger: Logger;
  /** Default BODY_TIMEOUT_MS. */
  bodyTimeoutMs?: number;
}): Promise<TelemetryRelay> {
  const { target, logger } = options;
  const bodyTimeoutMs = options.bodyTimeoutMs ?? BODY_TIMEOUT_MS;
  const secret = randomBytes(32);
  const mac = (sessionId: string): string =>
    createHmac("sha256", secret).update(sessionId).digest("base64url").slice(0, 22);
  /** Whose share a request's path counts in; undefined for a path that is not an export's. */
  const shareOf = (url: string | undefined): string | undefined => {
    if (url === OTLP_TRACES_PATH) return UNNAMED;
    const match = /^\/sessions\/([^/]+)\/([^/]+)\/v1\/traces$/.exec(url ?? "");
    if (match === null) return undefined;
    const sessionId = decodeURIComponent(match[1]!);
    const expected = Buffer.from(mac(sessionId));
    const given = Buffer.from(match[2]!);
    return given.length === expected.length && timingSafeEqual(given, expected) ? sessionId : UNNAMED;
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
    const share = shareOf(request.url);
    if (share === undefined)
      return answer(404, "only OTLP trace exports are relayed: POST to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    if (request.method !== "POST") return answer(405, "POST to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
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
    relay({ request, contentType, target })
      .then(
        ({ status, body }) => response.writeHead(status, { "content-type": contentType }).end(body),
        (error: unknown) => {
          // Answered already: the body did not arrive in time (408), or the client went away.
          if (response.headersSent || request.destroyed) return;
          if (error instanceof BodyTooLargeError) return answer(413, error.message);
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
    exportPath: (sessionId) => `/sessions/${encodeURIComponent(sessionId)}/${mac(sessionId)}${OTLP_TRACES_PATH}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

class BodyTooLargeError extends Error {}

async function relay(options: {
  request: http.IncomingMessage;
  contentType: string;
  target: OtlpTracesTarget;
}): Promise<{ status: number; body: Buffer }> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of options.request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new BodyTooLargeError(`an export is at most ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  // A body cut short (its client gone, or its time up) is not an export.
  if (!options.request.complete) throw new Error("the export's body did not arrive whole");
  const upstream = await fetch(options.target.url, {
    method: "POST",
    // The collector's credentials are added here; the session's own headers are not passed on.
    headers: { ...options.target.headers, "content-type": options.contentType },
    body: Buffer.concat(chunks),
    signal: AbortSignal.timeout(UPSTREAM_TIMEOUT_MS),
  });
  return { status: upstream.status, body: Buffer.from(await upstream.arrayBuffer()) };
}
