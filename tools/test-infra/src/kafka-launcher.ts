// A real single-node KRaft Apache Kafka broker for tests, from Apache Kafka's
// own jars on Maven Central (no Docker engine on our CI machines). The jars
// are fetched once with the machine's Maven and cached, so later runs start
// offline; each broker gets its own loopback ports and temporary data folder.
import { randomBytes } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { homedir, tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Kafka, logLevel } from "kafkajs";
import { runToCompletion, spawnOwned, type OwnedProcess } from "./child-process.js";
import { freePorts } from "./free-port.js";
import { InfrastructureError } from "./infrastructure-error.js";

/** The Kafka release the launcher runs unless told otherwise (served by Maven Central here). */
export const DEFAULT_KAFKA_VERSION = "4.1.1";

const pomFile = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../kafka/pom.xml");

export interface KafkaJarsOptions {
  /** Default `OZ0_KAFKA_CACHE`, else `~/.cache/oz0/kafka`. */
  cacheDir?: string;
  version?: string;
}

/** The cache folder Kafka's jars go to. */
export function kafkaCacheDir(options: KafkaJarsOptions = {}): string {
  return options.cacheDir ?? process.env.OZ0_KAFKA_CACHE ?? path.join(homedir(), ".cache", "oz0", "kafka");
}

/**
 * Make sure Kafka's jars are in the cache (fetching them with Maven the first
 * time) and return the folder that holds them.
 */
export async function ensureKafkaJars(options: KafkaJarsOptions = {}): Promise<string> {
  const version = options.version ?? DEFAULT_KAFKA_VERSION;
  const cache = kafkaCacheDir(options);
  const libs = path.join(cache, `libs-${version}`);
  if (existsSync(path.join(libs, `kafka_2.13-${version}.jar`))) return libs;
  mkdirSync(cache, { recursive: true });
  // Fetch into a private folder and rename it into place, so two test runs
  // fetching at once never see half a classpath.
  const staging = mkdtempSync(path.join(cache, `.fetch-${version}-`));
  try {
    await runToCompletion({
      command: "mvn",
      args: [
        "-q",
        "-B",
        "-f",
        pomFile,
        `-Dkafka.version=${version}`,
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        `-DoutputDirectory=${staging}`,
      ],
    });
  } catch (error) {
    rmSync(staging, { recursive: true, force: true });
    throw new InfrastructureError(
      "KAFKA_JARS_UNAVAILABLE",
      `could not fetch Apache Kafka ${version} with Maven (is mvn installed and Maven Central reachable?), ` +
        `or set KAFKA_BROKERS to a broker you run: ${(error as Error).message}`,
    );
  }
  try {
    renameSync(staging, libs);
  } catch {
    // Another run put it there first; theirs is as good as ours.
    rmSync(staging, { recursive: true, force: true });
  }
  return libs;
}

/** A user the broker knows by a SCRAM credential, written into its metadata when its storage is formatted. */
export interface ScramUser {
  /** Default SCRAM-SHA-512. */
  mechanism?: "SCRAM-SHA-512" | "SCRAM-SHA-256";
  username: string;
  password: string;
}

export interface KafkaOptions extends KafkaJarsOptions {
  /** Max heap. Default `512m`: the CI machines have 2 cores shared by every test run. */
  heap?: string;
  /** How long to wait for the broker to answer. Default 90 s. */
  readyTimeoutMs?: number;
  /**
   * SCRAM users. With any, the broker also listens with SASL_PLAINTEXT
   * (`saslBrokers`), where a client must authenticate by SCRAM-SHA-512 or
   * SCRAM-SHA-256 as one of them. The plaintext listener (`brokers`) stays.
   */
  scramUsers?: ScramUser[];
  /**
   * Kafka's StandardAuthorizer: a user of the SASL listener may do only what
   * ACLs allow it. The plaintext listener's clients (`User:ANONYMOUS`, which
   * is also the broker itself, on its controller and inter-broker links) are
   * super users, so a test creates topics and ACLs through `brokers`.
   */
  authorizer?: boolean;
  /**
   * A listener with TLS (`SSL`, no SASL), at `tlsBrokers`, whose certificate
   * for 127.0.0.1 is signed by a CA made for this broker alone (`caFile`).
   * The certificates are made with the machine's `openssl`.
   */
  tls?: boolean;
}

export interface RunningKafka {
  /** `127.0.0.1:<port>`, for kafkajs `brokers` (or KAFKA_BROKERS). */
  readonly brokers: string[];
  /** `127.0.0.1:<port>` of the SASL_PLAINTEXT listener; empty without `scramUsers`. */
  readonly saslBrokers: string[];
  /** `127.0.0.1:<port>` of the TLS listener; empty without `tls`. */
  readonly tlsBrokers: string[];
  /** The PEM certificate of the CA that signed the TLS listener's; undefined without `tls`. */
  readonly caFile: string | undefined;
  /** The broker's data and log folder (its output is in `broker.log`). */
  readonly dir: string;
  /** Stop the broker (controlled shutdown) and keep its data, so `restart()` brings it back. */
  stop(): Promise<void>;
  /** Start a stopped broker again on the same port with the same data. */
  restart(): Promise<void>;
  /** Stop the broker and delete its data. */
  close(): Promise<void>;
}

/** Start a single-node KRaft broker on loopback and wait until it answers. */
export async function startKafka(options: KafkaOptions = {}): Promise<RunningKafka> {
  const scramUsers = options.scramUsers ?? [];
  const addScram = scramUsers.map(scramArgument);
  const libs = await ensureKafkaJars(options);
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-kafka-"));
  const [port, controllerPort, saslPort, tlsPort] = (await freePorts(4)) as [number, number, number, number];
  const tls = options.tls
    ? await makeCertificates(dir).catch((error: unknown) => {
        rmSync(dir, { recursive: true, force: true });
        throw error;
      })
    : undefined;
  const properties = path.join(dir, "server.properties");
  writeFileSync(
    properties,
    serverProperties({
      dir,
      port,
      controllerPort,
      ...(scramUsers.length > 0 ? { saslPort } : {}),
      ...(tls ? { tls: { port: tlsPort, keystore: tls.keystore } } : {}),
      authorizer: options.authorizer ?? false,
    }),
  );
  const classpath = `${libs}/*`;
  const java = javaCommand();
  const jvm = [
    `-Xmx${options.heap ?? "512m"}`,
    "-Xms64m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
  ];
  // A cluster id is 16 random bytes in URL-safe base64, as `StorageTool random-uuid` prints.
  // Passed as --cluster-id=ID: one that starts with "-" (1 in 32) would otherwise be read as an option.
  const clusterId = randomBytes(16).toString("base64url");
  await runToCompletion({
    command: java,
    args: [
      ...jvm,
      "-cp",
      classpath,
      "kafka.tools.StorageTool",
      "format",
      "--standalone",
      `--cluster-id=${clusterId}`,
      "-c",
      properties,
      // The users' credentials go into the cluster's first metadata, so they hold from the first connection.
      ...addScram.flatMap((user) => ["--add-scram", user]),
    ],
  });
  const brokers = [`127.0.0.1:${port}`];
  const saslBrokers = scramUsers.length > 0 ? [`127.0.0.1:${saslPort}`] : [];
  const tlsBrokers = tls ? [`127.0.0.1:${tlsPort}`] : [];
  const logFile = path.join(dir, "broker.log");
  const readyTimeoutMs = options.readyTimeoutMs ?? 90_000;
  let process_: OwnedProcess | undefined;

  const launch = async (): Promise<void> => {
    const child = spawnOwned({ command: java, args: [...jvm, "-cp", classpath, "kafka.Kafka", properties], logFile });
    process_ = child;
    try {
      await waitForKafka({ brokers, timeoutMs: readyTimeoutMs, exited: child.exited });
    } catch (error) {
      await child.stop({ signal: "SIGKILL" });
      throw new InfrastructureError(
        "KAFKA_NOT_READY",
        `Apache Kafka did not answer on ${brokers[0]}: ${(error as Error).message}; see ${logFile}`,
      );
    }
  };
  await launch();

  let closed = false;
  return {
    brokers,
    saslBrokers,
    tlsBrokers,
    caFile: tls?.caFile,
    dir,
    async stop() {
      await process_?.stop({ signal: "SIGTERM", graceMs: 15_000 });
      process_ = undefined;
    },
    async restart() {
      if (closed)
        throw new InfrastructureError("KAFKA_CLOSED", "this broker was closed; start a new one with startKafka()");
      if (process_) return;
      await launch();
    },
    async close() {
      if (closed) return;
      closed = true;
      await process_?.stop({ signal: "SIGTERM", graceMs: 10_000 });
      process_ = undefined;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Poll the broker with kafkajs until it describes its cluster (or the process exits). */
export async function waitForKafka(options: {
  brokers: string[];
  timeoutMs: number;
  exited?: Promise<number | null>;
}): Promise<void> {
  const deadline = Date.now() + options.timeoutMs;
  let exitedWith: number | null | undefined;
  void options.exited?.then((code) => {
    exitedWith = code;
  });
  const kafka = new Kafka({
    clientId: "oz0-test-infra",
    brokers: options.brokers,
    logLevel: logLevel.NOTHING,
    connectionTimeout: 1_000,
    retry: { retries: 0 },
  });
  let lastError: unknown;
  while (Date.now() < deadline) {
    if (exitedWith !== undefined) throw new Error(`the broker exited with code ${exitedWith}`);
    const admin = kafka.admin();
    try {
      await admin.connect();
      const cluster = await admin.describeCluster();
      if (cluster.brokers.length > 0 && cluster.controller !== null) return;
    } catch (error) {
      lastError = error;
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(
    `timed out after ${options.timeoutMs} ms (${String((lastError as Error | undefined)?.message ?? lastError)})`,
  );
}

/**
 * `SCRAM-SHA-512=[name=…,password=…]`, as `StorageTool format --add-scram` takes it. Its parser splits at `,`, `=`,
 * `[` and `]` and reads `"` as a quote: a test's name or password keeps to characters it passes as they are.
 */
function scramArgument(user: ScramUser): string {
  for (const [what, value] of [
    ["username", user.username],
    ["password", user.password],
  ] as const)
    if (!/^[A-Za-z0-9._~-]+$/.test(value))
      throw new InfrastructureError(
        "KAFKA_SCRAM_USER_INVALID",
        `a SCRAM user's ${what} for the test broker must be letters, digits, '.', '_', '~' and '-' (the format tool's syntax)`,
      );
  return `${user.mechanism ?? "SCRAM-SHA-512"}=[name=${user.username},password=${user.password}]`;
}

/**
 * A CA and, signed by it, a certificate for 127.0.0.1, made with `openssl` in
 * the broker's folder (removed with it). Kafka reads the key and the
 * certificate from one PEM file (`ssl.keystore.type=PEM`).
 */
async function makeCertificates(dir: string): Promise<{ caFile: string; keystore: string }> {
  const file = (name: string): string => path.join(dir, name);
  const openssl = async (...args: string[]): Promise<void> => {
    try {
      await runToCompletion({ command: "openssl", args });
    } catch (error) {
      throw new InfrastructureError(
        "KAFKA_TLS_CERTIFICATES",
        `could not make the test broker's certificates with openssl (is it installed?): ${(error as Error).message}`,
      );
    }
  };
  const key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  const ca = ["-keyout", file("ca.key"), "-out", file("ca.pem"), "-days", "2", "-subj", "/CN=oz0 test broker CA"];
  await openssl("req", "-x509", ...key, ...ca);
  await openssl("req", ...key, "-keyout", file("broker.key"), "-out", file("broker.csr"), "-subj", "/CN=127.0.0.1");
  writeFileSync(file("broker.ext"), "subjectAltName=IP:127.0.0.1\n");
  await openssl(
    "x509",
    "-req",
    "-in",
    file("broker.csr"),
    "-CA",
    file("ca.pem"),
    "-CAkey",
    file("ca.key"),
    "-CAcreateserial",
    "-out",
    file("broker.pem"),
    "-days",
    "2",
    "-extfile",
    file("broker.ext"),
  );
  const keystore = file("broker-keystore.pem");
  writeFileSync(keystore, readFileSync(file("broker.key"), "utf8") + readFileSync(file("broker.pem"), "utf8"));
  return { caFile: file("ca.pem"), keystore };
}

function serverProperties(options: {
  dir: string;
  port: number;
  controllerPort: number;
  /** A SASL_PLAINTEXT listener taking SCRAM, when given. */
  saslPort?: number;
  /** An SSL listener with this key and certificate, when given. */
  tls?: { port: number; keystore: string };
  authorizer: boolean;
}): string {
  const sasl = options.saslPort !== undefined;
  const listeners = [
    `PLAINTEXT://127.0.0.1:${options.port}`,
    ...(sasl ? [`SASL_PLAINTEXT://127.0.0.1:${options.saslPort}`] : []),
    ...(options.tls ? [`SSL://127.0.0.1:${options.tls.port}`] : []),
  ];
  return [
    "process.roles=broker,controller",
    "node.id=1",
    `controller.quorum.bootstrap.servers=127.0.0.1:${options.controllerPort}`,
    `listeners=${[...listeners, `CONTROLLER://127.0.0.1:${options.controllerPort}`].join(",")}`,
    `advertised.listeners=${listeners.join(",")}`,
    "controller.listener.names=CONTROLLER",
    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT" +
      (sasl ? ",SASL_PLAINTEXT:SASL_PLAINTEXT" : "") +
      (options.tls ? ",SSL:SSL" : ""),
    "inter.broker.listener.name=PLAINTEXT",
    ...(options.tls ? ["ssl.keystore.type=PEM", `ssl.keystore.location=${options.tls.keystore}`] : []),
    ...(sasl
      ? [
          "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256",
          "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
          "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;",
        ]
      : []),
    ...(options.authorizer
      ? [
          "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
          // The plaintext listener, the controller's and the broker's own links: nothing there authenticates.
          "super.users=User:ANONYMOUS",
        ]
      : []),
    `log.dirs=${path.join(options.dir, "data")}`,
    "num.partitions=1",
    "auto.create.topics.enable=true",
    // One node: every internal topic has one replica, and few partitions so
    // the first consumer group and the first idempotent producer start fast.
    "offsets.topic.replication.factor=1",
    "offsets.topic.num.partitions=1",
    "transaction.state.log.replication.factor=1",
    "transaction.state.log.min.isr=1",
    "transaction.state.log.num.partitions=1",
    "share.coordinator.state.topic.replication.factor=1",
    "share.coordinator.state.topic.min.isr=1",
    "share.coordinator.state.topic.num.partitions=1",
    "group.initial.rebalance.delay.ms=0",
    "num.network.threads=2",
    "num.io.threads=2",
    "background.threads=2",
    "log.cleaner.enable=false",
    "",
  ].join("\n");
}

function javaCommand(): string {
  return process.env.JAVA_HOME ? path.join(process.env.JAVA_HOME, "bin", "java") : "java";
}

/** True when the jars for `version` are already cached (so start-up needs no network). */
export function kafkaJarsCached(options: KafkaJarsOptions = {}): boolean {
  const libs = path.join(kafkaCacheDir(options), `libs-${options.version ?? DEFAULT_KAFKA_VERSION}`);
  return existsSync(libs) && readdirSync(libs).some((f) => f.startsWith("kafka_2.13-"));
}
