// Starts the real infrastructure the selected tests need (Apache Kafka when
// KAFKA_BROKERS is unset, PostgreSQL when DATABASE_URL is unset; see
// src/test-needs.ts for how a test says it needs one) and returns the
// environment that points tests at it, plus stop(). Stops them on SIGINT and
// SIGTERM too, so an interrupted run leaves no broker behind.
import { existsSync } from "node:fs";

const dist = new URL("../dist/index.js", import.meta.url);

export async function startInfrastructure({ files }) {
  if (!existsSync(dist)) {
    console.error("tools/test-infra is not built: run `npm run build` first");
    process.exit(1);
  }
  const { startTestInfrastructure } = await import(dist.href);
  const infra = await startTestInfrastructure({ files });
  const onSignal = () => {
    void infra.stop();
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  return infra;
}
