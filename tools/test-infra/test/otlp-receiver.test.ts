// The OTLP test receiver decodes what exporters send (hex or base64 ids,
// every attribute value kind, histogram points), refuses protobuf loudly, and
// hands everything back over GET /spans and /metrics.
import assert from "node:assert/strict";
import { test } from "node:test";
import { gzipSync } from "node:zlib";
import { fetchReceived, startOtlpReceiver } from "@oz0/test-infra";

const traces = {
  resourceSpans: [
    {
      resource: { attributes: [{ key: "service.name", value: { stringValue: "oz0-test" } }] },
      scopeSpans: [
        {
          scope: { name: "scope-a" },
          spans: [
            {
              traceId: "4bf92f3577b34da6a3ce929d0e0e4736",
              spanId: "00f067aa0ba902b7",
              name: "root",
              kind: 1,
              attributes: [
                { key: "s", value: { stringValue: "x" } },
                { key: "i", value: { intValue: "42" } },
                { key: "b", value: { boolValue: true } },
                { key: "d", value: { doubleValue: 0.5 } },
                { key: "a", value: { arrayValue: { values: [{ stringValue: "p" }, { intValue: 1 }] } } },
              ],
              status: { code: 2, message: "tool_error" },
              links: [
                {
                  traceId: "0af7651916cd43dd8448eb211c80319c",
                  spanId: "b7ad6b7169203331",
                  attributes: [{ key: "oz0.job.id", value: { stringValue: "job_1" } }],
                },
              ],
            },
            // The protobuf JSON mapping's base64 ids.
            {
              traceId: Buffer.from("4bf92f3577b34da6a3ce929d0e0e4736", "hex").toString("base64"),
              spanId: Buffer.from("1111111111111111", "hex").toString("base64"),
              parentSpanId: Buffer.from("00f067aa0ba902b7", "hex").toString("base64"),
              name: "child",
            },
          ],
        },
      ],
    },
  ],
};

const metrics = {
  resourceMetrics: [
    {
      resource: { attributes: [{ key: "service.name", value: { stringValue: "oz0-test" } }] },
      scopeMetrics: [
        {
          metrics: [
            {
              name: "jobs",
              sum: { dataPoints: [{ asInt: "3", attributes: [{ key: "state", value: { stringValue: "ok" } }] }] },
            },
            { name: "latency", histogram: { dataPoints: [{ sum: 1.5, count: "2" }] } },
          ],
        },
      ],
    },
  ],
};

void test("decodes OTLP/JSON spans and metrics, gzip included, and refuses protobuf", async () => {
  const receiver = await startOtlpReceiver();
  try {
    const post = (route: string, body: Buffer, headers: Record<string, string>) =>
      fetch(`${receiver.url}${route}`, { method: "POST", headers, body });
    assert.equal(
      (await post("/v1/traces", Buffer.from(JSON.stringify(traces)), { "content-type": "application/json" })).status,
      200,
    );
    assert.equal(
      (
        await post("/v1/metrics", gzipSync(JSON.stringify(metrics)), {
          "content-type": "application/json",
          "content-encoding": "gzip",
        })
      ).status,
      200,
    );
    const refused = await post("/v1/traces", Buffer.from([0x0a, 0x00]), { "content-type": "application/x-protobuf" });
    assert.equal(refused.status, 415);
    assert.match(await refused.text(), /OTEL_EXPORTER_OTLP_PROTOCOL=http\/json/);

    const { spans, metrics: points } = await fetchReceived(receiver.url);
    assert.equal(receiver.requests, 2);
    const [root, child] = spans;
    assert.deepEqual(root?.attributes, { s: "x", i: 42, b: true, d: 0.5, a: ["p", 1] });
    assert.equal(root?.service, "oz0-test");
    assert.equal(root?.scope, "scope-a");
    assert.equal(root?.parentSpanId, "");
    assert.equal(root?.statusCode, 2);
    assert.equal(root?.statusMessage, "tool_error");
    assert.deepEqual(root?.links, [
      {
        traceId: "0af7651916cd43dd8448eb211c80319c",
        spanId: "b7ad6b7169203331",
        attributes: { "oz0.job.id": "job_1" },
      },
    ]);
    assert.deepEqual(child?.links, []);
    assert.equal(child?.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert.equal(child?.spanId, "1111111111111111");
    assert.equal(child?.parentSpanId, "00f067aa0ba902b7");
    assert.deepEqual(points, [
      { service: "oz0-test", name: "jobs", attributes: { state: "ok" }, value: 3 },
      { service: "oz0-test", name: "latency", attributes: {}, value: 1.5, count: 2 },
    ]);
  } finally {
    await receiver.close();
  }
});
