// What the trace relay makes of a session's export (session-trace-export.ts)
// and the secret its paths' macs are keyed with (relaySecret), without a
// sandbox: the relay end to end is trace-relay.test.ts.
import assert from "node:assert/strict";
import { chmod, lstat, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  ExportTraceServiceRequestSchema,
  type ExportTraceServiceRequest,
} from "@oz0/proto/opentelemetry/proto/collector/trace/v1/trace_service_pb";
import { stampSessionExport, UnreadableExportError } from "../src/session-trace-export.js";
import { relaySecret } from "../src/telemetry-relay.js";

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const OTHER = "0af7651916cd43dd8448eb211c80319c";
const SESSION = { sessionId: "ses_1", jobId: "job_1", traceId: TRACE };

const text = (key: string, value: string) => ({ key, value: { value: { case: "stringValue" as const, value } } });

function exportOf(resources: Array<{ attributes?: ReturnType<typeof text>[]; traces: string[] }>) {
  return create(ExportTraceServiceRequestSchema, {
    resourceSpans: resources.map((r) => ({
      ...(r.attributes !== undefined ? { resource: { attributes: r.attributes } } : {}),
      scopeSpans: [
        {
          spans: r.traces.map((traceId, i) => ({
            traceId: Buffer.from(traceId, "hex"),
            spanId: Buffer.from(`00000000000000${i}1`, "hex"),
            name: `span ${i}`,
          })),
        },
      ],
    })),
  });
}

function summary(request: ExportTraceServiceRequest) {
  return request.resourceSpans.map((r) => ({
    attributes: (r.resource?.attributes ?? []).map((a) => `${a.key}=${String(a.value?.value.value)}`),
    spans: r.scopeSpans.flatMap((s) => s.spans.map((span) => Buffer.from(span.traceId).toString("hex"))),
  }));
}

void test("only the session's own trace passes, under a resource naming the session and job", () => {
  const stamped = stampSessionExport({
    body: toBinary(
      ExportTraceServiceRequestSchema,
      exportOf([
        {
          attributes: [text("service.name", "oz0-llm-proxy"), text("oz0.node.id", "forged"), text("os.type", "linux")],
          traces: [TRACE, OTHER, TRACE],
        },
        // A resource left with no span is not passed on at all.
        { attributes: [text("service.name", "claude-code")], traces: [OTHER] },
        // No resource: it gets one.
        { traces: [TRACE] },
      ]),
    ),
    json: false,
    session: SESSION,
  });
  assert.equal(stamped.spans, 3);
  assert.equal(stamped.rejectedSpans, 2);
  assert.deepEqual(summary(fromBinary(ExportTraceServiceRequestSchema, stamped.body!)), [
    {
      attributes: ["service.name=harness:oz0-llm-proxy", "os.type=linux", "oz0.session.id=ses_1", "oz0.job.id=job_1"],
      spans: [TRACE, TRACE],
    },
    { attributes: ["oz0.session.id=ses_1", "oz0.job.id=job_1"], spans: [TRACE] },
  ]);
});

void test("a harness's own service name stays, a control plane look-alike does not; a session given no trace has none of its spans passed", () => {
  const named = (name: string): string | undefined => {
    const body = toBinary(
      ExportTraceServiceRequestSchema,
      exportOf([{ attributes: [text("service.name", name)], traces: [TRACE] }]),
    );
    const stamped = stampSessionExport({ body, json: false, session: SESSION });
    return summary(fromBinary(ExportTraceServiceRequestSchema, stamped.body!))[0]?.attributes[0];
  };
  assert.equal(named("claude-code"), "service.name=claude-code");
  assert.equal(named("oz0-fake-harness"), "service.name=oz0-fake-harness");
  assert.equal(named(" OZ0-Orchestrator "), "service.name=harness: OZ0-Orchestrator ");
  assert.equal(named("oz0-sandbox-2"), "service.name=harness:oz0-sandbox-2");
  const body = toBinary(
    ExportTraceServiceRequestSchema,
    exportOf([{ attributes: [text("service.name", "claude-code")], traces: [TRACE] }]),
  );
  assert.deepEqual(stampSessionExport({ body, json: false, session: { ...SESSION, traceId: "" } }), {
    body: undefined,
    spans: 0,
    rejectedSpans: 1,
  });
});

void test("OTLP/JSON: hex ids read and written as hex, enums as numbers, unknown fields ignored", () => {
  const body = JSON.stringify({
    resourceSpans: [
      {
        resource: { attributes: [{ key: "service.name", value: { stringValue: "oz0-events" } }] },
        scopeSpans: [
          {
            scope: { name: "harness" },
            spans: [
              {
                traceId: TRACE.toUpperCase(),
                spanId: "b7ad6b7169203331",
                parentSpanId: "00f067aa0ba902b7",
                name: "tool Read",
                kind: 3,
                links: [{ traceId: OTHER, spanId: "00f067aa0ba902b7" }],
                futureField: true,
              },
              { traceId: OTHER, spanId: "b7ad6b7169203332", name: "permission" },
            ],
          },
        ],
      },
    ],
  });
  const stamped = stampSessionExport({ body: Buffer.from(body), json: true, session: SESSION });
  assert.equal(stamped.rejectedSpans, 1);
  const written = JSON.parse(Buffer.from(stamped.body!).toString()) as {
    resourceSpans: Array<{ resource: { attributes: unknown[] }; scopeSpans: Array<{ spans: unknown[] }> }>;
  };
  assert.deepEqual(written.resourceSpans[0]?.scopeSpans[0]?.spans, [
    {
      traceId: TRACE,
      spanId: "b7ad6b7169203331",
      parentSpanId: "00f067aa0ba902b7",
      name: "tool Read",
      kind: 3,
      links: [{ traceId: OTHER, spanId: "00f067aa0ba902b7" }],
    },
  ]);
  assert.deepEqual(written.resourceSpans[0]?.resource.attributes, [
    { key: "service.name", value: { stringValue: "harness:oz0-events" } },
    { key: "oz0.session.id", value: { stringValue: "ses_1" } },
    { key: "oz0.job.id", value: { stringValue: "job_1" } },
  ]);
});

void test("a body that is no OTLP trace export is refused, saying so", () => {
  for (const [body, json, words] of [
    [Buffer.from("spans of the harness"), false, /not an OTLP trace export in protobuf/],
    [Buffer.from("{"), true, /not an OTLP trace export in JSON/],
    [
      Buffer.from(JSON.stringify({ resourceSpans: [{ scopeSpans: [{ spans: [{ traceId: "zz" }] }] }] })),
      true,
      /a trace or span id is not hex: "zz"/,
    ],
  ] as const)
    assert.throws(
      () => stampSessionExport({ body, json, session: SESSION }),
      (e: unknown) => e instanceof UnreadableExportError && words.test(e.message),
    );
});

void test("the relay's secret is made once per root (0600) and kept; a file not the sandbox's own secret is replaced", async (t) => {
  const root = await mkdtemp(path.join(os.tmpdir(), "oz0-relay-secret-"));
  t.after(() => rm(root, { recursive: true, force: true }));
  const first = await relaySecret(root);
  assert.equal(first.length, 32);
  assert.deepEqual(await relaySecret(root), first, "a restarted sandbox knows the paths it gave");
  const file = path.join(root, "telemetry-relay.key");
  assert.equal((await stat(file)).mode & 0o777, 0o600);

  await chmod(file, 0o644);
  const afterReadable = await relaySecret(root);
  assert.notDeepEqual(afterReadable, first, "a secret others could read is no secret");
  assert.equal((await stat(file)).mode & 0o777, 0o600);

  const elsewhere = path.join(root, "elsewhere");
  await writeFile(elsewhere, Buffer.alloc(32, 7), { mode: 0o600 });
  await rm(file);
  await symlink(elsewhere, file);
  const afterLink = await relaySecret(root);
  assert.notDeepEqual(afterLink, Buffer.alloc(32, 7), "a link is not followed");
  assert.equal((await lstat(file)).isFile(), true);
  assert.deepEqual(await readFile(elsewhere), Buffer.alloc(32, 7), "what the link named is left alone");
});
