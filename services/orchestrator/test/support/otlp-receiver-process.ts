// The OTLP/HTTP receiver the trace tests export to, as a separate process on
// loopback (tools/test-infra/bin/otlp-receiver.mjs), and the spans and metric
// points it received, as the tests read them back.
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import { fetchReceived, type ReceivedMetricPoint, type ReceivedSpan } from "@oz0/test-infra";
import { repoRoot } from "./test-stack.js";

export type { ReceivedMetricPoint, ReceivedSpan };

export interface OtlpReceiverProcess {
  url: string;
  received(): Promise<{ spans: ReceivedSpan[]; metrics: ReceivedMetricPoint[] }>;
  /** Stops the receiver and takes its OTEL_* variables out of the environment again. */
  stop(): void;
}

/**
 * Starts the receiver and points this process's environment at it (OTEL_*),
 * so every service the test starts, a child that inherits it, exports there
 * at once (the embedded stack's code path).
 */
export async function startOtlpReceiverProcess(): Promise<OtlpReceiverProcess> {
  const receiver: ChildProcess = spawn(
    process.execPath,
    [path.join(repoRoot, "tools", "test-infra", "bin", "otlp-receiver.mjs")],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let url: string | undefined;
  for await (const line of createInterface({ input: receiver.stdout! })) {
    url = (JSON.parse(line) as { url: string }).url;
    break;
  }
  if (!url) throw new Error("the OTLP receiver exited before printing its URL");
  const base = url;
  const saved = { ...process.env };
  Object.assign(process.env, {
    OTEL_EXPORTER_OTLP_ENDPOINT: base,
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
    OTEL_BSP_SCHEDULE_DELAY: "100",
    OTEL_METRIC_EXPORT_INTERVAL: "500",
    OTEL_LOGS_EXPORTER: "none",
    OTEL_TRACES_SAMPLER: "always_on",
  });
  return {
    url: base,
    received: () => fetchReceived(base),
    stop: () => {
      receiver.kill("SIGTERM");
      for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
    },
  };
}
