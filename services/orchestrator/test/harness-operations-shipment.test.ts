// The source document's shipment example end to end: the real stack (the four
// services as child processes), the fake harness and the scripted model. The
// orchestration agent asks for extract_shipment and verify_shipment in ONE
// model turn; each runs as a scratch session in the parent's live working
// directory (reading the attached documents), their results validate and go
// back to the parent, and the events service's Transcript shows two operation
// rows marked 2 parallel, with no task, result or document text in them.
import { bearerInterceptor } from "@oz0/serving";
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import { EventsService, OperationStatus } from "@oz0/proto/oz0/events/v1/events_pb";
import { eventually, repoRoot, startTestStack, type TestStack } from "./support/test-stack.js";

const plugin = path.join(repoRoot, "examples", "plugins", "shipments");
const documents = path.join(plugin, "documents");
const EXTRACT_TASK = "Extract order 4831 and cite the filenames used.";
const VERIFY_TASK = "Candidate: SHP-4831 from DE to FR. Check it against every source.";

function systemOf(request: ScriptedRequest): string {
  const system = request.body?.system as unknown;
  return typeof system === "string" ? system : JSON.stringify(system ?? "");
}

/** Every text the model was shown so far (tool results included). */
function shown(request: ScriptedRequest): string {
  return JSON.stringify(request.body?.messages ?? []);
}

// Each scratch loop's last turn waits until the other loop has reached its
// last turn too: if the runtime ran the two operations one after the other,
// this would never happen and the test would fail on its timeout.
let extractReady!: () => void;
let verifyReady!: () => void;
const extractAtLastTurn = new Promise<void>((r) => (extractReady = r));
const verifyAtLastTurn = new Promise<void>((r) => (verifyReady = r));
const scratchSaw: Record<string, string> = {};

async function pick({
  turn,
  request,
}: {
  input: string;
  turn: number;
  request: ScriptedRequest;
}): Promise<ScriptedTurn> {
  const system = systemOf(request);
  if (system.includes("## Harness operation: extract_shipment")) {
    if (turn === 0) return { toolCalls: [{ name: "read_file", input: { path: "booking-4831.txt" } }] };
    scratchSaw.extract = shown(request);
    extractReady();
    await verifyAtLastTurn;
    return {
      text: JSON.stringify({
        shipmentReference: "SHP-4831",
        pickupCountry: "DE",
        deliveryCountry: "FR",
        sourceFiles: ["booking-4831.txt"],
      }),
    };
  }
  if (system.includes("## Harness operation: verify_shipment")) {
    if (turn === 0) return { toolCalls: [{ name: "read_file", input: { path: "email-4831.txt" } }] };
    scratchSaw.verify = shown(request);
    verifyReady();
    await extractAtLastTurn;
    return { text: JSON.stringify({ valid: true, issues: [] }) };
  }
  // The parent: both operations in one turn, then an answer from their results.
  if (turn === 0) {
    return {
      toolCalls: [
        { name: "extract_shipment", input: { task: EXTRACT_TASK } },
        { name: "verify_shipment", input: { task: VERIFY_TASK } },
      ],
    };
  }
  scratchSaw.parent = shown(request);
  return { text: "Shipment SHP-4831 from DE to FR is verified." };
}

let t: TestStack;
before(async () => {
  t = await startTestStack({ pick: pick as unknown as Parameters<typeof startTestStack>[0]["pick"] });
});
after(async () => {
  await t.close();
});

void test("the shipment example: two operations in one turn run concurrently, validate, reach the parent, and show as 2 parallel", async () => {
  const installed = await t.cli(["plugin", "install", plugin]);
  assert.equal(installed.code, 0, installed.stdout + installed.stderr);
  const shownAgent = await t.cli(["agents", "show", "shipment-orchestrator", "--json"]);
  assert.equal(shownAgent.code, 0, shownAgent.stderr);
  assert.match(shownAgent.stdout, /extract_shipment/);
  assert.match(shownAgent.stdout, /verify_shipment/);

  const run = await t.cli([
    "run",
    "shipment-orchestrator",
    "Take order 4831",
    "--attach",
    path.join(documents, "booking-4831.txt"),
    "--attach",
    path.join(documents, "email-4831.txt"),
    "--attach",
    path.join(documents, "customers.csv"),
  ]);
  assert.equal(run.code, 0, run.stdout + run.stderr);
  assert.match(run.stdout, /Shipment SHP-4831 from DE to FR is verified\./);
  const jobId = /job (job_\w+) succeeded/.exec(run.stdout)?.[1];
  assert.ok(jobId, run.stdout);

  // The scratch loops read the parent's attached documents from its live working directory.
  assert.match(scratchSaw.extract!, /Booking ref: SHP-4831/);
  assert.match(scratchSaw.verify!, /pick up order 4831 in Hamburg/);
  // The parent's model got both validated results as tool results.
  assert.match(scratchSaw.parent!, /\\"shipmentReference\\":\\"SHP-4831\\"/);
  assert.match(scratchSaw.parent!, /\\"valid\\":true,\\"issues\\":\[\]/);

  const events = createClient(
    EventsService,
    createGrpcTransport({ baseUrl: t.stack.urls.events, interceptors: [bearerInterceptor(t.stack.ownerToken)] }),
  );
  const transcript = await eventually(async () => {
    const response = await events.transcript({ jobId });
    const rows = response.rows.flatMap((r) => (r.row.case === "operation" ? [r.row.value] : []));
    return rows.length === 2 && rows.every((row) => row.status === OperationStatus.COMPLETED)
      ? { response, rows }
      : undefined;
  });
  const { rows, response } = transcript;
  assert.deepEqual(rows.map((r) => r.title).sort(), ["Harness · extract_shipment", "Harness · verify_shipment"]);
  for (const row of rows) {
    assert.equal(row.parallelGroupSize, 2, "marked 2 parallel");
    assert.equal(row.resultValidation, "valid");
    assert.ok(row.toolCallId, "carries the owning tool-call id");
    assert.deepEqual(
      row.steps.map((s) => s.label),
      [
        "Requested read_file",
        `read_file ${row.operationKey === "extract_shipment" ? "booking-4831.txt" : "email-4831.txt"}`,
        "Returned the structured result for validation",
      ],
    );
  }
  assert.deepEqual(rows.map((r) => r.taskChars).sort(), [[...EXTRACT_TASK].length, [...VERIFY_TASK].length].sort());
  assert.equal(new Set(rows.map((r) => r.parallelGroupId)).size, 1);
  assert.deepEqual(rows.map((r) => r.parallelPosition).sort(), [1, 2]);
  const everything = JSON.stringify(response, (_, v: unknown) => (typeof v === "bigint" ? String(v) : v));
  for (const secret of [EXTRACT_TASK, "Candidate: SHP-4831", "Booking ref", "Hamburg", '"issues"']) {
    assert.ok(!everything.includes(secret), `the transcript leaks ${secret}`);
  }

  // The same transcript through the orchestrator, as `oz0 jobs transcript` shows it: two operation rows in one "2 parallel" group.
  const shown = await t.cli(["jobs", "transcript", jobId]);
  assert.equal(shown.code, 0, shown.stderr);
  const operations = shown.stdout.split("\n").filter((line) => line.includes("Harness · "));
  assert.deepEqual(
    operations.map((line) => /Harness · (\w+)/.exec(line)?.[1]).sort(),
    ["extract_shipment", "verify_shipment"],
    shown.stdout,
  );
  for (const line of operations) {
    assert.match(
      line,
      /┃ Harness · \w+ · completed in \d+\.\d{3} s · task \d+ chars · timeout \d+\.000 s · result valid .*· [12] of 2 parallel$/,
    );
  }
  assert.equal(shown.stdout.split("\n").filter((line) => /┃ 2 parallel$/.test(line)).length, 1, shown.stdout);
  assert.match(
    shown.stdout,
    /┃ {3}\+\d+\.\d{3}s tool {2}read_file booking-4831\.txt/,
    "each operation's safe steps below it",
  );
  assert.match(shown.stdout, /job\.created /);
  for (const secret of [EXTRACT_TASK, "Candidate: SHP-4831", "Booking ref", "Hamburg"])
    assert.ok(!shown.stdout.includes(secret), `oz0 jobs transcript leaks ${secret}`);
  // --json keeps the API's form.
  const json = JSON.parse((await t.cli(["jobs", "transcript", jobId, "--json"])).stdout) as {
    jobId: string;
    rows: { operation?: { title: string; parallelGroupSize: number } }[];
  };
  assert.equal(json.jobId, jobId);
  assert.deepEqual(
    json.rows.flatMap((r) => (r.operation ? [`${r.operation.title} ${r.operation.parallelGroupSize}`] : [])).sort(),
    ["Harness · extract_shipment 2", "Harness · verify_shipment 2"],
  );
});

void test("changing an operation publishes a new version; the older one keeps its exact definition", async (ctx) => {
  const { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } = await import("node:fs");
  const os = await import("node:os");
  const copy = mkdtempSync(path.join(os.tmpdir(), "oz0-shipments-"));
  ctx.after(() => rmSync(copy, { recursive: true, force: true }));
  cpSync(plugin, copy, { recursive: true });
  const file = path.join(copy, "agents", "shipment-orchestrator.yaml");
  writeFileSync(file, readFileSync(file, "utf8").replace("timeout_ms: 60000", "timeout_ms: 45000"));
  const installed = await t.cli(["plugin", "install", copy]);
  assert.equal(installed.code, 0, installed.stdout + installed.stderr);
  const versions = /published agent shipment-orchestrator v(\d+)/.exec(installed.stdout);
  assert.ok(versions, installed.stdout);
  const latest = Number(versions[1]);
  const older = await t.cli(["agents", "show", "shipment-orchestrator", "--version", String(latest - 1)]);
  const newer = await t.cli(["agents", "show", "shipment-orchestrator", "--version", String(latest)]);
  assert.match(older.stdout, /key: verify_shipment[\s\S]*timeout_ms: 60000/);
  assert.doesNotMatch(older.stdout, /45000/);
  assert.match(newer.stdout, /key: verify_shipment[\s\S]*timeout_ms: 45000/);
});

void test("publication refuses an operation past a limit, naming the operation and the rule", async (ctx) => {
  const { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } = await import("node:fs");
  const os = await import("node:os");
  const copy = mkdtempSync(path.join(os.tmpdir(), "oz0-shipments-bad-"));
  ctx.after(() => rmSync(copy, { recursive: true, force: true }));
  cpSync(plugin, copy, { recursive: true });
  const file = path.join(copy, "agents", "shipment-orchestrator.yaml");
  writeFileSync(file, readFileSync(file, "utf8").replace("timeout_ms: 60000", "timeout_ms: 300001"));
  const refused = await t.cli(["plugin", "install", copy]);
  assert.notEqual(refused.code, 0);
  assert.match(
    refused.stderr,
    /agents\/shipment-orchestrator\.yaml: field \/harness_operations\/1 \(operation "verify_shipment"\): timeout_ms must be a whole number of milliseconds from 1,000 to 300,000 \(got 300001\)/,
  );
});
