// Where traces go, read as the OpenTelemetry SDK reads it: the sandbox's relay
// sends its sessions' spans to the very same collector, with the same headers.
import assert from "node:assert/strict";
import { it } from "node:test";
import { otlpTracesTarget } from "../src/index.js";

void it("adds the traces path to the base endpoint, and takes the traces endpoint as it is", () => {
  assert.deepEqual(otlpTracesTarget({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/" }), {
    url: "http://collector:4318/v1/traces",
    protocol: "http/protobuf",
    headers: {},
  });
  assert.equal(
    otlpTracesTarget({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318",
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "https://b/custom",
    })?.url,
    "https://b/custom",
  );
  assert.equal(
    otlpTracesTarget({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318", OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" })
      ?.protocol,
    "http/json",
  );
});

void it("reads the headers, the signal's own over the general ones, values percent-decoded", () => {
  const target = otlpTracesTarget({
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318",
    OTEL_EXPORTER_OTLP_HEADERS: "Authorization=Bearer%20general,x-tenant=t1",
    OTEL_EXPORTER_OTLP_TRACES_HEADERS: "authorization=Bearer%20traces",
  });
  assert.deepEqual(target?.headers, { authorization: "Bearer traces", "x-tenant": "t1" });
});

void it("gives no target when traces are off, not exported over OTLP, or sent over gRPC", () => {
  assert.equal(otlpTracesTarget({}), undefined);
  assert.equal(
    otlpTracesTarget({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318", OTEL_SDK_DISABLED: "true" }),
    undefined,
  );
  assert.equal(
    otlpTracesTarget({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4318", OTEL_TRACES_EXPORTER: "none" }),
    undefined,
  );
  assert.equal(
    otlpTracesTarget({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a:4317", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }),
    undefined,
  );
});

void it("refuses a malformed endpoint or header list, naming the variable", () => {
  assert.throws(
    () => otlpTracesTarget({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "collector:4318" }),
    /OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must be an http:\/\/ or https:\/\/ URL/,
  );
  assert.throws(
    () => otlpTracesTarget({ OTEL_EXPORTER_OTLP_ENDPOINT: "not a url" }),
    /OTEL_EXPORTER_OTLP_ENDPOINT is not a URL/,
  );
  assert.throws(
    () => otlpTracesTarget({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://a", OTEL_EXPORTER_OTLP_HEADERS: "justaname" }),
    /OTEL_EXPORTER_OTLP_HEADERS has an entry without a name=value form/,
  );
});
