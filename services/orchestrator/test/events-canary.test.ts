// needs: kafka
// The events canary on a live job (issue 7's acceptance): the real stack,
// the events service on the real Kafka broker, the fake harness and the
// scripted model. The job's task, the agent's instructions, an operation's
// instructions, an attached file (read back as a tool's output), a tool's
// input, the operations' tasks and structured
// results and the model's text each carry a unique marker. Each marker is
// seen flowing through the job, and none is on the Kafka topic (values and
// headers), in the Watch stream, in the Transcript or in the events
// service's log.
import { bearerInterceptor } from "@oz0/serving";
import assert from "node:assert/strict";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import { EventsService, OperationStatus } from "@oz0/proto/oz0/events/v1/events_pb";
import { Kafka, logLevel } from "kafkajs";
import { eventually, repoRoot, startTestStack, type TestStack } from "./support/test-stack.js";

const brokers = (process.env.KAFKA_BROKERS ?? "").split(",").filter(Boolean);
const topic = `oz0.canary.live.${Date.now()}`;
const marker = (what: string): string => `CANARY-${what}-${Math.random().toString(36).slice(2, 10)}`;
const M = {
  task: marker("TASK"),
  instructions: marker("INSTRUCTIONS"),
  operationInstructions: marker("OPINSTRUCTIONS"),
  file: marker("FILE"),
  toolInput: marker("TOOLINPUT"),
  extractTask: marker("EXTRACTTASK"),
  verifyTask: marker("VERIFYTASK"),
  result: marker("RESULT"),
  issue: marker("ISSUE"),
  scratchText: marker("SCRATCHTEXT"),
  text: marker("TEXT"),
};
/** What the model was shown, by marker: the proof that each one flowed through the job. */
const seen = new Set<string>();

function systemOf(request: ScriptedRequest): string {
  const system = request.body?.system as unknown;
  return typeof system === "string" ? system : JSON.stringify(system ?? "");
}

function pick({ turn, request }: { turn: number; request: ScriptedRequest }): ScriptedTurn {
  const everything = JSON.stringify(request.body ?? {});
  for (const value of Object.values(M)) if (everything.includes(value)) seen.add(value);
  const system = systemOf(request);
  if (system.includes("## Harness operation: extract_shipment")) {
    if (turn === 0)
      return {
        text: `Looking. ${M.scratchText}`,
        toolCalls: [{ name: "read_file", input: { path: "canary-notes.txt" } }],
      };
    return {
      text: JSON.stringify({
        shipmentReference: M.result,
        pickupCountry: "DE",
        deliveryCountry: "FR",
        sourceFiles: ["canary-notes.txt"],
      }),
    };
  }
  if (system.includes("## Harness operation: verify_shipment")) {
    return { text: JSON.stringify({ valid: false, issues: [M.issue] }) };
  }
  switch (turn) {
    case 0:
      return {
        toolCalls: [
          { name: "write_file", input: { path: "out.txt", content: M.toolInput } },
          { name: "run_command", input: { command: "cat canary-notes.txt" } },
        ],
      };
    case 1:
      return {
        toolCalls: [
          { name: "extract_shipment", input: { task: M.extractTask } },
          { name: "verify_shipment", input: { task: M.verifyTask } },
        ],
      };
    default:
      return { text: `Done. ${M.text}` };
  }
}

let t: TestStack;
let plugin: string;
before(async () => {
  assert.ok(brokers.length > 0, "KAFKA_BROKERS must point at a broker (npm test starts one)");
  // The shipments example, with markers in its instructions and an operation's instructions.
  // (Skills are left out: the fake harness never shows one to the model.)
  plugin = mkdtempSync(path.join(os.tmpdir(), "oz0-canary-plugin-"));
  cpSync(path.join(repoRoot, "examples", "plugins", "shipments"), plugin, { recursive: true });
  const prompt = path.join(plugin, "prompts", "orchestrator.md");
  writeFileSync(prompt, `${readFileSync(prompt, "utf8")}\n${M.instructions}\n`);
  const agent = path.join(plugin, "agents", "shipment-orchestrator.yaml");
  const yaml = readFileSync(agent, "utf8");
  assert.ok(yaml.includes("return only the structured shipment."));
  writeFileSync(
    agent,
    yaml.replace(
      "return only the structured shipment.",
      `return only the structured shipment. ${M.operationInstructions}`,
    ),
  );
  writeFileSync(path.join(plugin, "documents", "canary-notes.txt"), `Order notes: ${M.file}\n`);
  t = await startTestStack({
    pick: pick as never,
    eventsEnv: { KAFKA_BROKERS: brokers.join(","), OZ0_KAFKA_TOPIC: topic },
  });
});
after(async () => {
  await t.close();
  rmSync(plugin, { recursive: true, force: true });
});

void test("no marker of a live job's content reaches the Kafka topic, Watch, the Transcript or the events service's log", async () => {
  const installed = await t.cli(["plugin", "install", plugin]);
  assert.equal(installed.code, 0, installed.stdout + installed.stderr);
  const run = await t.cli([
    "run",
    "shipment-orchestrator",
    `Take order 4831. ${M.task}`,
    "--attach",
    path.join(plugin, "documents", "canary-notes.txt"),
  ]);
  assert.equal(run.code, 0, run.stdout + run.stderr);
  const jobId = /job (job_\w+) succeeded/.exec(run.stdout)?.[1];
  assert.ok(jobId, run.stdout);
  assert.match(run.stdout, new RegExp(M.text), "the model's text is the job's result");

  // Every marker flowed: shown to the model (task, instructions, file contents as a tool result,
  // tool input, operation tasks, structured results back to the parent, scratch text).
  const flowed = Object.values(M).filter((m) => m !== M.text);
  assert.deepEqual(
    flowed.filter((m) => !seen.has(m)),
    [],
    "markers the model never saw",
  );

  const events = createClient(
    EventsService,
    createGrpcTransport({ baseUrl: t.stack.urls.events, interceptors: [bearerInterceptor(t.stack.ownerToken)] }),
  );
  // The job's lifecycle, both operations included, is in the events service.
  const transcript = await eventually(async () => {
    const response = await events.transcript({ jobId });
    const rows = response.rows.flatMap((r) => (r.row.case === "operation" ? [r.row.value] : []));
    return rows.length === 2 && rows.every((row) => row.status === OperationStatus.COMPLETED) ? response : undefined;
  });
  const watched = [];
  for await (const response of events.watch({ jobId: "", fromPosition: 0n, untilCaughtUp: true }))
    if (response.event) watched.push(response.event);
  assert.ok(
    watched.filter((e) => e.jobId === jobId).length >= 10,
    `the job's events are on the Watch stream (${watched.length})`,
  );

  // The whole topic, once every event the service holds is on it.
  const kafka = new Kafka({ clientId: "oz0-canary", brokers, logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: `${topic}.reader`, maxWaitTimeInMs: 100 });
  const onTopic: string[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({
      eachMessage: async ({ message }) => {
        const headers = Object.entries(message.headers ?? {}).map(([k, v]) => `${k}=${String(v)}`);
        onTopic.push(`${message.key?.toString() ?? ""} ${headers.join(" ")} ${message.value?.toString() ?? ""}`);
      },
    });
    await eventually(async () => (onTopic.length >= watched.length ? true : undefined));
  } finally {
    await consumer.disconnect();
  }
  assert.ok(
    onTopic.some((m) => m.includes(jobId)),
    "the job's events are on the topic",
  );

  const bigints = (_: string, v: unknown): unknown => (typeof v === "bigint" ? String(v) : v);
  const places: Record<string, string> = {
    "the Kafka topic": onTopic.join("\n"),
    "the Watch stream": JSON.stringify(watched, bigints),
    "the Transcript": JSON.stringify(transcript, bigints),
    "the events service's log": readFileSync(path.join(t.home, "logs", "events.log"), "utf8"),
  };
  for (const [place, text] of Object.entries(places)) {
    for (const [what, value] of Object.entries(M))
      assert.ok(!text.includes(value), `${place} carries the ${what} marker`);
  }
});
