// A session's spans join its job's trace through the sandbox's relay: the
// harness posts OTLP trace exports to the endpoint it was given (loopback,
// or its forward under bubblewrap), and the sandbox passes them on to the
// collector it exports to itself, with the collector's credential, which the
// harness never sees. Nothing but trace exports passes, and not without bound:
// a session's share of the exports in flight, a body's deadline. And only the
// spans of the session's own trace pass, named as the session's: a harness
// cannot write spans as the orchestrator, as another session, or into another
// job's trace.
import assert from "node:assert/strict";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { create, fromBinary, fromJson, toBinary, toJson, type JsonValue } from "@bufbuild/protobuf";
import {
  ExportTraceServiceRequestSchema,
  ExportTraceServiceResponseSchema,
  type ExportTraceServiceRequest,
} from "@oz0/proto/opentelemetry/proto/collector/trace/v1/trace_service_pb";
import { isText, runToEnd, scenarioStart, SessionStream, startTestSandbox } from "./sandbox-test-kit.js";
import { startTelemetryRelay } from "../src/telemetry-relay.js";

const COLLECTOR_SECRET = "collector-credential-4f1d";
/** The trace the sessions' requests continue. */
const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
/** Another job's trace, whose id a harness learnt. */
const OTHER_TRACE = "0af7651916cd43dd8448eb211c80319c";
const traceRequest = (sessionId: string) => ({
  sessionId,
  trace: { traceparent: `00-${TRACE}-00f067aa0ba902b7-01` },
});

/** A harness's export: a span of its own trace and one of another job's, claiming to be the orchestrator's. */
function forgedExport(): ExportTraceServiceRequest {
  const attribute = (key: string, value: string) => ({
    key,
    value: { value: { case: "stringValue" as const, value } },
  });
  const span = (traceId: string, name: string) => ({
    traceId: Buffer.from(traceId, "hex"),
    spanId: Buffer.from("b7ad6b7169203331", "hex"),
    name,
    kind: 1,
    startTimeUnixNano: 1n,
    endTimeUnixNano: 2n,
  });
  return create(ExportTraceServiceRequestSchema, {
    resourceSpans: [
      {
        resource: {
          attributes: [
            attribute("service.name", "oz0-orchestrator"),
            attribute("oz0.session.id", "ses_someone_else"),
            attribute("oz0.job.id", "job-someone-else"),
            attribute("host.name", "inside"),
          ],
        },
        scopeSpans: [{ spans: [span(TRACE, "tool Bash"), span(OTHER_TRACE, "permission")] }],
      },
    ],
  });
}

/** OTLP/JSON: protobuf's JSON mapping with ids in hex and enums as numbers. */
function otlpJson(request: ExportTraceServiceRequest): string {
  const json = toJson(ExportTraceServiceRequestSchema, request, { enumAsInteger: true }) as {
    resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<Record<string, string>> }> }>;
  };
  for (const span of json.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)))
    for (const key of ["traceId", "spanId"]) span[key] = Buffer.from(span[key]!, "base64").toString("hex");
  return JSON.stringify(json);
}

function readOtlpJson(body: string): ExportTraceServiceRequest {
  const json = JSON.parse(body) as {
    resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<Record<string, string>> }> }>;
  };
  for (const span of json.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)))
    for (const key of ["traceId", "spanId"]) {
      assert.match(span[key]!, /^[0-9a-f]+$/, "ids stay hex in OTLP/JSON");
      span[key] = Buffer.from(span[key]!, "hex").toString("base64");
    }
  return fromJson(ExportTraceServiceRequestSchema, json as unknown as JsonValue);
}

/** What the collector got: each span's trace and name, and its resource's attributes. */
function passedOn(request: ExportTraceServiceRequest) {
  return request.resourceSpans.map((r) => ({
    attributes: Object.fromEntries((r.resource?.attributes ?? []).map((a) => [a.key, a.value?.value.value as string])),
    spans: r.scopeSpans.flatMap((s) => s.spans.map((span) => [Buffer.from(span.traceId).toString("hex"), span.name])),
  }));
}

const STAMPED = [
  {
    attributes: {
      "service.name": "harness:oz0-orchestrator",
      "host.name": "inside",
      "oz0.session.id": "ses_relay",
      "oz0.job.id": "job-1",
    },
    spans: [[TRACE, "tool Bash"]],
  },
];

interface Received {
  path: string;
  authorization: string;
  contentType: string;
  body: Buffer;
}

void describe("the sandbox's trace relay", () => {
  let collector: http.Server;
  let collectorUrl: string;
  const received: Received[] = [];
  before(async () => {
    collector = http.createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () => {
        received.push({
          path: request.url ?? "",
          authorization: request.headers.authorization ?? "",
          contentType: request.headers["content-type"] ?? "",
          body: Buffer.concat(chunks),
        });
        response.writeHead(200, { "content-type": "application/x-protobuf" }).end();
      });
    });
    await new Promise<void>((resolve) => collector.listen(0, "127.0.0.1", resolve));
    collectorUrl = `http://127.0.0.1:${(collector.address() as AddressInfo).port}/v1/traces`;
  });
  after(() => collector.close());

  for (const [isolation, protocol] of [
    ["none", "http/protobuf"],
    ["bwrap", "http/protobuf"],
    ["none", "http/json"],
  ] as const) {
    void it(`passes a session's own spans on to the collector with its credential, named as the session's (${isolation}, ${protocol})`, async () => {
      received.length = 0;
      const json = protocol === "http/json";
      const t = await startTestSandbox({
        isolation,
        sessionTraces: {
          url: collectorUrl,
          protocol,
          headers: { authorization: `Bearer ${COLLECTOR_SECRET}` },
        },
      });
      try {
        const body = json
          ? Buffer.from(otlpJson(forgedExport()))
          : toBinary(ExportTraceServiceRequestSchema, forgedExport());
        const stream = await runToEnd(
          t.client,
          scenarioStart(
            {
              mode: "otlp",
              needle: COLLECTOR_SECRET,
              export: Buffer.from(body).toString("base64"),
              contentType: json ? "application/json" : "application/x-protobuf",
            },
            {},
            traceRequest("ses_relay"),
          ),
        );
        const exited = stream.exited();
        const outcome = JSON.parse(exited.result?.text ?? "{}") as {
          endpoint: string;
          statuses: string[];
          answer: string;
          leaked: boolean;
          disabled: string;
        };
        assert.ok(exited.result !== undefined, `${exited.errorCode}: ${exited.errorMessage} ${exited.stderrTail}`);
        assert.match(
          outcome.endpoint,
          new RegExp(`^http://127\\.0\\.0\\.1:\\d+/sessions/ses_relay/job-1/${TRACE}/[\\w-]+/v1/traces$`),
        );
        assert.equal(outcome.disabled, "false", "the harness's OpenTelemetry is switched on");
        assert.deepEqual(
          outcome.statuses,
          ["200", "404", "413", "403", "400"],
          "a trace export passes; metrics, an export past 4 MiB, one to a path not the session's and a body that is no export do not",
        );
        assert.equal(outcome.leaked, false, "the collector's credential is nowhere in the harness's environment");
        const answerBytes = Buffer.from(outcome.answer, "base64");
        const answer = json
          ? fromJson(ExportTraceServiceResponseSchema, JSON.parse(answerBytes.toString()) as JsonValue)
          : fromBinary(ExportTraceServiceResponseSchema, answerBytes);
        assert.equal(answer.partialSuccess?.rejectedSpans, 1n, "the span in another job's trace is told as rejected");
        assert.match(
          answer.partialSuccess?.errorMessage ?? "",
          new RegExp(`only spans of the session's own trace \\(${TRACE}`),
        );
        assert.equal(received.length, 1, JSON.stringify(received));
        assert.deepEqual(
          { ...received[0], body: "" },
          {
            path: "/v1/traces",
            authorization: `Bearer ${COLLECTOR_SECRET}`,
            contentType: json ? "application/json" : "application/x-protobuf",
            body: "",
          },
        );
        const got = json
          ? readOtlpJson(received[0]!.body.toString())
          : fromBinary(ExportTraceServiceRequestSchema, received[0]!.body);
        assert.deepEqual(passedOn(got), STAMPED);
      } finally {
        await t.close();
      }
    });
  }

  void it("drops a slow export's body at its deadline, and another session's exports get through meanwhile", async (ctx) => {
    received.length = 0;
    const exportBase64 = Buffer.from(toBinary(ExportTraceServiceRequestSchema, forgedExport())).toString("base64");
    const t = await startTestSandbox({ sessionTraces: { url: collectorUrl, protocol: "http/protobuf", headers: {} } });
    ctx.after(() => t.close());
    // 16 exports trickling their bodies: before, they held every slot of the node for as long as they were open.
    const slow = new SessionStream(t.client, {
      message: {
        case: "start",
        value: scenarioStart({ mode: "slow-exports", count: 16, export: exportBase64 }, {}, traceRequest("ses_slow")),
      },
    });
    await slow.waitFor(isText("whole export: 429"), "its own whole export refused: its share is taken");
    const other = await runToEnd(
      t.client,
      scenarioStart({ mode: "otlp", export: exportBase64 }, {}, traceRequest("ses_other")),
    );
    const outcome = JSON.parse(other.exited().result?.text ?? "{}") as { statuses: string[] };
    assert.equal(outcome.statuses[0], "200", "another session's export passes while the slow ones are held");
    await slow.finished;
    assert.deepEqual(
      JSON.parse(slow.exited().result?.text ?? "{}"),
      { "429": 12, "408": 4 },
      "its share of four held until their deadline, the rest refused at once",
    );
    assert.deepEqual(
      received.map(
        (r) => passedOn(fromBinary(ExportTraceServiceRequestSchema, r.body))[0]?.attributes["oz0.session.id"],
      ),
      ["ses_other"],
      "nothing of a body cut short reaches the collector",
    );
  });

  void it("leaves the harness's OpenTelemetry off when the sandbox records no traces", async () => {
    const t = await startTestSandbox();
    try {
      const stream = await runToEnd(t.client, scenarioStart({ mode: "otlp" }));
      const outcome = JSON.parse(stream.exited().result?.text ?? "{}") as { endpoint: string; disabled: string };
      assert.deepEqual(outcome, { endpoint: "", statuses: [], answer: "", leaked: false, disabled: "true" });
    } finally {
      await t.close();
    }
  });
});

void it("answers every export it cannot pass on, saying why: a body that is no export, a path it did not give, a collector that is down", async (ctx) => {
  // A port nothing listens on: the collector is down.
  const down = http.createServer();
  await new Promise<void>((resolve) => down.listen(0, "127.0.0.1", resolve));
  const downUrl = `http://127.0.0.1:${(down.address() as AddressInfo).port}/v1/traces`;
  await new Promise((resolve) => down.close(resolve));
  const warnings: string[] = [];
  const relay = await startTelemetryRelay({
    target: { url: downUrl, protocol: "http/protobuf", headers: {} },
    logger: { warn: (_: unknown, message: string) => void warnings.push(message) } as never,
    secret: Buffer.alloc(32, 1),
  });
  ctx.after(() => relay.close());
  const own = relay.exportPath({ sessionId: "ses_a", jobId: "job-1", traceId: TRACE });
  const post = async (pathname: string, body: Uint8Array | string) => {
    const response = await fetch(`${relay.url}${pathname}`, {
      method: "POST",
      headers: { "content-type": "application/x-protobuf" },
      body,
      signal: AbortSignal.timeout(30_000),
    });
    return [response.status, (await response.text()).trim()];
  };
  const exported = toBinary(ExportTraceServiceRequestSchema, forgedExport());
  assert.deepEqual(await post(own, "spans of the harness"), [
    400,
    "the body is not an OTLP trace export in protobuf (illegal tag: field no 13 wire type 6); export with an OpenTelemetry OTLP/HTTP exporter",
  ]);
  // Another session's path with this session's mac, another trace under its own: neither is a path it was given.
  for (const forged of [own.replace("ses_a", "ses_b"), own.replace(TRACE, OTHER_TRACE), "/v1/traces"])
    assert.deepEqual(await post(forged, exported), [
      403,
      "post to the OTEL_EXPORTER_OTLP_TRACES_ENDPOINT this session was given",
    ]);
  assert.deepEqual(await post(own, exported), [502, "the collector did not take the export"]);
  assert.deepEqual(warnings, ["could not pass a session's trace export on to the collector"]);
});
