// A Publish call is part of its producers' traces, never a lone one-span trace
// (issue 22: they were 61% of all traces). The service exports over OTLP to a
// real receiver on loopback; producers send no trace context of their own, as
// the publisher does not, so only the events' traceparents can place the call.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { timestampNow } from "@bufbuild/protobuf/wkt";
import { startEvents, type RunningEvents } from "@oz0/events";
import { RawEventSchema } from "@oz0/proto/oz0/events/v1/events_pb";
import { startTelemetry, type Telemetry } from "@oz0/serving";
import { testCredentials } from "@oz0/serving/testing";
import { startOtlpReceiver, type OtlpReceiver } from "@oz0/test-infra";
import { eventsClient } from "./fixtures/events-client.js";

const JOB_A = { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7" };
const JOB_B = { traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331" };
const PUBLISH = "oz0.events.v1.EventsService/Publish";

let receiver: OtlpReceiver;
let telemetry: Telemetry;
let events: RunningEvents;
const savedEnv = { ...process.env };

before(async () => {
  receiver = await startOtlpReceiver();
  Object.assign(process.env, {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
    OTEL_TRACES_SAMPLER: "always_on",
    OTEL_METRICS_EXPORTER: "none",
    OTEL_LOGS_EXPORTER: "none",
  });
  telemetry = startTelemetry({ serviceName: "oz0-events" });
  events = await startEvents({ auth: testCredentials.settingsFor("events"), port: 0 });
});

after(async () => {
  await events?.close();
  await telemetry?.shutdown();
  await receiver?.close();
  for (const key of Object.keys(process.env)) if (!(key in savedEnv)) delete process.env[key];
});

const event = (jobId: string, traceparent: string) =>
  create(RawEventSchema, { id: crypto.randomUUID(), type: "job.created", time: timestampNow(), jobId, traceparent });

void test("a batch joins its first event's trace and links the other jobs' traces; a batch outside any trace leaves no span", async () => {
  const client = eventsClient(events.url);
  await client.publish({
    events: [
      event("job-a", `00-${JOB_A.traceId}-${JOB_A.spanId}-01`),
      event("job-b", `00-${JOB_B.traceId}-${JOB_B.spanId}-01`),
      event("job-a", `00-${JOB_A.traceId}-${JOB_A.spanId}-01`),
    ],
  });
  // Background work: events that belong to no trace.
  await client.publish({ events: [event("job-c", ""), event("job-d", "")] });
  // A query from a person still starts a trace of its own.
  for await (const _ of client.watch({ jobId: "job-a", untilCaughtUp: true }));
  await telemetry.shutdown();

  const spans = receiver.spans();
  const publishes = spans.filter((s) => s.name === PUBLISH);
  assert.equal(publishes.length, 1, `one Publish span (none for the untraced batch): ${JSON.stringify(publishes)}`);
  const [publish] = publishes;
  assert.equal(publish!.service, "oz0-events");
  assert.equal(publish!.traceId, JOB_A.traceId, "in the trace of the batch's first event");
  assert.equal(publish!.parentSpanId, JOB_A.spanId);
  assert.deepEqual(
    publish!.links.map((link) => [link.traceId, link.spanId]),
    [[JOB_B.traceId, JOB_B.spanId]],
    "a link to the other job's trace, one per trace",
  );
  // The per-event PRODUCER spans are in each event's own trace, as before.
  assert.deepEqual(
    spans
      .filter((s) => s.name === "publish job.created")
      .map((s) => s.traceId)
      .sort(),
    [JOB_A.traceId, JOB_A.traceId, JOB_B.traceId].sort(),
  );
  const watch = spans.find((s) => s.name === "oz0.events.v1.EventsService/Watch");
  assert.ok(watch, spans.map((s) => s.name).join(", "));
  assert.equal(watch.parentSpanId, "", "other RPCs without a caller's trace still start one");
});
