#!/usr/bin/env node
// The OTLP/HTTP (JSON) test receiver as its own process: prints {"url": …}
// on stdout once listening; GET /spans and /metrics return what it received.
// Usage: otlp-receiver.mjs [port]   (default 0: any free port). SIGTERM stops it.
import { startOtlpReceiver } from "../dist/otlp-receiver.js";

const receiver = await startOtlpReceiver({ port: Number(process.argv[2] ?? 0) });
process.stdout.write(`${JSON.stringify({ url: receiver.url })}\n`);
const stop = () => {
  receiver.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
