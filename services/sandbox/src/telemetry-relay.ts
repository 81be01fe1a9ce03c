// The sessions' way to the trace collector. A harness's spans belong to its
// job's trace (its request carries the session span's traceparent), but the
// harness has no network under bubblewrap and must never see the collector's
// credentials (OTEL_EXPORTER_OTLP_HEADERS). So the sandbox listens on
// loopback for OTLP/HTTP trace exports, and sends each one on to the
// collector it exports to itself, with its own headers. Under bubblewrap the
// session reaches this listener through the same per-session socket forward
// as the LLM proxy. Only trace exports pass, bounded in size and in how many
// are in flight, so a session cannot use the relay as a way out or a weight.
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger, OtlpTracesTarget } from "@oz0/serving";

/** The path OTLP/HTTP trace exports are posted to. */
export const OTLP_TRACES_PATH = "/v1/traces";
/** Largest export passed on (the OTLP exporters batch 512 spans at most by default, far below). */
const MAX_BODY_BYTES = 4 * 1024 * 1024;
/** Exports in flight to the collector at once, across sessions; more get 429 and the exporter retries. */
const MAX_IN_FLIGHT = 16;
/** A collector that does not answer in this time fails the export, not the relay. */
const UPSTREAM_TIMEOUT_MS = 10_000;
const CONTENT_TYPES = new Set(["application/x-protobuf", "application/json"]);

export interface TelemetryRelay {
  /** `http://127.0.0.1:PORT`: where sessions post `/v1/traces`. */
  readonly url: string;
  close(): Promise<void>;
}

export async function startTelemetryRelay(options: {
  target: OtlpTracesTarget;
  logger: Logger;
}): Promise<TelemetryRelay> {
  const { target, logger } = options;
  let inFlight = 0;
  let warned = false;
  const server = http.createServer((request, response) => {
    const answer = (status: number, message: string): void => {
      // The body is read and dropped (not cut off): a client still sending it gets the answer, not a broken pipe.
      response.writeHead(status, { "content-type": "text/plain; charset=utf-8" }).end(`${message}\n`);
      request.resume();
    };
    if (request.url !== OTLP_TRACES_PATH)
      return answer(404, `only OTLP trace exports are relayed: POST ${OTLP_TRACES_PATH}`);
    if (request.method !== "POST") return answer(405, `POST ${OTLP_TRACES_PATH}`);
    const contentType = (request.headers["content-type"] ?? "").split(";")[0]!.trim();
    if (!CONTENT_TYPES.has(contentType))
      return answer(415, "send application/x-protobuf or application/json (OTLP/HTTP)");
    if (Number(request.headers["content-length"] ?? 0) > MAX_BODY_BYTES)
      return answer(413, `an export is at most ${MAX_BODY_BYTES} bytes`);
    if (inFlight >= MAX_IN_FLIGHT) return answer(429, "too many exports in flight; retry later");
    inFlight++;
    relay({ request, contentType, target })
      .then(
        ({ status, body }) => response.writeHead(status, { "content-type": contentType }).end(body),
        (error: unknown) => {
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
      .finally(() => inFlight--);
  });
  server.requestTimeout = UPSTREAM_TIMEOUT_MS;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
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
  const upstream = await fetch(options.target.url, {
    method: "POST",
    // The collector's credentials are added here; the session's own headers are not passed on.
    headers: { ...options.target.headers, "content-type": options.contentType },
    body: Buffer.concat(chunks),
    signal: AbortSignal.timeout(UPSTREAM_TIMEOUT_MS),
  });
  return { status: upstream.status, body: Buffer.from(await upstream.arrayBuffer()) };
}
