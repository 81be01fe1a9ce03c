// Shared by the sandbox tests: a real sandbox on loopback, a gRPC client,
// and a RunSession stream the test drives message by message.
import { spawn, spawnSync, type ChildProcess, type IOType } from "node:child_process";
import { once } from "node:events";
import { chownSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import type { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  RunSessionRequestSchema,
  SandboxService,
  type RunSessionRequest,
  type RunSessionResponse,
  type StartSessionSchema,
} from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import type { Logger } from "@oz0/serving";
import { testCredentials } from "@oz0/serving/testing";
import { startSandbox, type RunningSandbox, type SandboxConfig } from "../src/index.js";
import { findSetpriv } from "../src/parent-death-launcher.js";

export const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures");
export const SCENARIO = path.join(FIXTURES, "scenario-harness.mjs");

export interface TestSandbox {
  sandbox: RunningSandbox;
  client: Client<typeof SandboxService>;
  root: string;
  close(): Promise<void>;
}

export async function startTestSandbox(config: SandboxConfig = {}): Promise<TestSandbox> {
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-test-"));
  const sandbox = await startSandbox({
    port: 0,
    root,
    isolation: "none",
    cancelGraceMs: 2_000,
    auth: testCredentials.settingsFor("sandbox"),
    ...config,
  });
  const client = createClient(
    SandboxService,
    createGrpcTransport({ baseUrl: sandbox.url, interceptors: [testCredentials.caller] }),
  );
  return {
    sandbox,
    client,
    root,
    async close() {
      await sandbox.close();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

const MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "dist", "main.js");

/**
 * The sandbox as deployed (`dist/main.js`), with the test credentials, a port of the kernel's choosing and `env`
 * (OZ0_SANDBOX_ROOT, OZ0_ISOLATION, ...); its stderr piped for {@link listeningUrl}, `extraStdio` from its fd 3 on;
 * with `asUser`, run as that uid and gid by setpriv (from root), as the Kubernetes manifests run it unprivileged.
 */
export function spawnSandboxMain(
  env: Record<string, string>,
  options: { extraStdio?: (IOType | number)[]; asUser?: { setprivPath: string; uid: number } } = {},
): ChildProcess {
  const { asUser } = options;
  const command = [
    ...(asUser !== undefined
      ? [
          asUser.setprivPath,
          `--reuid=${asUser.uid}`,
          `--regid=${asUser.uid}`,
          "--clear-groups",
          "--pdeathsig",
          "SIGKILL",
          "--",
        ]
      : []),
    process.execPath,
    MAIN,
  ];
  return spawn(command[0]!, command.slice(1), {
    env: { PATH: process.env.PATH ?? "", ...testCredentials.envFor("sandbox"), OZ0_PORT: "0", ...env },
    stdio: ["ignore", "ignore", "pipe", ...(options.extraStdio ?? [])],
  });
}

/** An unprivileged user for a sandbox that must not be root (nobody). */
export const UNPRIVILEGED_UID = 65534;

/** Why a sandbox cannot be run here as {@link UNPRIVILEGED_UID}; false when it can (root, with setpriv). */
export function unprivilegedSandboxSkip(): string | false {
  if (process.getuid?.() !== 0) return "running the sandbox as another user needs root";
  return findSetpriv() === undefined ? "needs setpriv" : false;
}

/**
 * The sandbox as the Kubernetes manifests run it: `dist/main.js` as an unprivileged user (nobody, by setpriv from
 * root), in a root of its own, with `env` besides; once it listens. `close` stops it and removes its root.
 */
export async function startUnprivilegedSandbox(env: Record<string, string>): Promise<{
  client: Client<typeof SandboxService>;
  /** Its log lines until it listened. */
  lines: string[];
  close(): Promise<void>;
}> {
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-unprivileged-"));
  chownSync(root, UNPRIVILEGED_UID, UNPRIVILEGED_UID);
  const child = spawnSandboxMain(
    { OZ0_SANDBOX_ROOT: root, ...env },
    { asUser: { setprivPath: findSetpriv()!, uid: UNPRIVILEGED_UID } },
  );
  const lines: string[] = [];
  const url = await listeningUrl(child, lines);
  return {
    client: createClient(SandboxService, createGrpcTransport({ baseUrl: url, interceptors: [testCredentials.caller] })),
    lines,
    async close() {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGTERM");
        await exited;
      }
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/**
 * The URL a sandbox process (`dist/main.js`) listens on, once its log says
 * so; its log lines are kept in `lines`. Throws with them when it exits first.
 */
export async function listeningUrl(child: ChildProcess, lines: string[]): Promise<string> {
  for await (const line of createInterface({ input: child.stderr! })) {
    lines.push(line);
    if (line.includes("sandbox listening")) {
      child.stderr!.resume();
      return (JSON.parse(line) as { url: string }).url;
    }
  }
  throw new Error(`the sandbox exited before listening:\n${lines.join("\n")}`);
}

/** A start message for the scenario harness in the given mode. */
export function scenarioStart(
  scenario: Record<string, unknown>,
  overrides: {
    command?: string[];
    pluginDir?: string;
    attachments?: {
      path: string;
      source: { case: "content"; value: Uint8Array } | { case: "nodePath"; value: string };
    }[];
    artifactPaths?: string[];
  } = {},
  request: Omit<MessageInitShape<typeof SessionRequestSchema>, "$typeName"> = {},
): MessageInitShape<typeof StartSessionSchema> {
  const sessionRequest = { jobId: "job-1", input: JSON.stringify(scenario), ...request } as MessageInitShape<
    typeof SessionRequestSchema
  >;
  return {
    command: [process.execPath, SCENARIO],
    pluginDir: FIXTURES,
    ...overrides,
    request: sessionRequest,
  } as MessageInitShape<typeof StartSessionSchema>;
}

/** A RunSession stream: push client messages, read server messages, drop it. */
export class SessionStream {
  readonly received: RunSessionResponse[] = [];
  readonly #abort = new AbortController();
  readonly #outbox: RunSessionRequest[] = [];
  #wakeOutbox: (() => void) | undefined;
  #closedOutbox = false;
  #waiters: (() => void)[] = [];
  #done = false;
  error: unknown;
  readonly finished: Promise<void>;

  constructor(client: Client<typeof SandboxService>, first: MessageInitShape<typeof RunSessionRequestSchema>) {
    this.#outbox.push(create(RunSessionRequestSchema, first));
    const responses = client.runSession(this.#requests(), { signal: this.#abort.signal });
    this.finished = (async () => {
      try {
        for await (const response of responses) {
          this.received.push(response);
          this.#wake();
        }
      } catch (error) {
        this.error = error;
      } finally {
        this.#done = true;
        this.#closedOutbox = true;
        this.#wakeOutbox?.();
        this.#wake();
      }
    })();
  }

  async *#requests(): AsyncGenerator<RunSessionRequest> {
    for (;;) {
      const next = this.#outbox.shift();
      if (next !== undefined) {
        yield next;
        continue;
      }
      if (this.#closedOutbox) return;
      await new Promise<void>((resolve) => (this.#wakeOutbox = resolve));
      this.#wakeOutbox = undefined;
    }
  }

  send(message: MessageInitShape<typeof RunSessionRequestSchema>): void {
    this.#outbox.push(create(RunSessionRequestSchema, message));
    this.#wakeOutbox?.();
  }

  /** Drops the stream as a crashed client would. */
  drop(): void {
    this.#abort.abort();
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
  }

  /** Waits until a received message satisfies `predicate` (or the stream ends: then throws). */
  async waitFor(predicate: (message: RunSessionResponse) => boolean, what: string): Promise<RunSessionResponse> {
    for (;;) {
      const found = this.received.find(predicate);
      if (found !== undefined) return found;
      if (this.#done)
        throw new Error(
          `the stream ended without ${what}: ${String(this.error ?? "")} after ${this.received.map((m) => m.message.case).join(",")}`,
        );
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
  }

  get sessionId(): string {
    return this.received.find((m) => m.sessionId !== "")?.sessionId ?? "";
  }

  exited(): Extract<RunSessionResponse["message"], { case: "exited" }>["value"] {
    const last = this.received.at(-1);
    if (last?.message.case !== "exited")
      throw new Error(`the last message is ${last?.message.case ?? "missing"}, not exited`);
    return last.message.value;
  }

  texts(): string[] {
    return this.received.flatMap((m) =>
      m.message.case === "event" && m.message.value.event.case === "text" ? [m.message.value.event.value.text] : [],
    );
  }
}

/** Starts a session and reads it to its end. */
export async function runToEnd(
  client: Client<typeof SandboxService>,
  start: MessageInitShape<typeof StartSessionSchema>,
): Promise<SessionStream> {
  const stream = new SessionStream(client, { message: { case: "start", value: start } });
  await stream.finished;
  return stream;
}

export function isText(text: string): (m: RunSessionResponse) => boolean {
  return (m) =>
    m.message.case === "event" && m.message.value.event.case === "text" && m.message.value.event.value.text === text;
}

export interface LogLine {
  level: string;
  fields: Record<string, unknown>;
  msg: string;
}

/** The sandbox's log, kept in memory. */
export function recordingLogger(): { logger: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const make = (): Logger => {
    const at = (level: string) => (fields: unknown, msg?: string) => {
      lines.push(
        typeof fields === "string"
          ? { level, fields: {}, msg: fields }
          : { level, fields: (fields ?? {}) as Record<string, unknown>, msg: msg ?? "" },
      );
    };
    return {
      trace: at("trace"),
      debug: at("debug"),
      info: at("info"),
      warn: at("warn"),
      error: at("error"),
      fatal: at("fatal"),
      child: make,
      level: "debug",
    } as unknown as Logger;
  };
  return { logger: make(), lines };
}

/** Whether someone holds an exclusive flock on `file` (a session uid's lock, session-uid-locks.ts). */
export function fileLocked(file: string): boolean {
  // LOCK_SH | LOCK_NB: refused only while another holds it exclusively. Exit 2: no such file, so nobody holds it.
  const tried = spawnSync("perl", ["-e", 'open(my $f, "<", $ARGV[0]) or exit 2; exit(flock($f, 5) ? 0 : 1)', file]);
  return tried.status === 1;
}

/** A process holding an exclusive flock on `file`, as a session's keeper holds its uid's `-kept` lock; resolves once it does. */
export async function lockHolder(file: string): Promise<ChildProcess> {
  const holder = spawn(
    "perl",
    ["-e", '$| = 1; my $f; open($f, ">>", $ARGV[0]) && flock($f, 6) or die "$!"; print "locked\\n"; sleep 600', file],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  const [line] = await once(createInterface({ input: holder.stdout! }), "line");
  if (line !== "locked") throw new Error(`could not lock ${file}`);
  return holder;
}
