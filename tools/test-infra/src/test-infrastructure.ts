// What `npm test` starts for the whole run: Kafka when KAFKA_BROKERS is unset
// and a selected test needs it, PostgreSQL when DATABASE_URL is unset and a
// selected test needs it. With a Docker engine and testcontainers installed
// it uses those; otherwise (our CI machines) the launchers in this package.
import { dockerEngineAnswers } from "./docker-engine.js";
import { startKafka } from "./kafka-launcher.js";
import { startPostgres } from "./postgres-launcher.js";
import { testNeeds } from "./test-needs.js";

export interface TestInfrastructure {
  /** Variables for the test processes (KAFKA_BROKERS, DATABASE_URL). */
  env: Record<string, string>;
  /** Stop everything this started. Safe to call more than once. */
  stop(): Promise<void>;
}

export async function startTestInfrastructure(options: {
  files: string[];
  log?: (line: string) => void;
}): Promise<TestInfrastructure> {
  const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const needs = testNeeds(options.files);
  const wantKafka = needs.kafka && !process.env.KAFKA_BROKERS;
  const wantPostgres = needs.postgres && !process.env.DATABASE_URL;
  const env: Record<string, string> = {};
  const stops: (() => Promise<void>)[] = [];
  if (!wantKafka && !wantPostgres) return { env, stop: async () => {} };

  const docker = await dockerEngineAnswers();
  const started = Date.now();
  const tasks: Promise<void>[] = [];
  if (wantKafka) {
    tasks.push(
      (async () => {
        const viaDocker = docker ? await startKafkaContainer() : undefined;
        if (viaDocker) {
          env.KAFKA_BROKERS = viaDocker.brokers;
          stops.push(viaDocker.stop);
          return;
        }
        const kafka = await startKafka();
        env.KAFKA_BROKERS = kafka.brokers.join(",");
        stops.push(() => kafka.close());
      })(),
    );
  }
  if (wantPostgres) {
    tasks.push(
      (async () => {
        const viaDocker = docker ? await startPostgresContainer() : undefined;
        if (viaDocker) {
          env.DATABASE_URL = viaDocker.url;
          stops.push(viaDocker.stop);
          return;
        }
        const postgres = await startPostgres();
        env.DATABASE_URL = postgres.url;
        stops.push(() => postgres.close());
      })(),
    );
  }
  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= Promise.allSettled(stops.map((s) => s())).then(() => undefined);
    return stopping;
  };
  const results = await Promise.allSettled(tasks);
  const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (failed) {
    await stop();
    throw failed.reason;
  }
  log(
    `test infrastructure ready in ${Date.now() - started} ms: ${Object.entries(env)
      .map(([k, v]) => `${k}=${v}`)
      .join(" ")}`,
  );
  return { env, stop };
}

// testcontainers is not a dependency (no Docker engine on our CI machines);
// where a developer has both, it is used instead of the local launchers.
async function importOptional(name: string): Promise<Record<string, unknown> | undefined> {
  try {
    return (await import(name)) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

interface StartedContainer {
  getHost(): string;
  getMappedPort(port: number): number;
  stop(): Promise<unknown>;
}

async function startKafkaContainer(): Promise<{ brokers: string; stop: () => Promise<void> } | undefined> {
  const module = await importOptional("@testcontainers/kafka");
  const KafkaContainer = module?.KafkaContainer as
    (new (image: string) => { withKraft(): { start(): Promise<StartedContainer> } }) | undefined;
  if (!KafkaContainer) return undefined;
  const container = await new KafkaContainer("confluentinc/cp-kafka:7.7.1").withKraft().start();
  return {
    brokers: `${container.getHost()}:${container.getMappedPort(9093)}`,
    stop: async () => {
      await container.stop();
    },
  };
}

async function startPostgresContainer(): Promise<{ url: string; stop: () => Promise<void> } | undefined> {
  const module = await importOptional("@testcontainers/postgresql");
  const PostgreSqlContainer = module?.PostgreSqlContainer as
    (new (image: string) => { start(): Promise<StartedContainer & { getConnectionUri(): string }> }) | undefined;
  if (!PostgreSqlContainer) return undefined;
  const container = await new PostgreSqlContainer("postgres:16-alpine").start();
  return {
    url: container.getConnectionUri(),
    stop: async () => {
      await container.stop();
    },
  };
}
