// The redaction policy, type by type: what each keeps, and that it fails
// closed on everything else.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { EVENT_POLICY, FINISH_SUMMARY, publicAttributes, redactEvent } from "@oz0/events";
import { LIFECYCLE_TYPES, type LifecycleType, rawEvent, type RawEventInit } from "@oz0/events-client";
import type { PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { foreignEvent } from "./fixtures/foreign-event.js";

const SECRET = "s3cr3t-content";
// Everything sensitive a producer might attach to any event.
const sensitive = {
  task: `do the thing ${SECRET}`,
  instructions: SECRET,
  prompt: SECRET,
  system_prompt: SECRET,
  text: SECRET,
  thinking: SECRET,
  input: { command: SECRET },
  output: SECRET,
  result: { answer: SECRET },
  content: SECRET,
  skills: [{ content: SECRET }],
  documents: [{ content: SECRET }],
  error_message: SECRET,
  reason: SECRET,
  message: SECRET,
  label: SECRET,
  title: SECRET,
};

function redact(type: LifecycleType, init: RawEventInit = {}): PublicEvent {
  const outcome = redactEvent(
    rawEvent(type, { jobId: "job-1", ...init, attributes: { ...sensitive, ...init.attributes } }),
  );
  assert.ok(outcome.ok, `${type} was refused`);
  assert.ok(!JSON.stringify(outcome.event.attributes).includes(SECRET), `${type} kept sensitive content`);
  for (const key of Object.keys(outcome.event.attributes ?? {})) {
    assert.ok(publicAttributes(type).includes(key), `${type} kept ${key}, which its allowlist does not name`);
  }
  return outcome.event;
}

void describe("the redaction policy", () => {
  // The compiler holds the policy to the list (a Record<LifecycleType, …>);
  // this says so at run time too, for a build that skipped the check.
  // Whether producers send each type: sdk/events-client/test/producers.test.ts.
  void test("has an allowlist for exactly the lifecycle types of @oz0/events-client's list", () => {
    assert.deepEqual(Object.keys(EVENT_POLICY).sort(), [...LIFECYCLE_TYPES].sort());
  });

  for (const type of LIFECYCLE_TYPES) {
    void test(`${type} drops every sensitive attribute`, () => {
      redact(type);
    });
  }

  void test("job.created keeps the task's character count, never the task", () => {
    const event = redact("job.created", {
      attributes: { task: "héllo wörld 🙂", harness: "claude", timeout_ms: 600000 },
    });
    assert.deepEqual(event.attributes, { harness: "claude", task_chars: 13, timeout_ms: 600000 });
  });

  void test("job.completed keeps stop reason and timing", () => {
    const event = redact("job.completed", {
      status: "completed",
      attributes: { stop_reason: "completed", duration_ms: 1234, turns: 7 },
    });
    assert.deepEqual(event.attributes, { stop_reason: "completed", duration_ms: 1234, turns: 7 });
    assert.equal(event.status, "completed");
  });

  void test("session.started and session.ended keep harness, node and exit facts", () => {
    assert.deepEqual(
      redact("session.started", { attributes: { harness: "claude", node: "node-1", isolation: "bwrap" } }).attributes,
      {
        harness: "claude",
        node: "node-1",
        isolation: "bwrap",
      },
    );
    assert.deepEqual(
      redact("session.ended", { attributes: { exit_code: 137, signal: "SIGKILL", stop_reason: "cancelled" } })
        .attributes,
      {
        exit_code: 137,
        signal: "SIGKILL",
        stop_reason: "cancelled",
      },
    );
  });

  void test("tool events keep the tool, its path and a label composed from them", () => {
    const called = redact("tool.called", { attributes: { tool_name: "read", path: "src/app.ts" } });
    assert.deepEqual(called.attributes, { tool_name: "read", path: "src/app.ts", label: "read src/app.ts" });
    const decided = redact("permission.decided", {
      attributes: { tool_name: "bash", decision: "deny", decided_by: "hook", hook: "no-rm", input_changed: false },
    });
    assert.deepEqual(decided.attributes, {
      tool_name: "bash",
      label: "bash",
      decision: "deny",
      decided_by: "hook",
      hook: "no-rm",
      input_changed: false,
    });
  });

  void test("attributes arrive as JSON text (rawEvent) or as a Struct (an older producer); the text wins, and one that is not an object is none", () => {
    const text = rawEvent("tool.called", { jobId: "job-1", attributes: { tool_name: "read", output: SECRET } });
    assert.equal(text.attributes, undefined);
    const struct = { ...text, attributesJson: "", attributes: { tool_name: "edit", input: { command: SECRET } } };
    const both = { ...text, attributes: { tool_name: "edit" } };
    const publicOf = (raw: typeof text): unknown => {
      const outcome = redactEvent(raw);
      assert.ok(outcome.ok);
      return outcome.event.attributes;
    };
    assert.deepEqual(publicOf(text), { tool_name: "read", label: "read" });
    assert.deepEqual(publicOf(struct), { tool_name: "edit", label: "edit" });
    assert.deepEqual(publicOf(both), { tool_name: "read", label: "read" });
    for (const attributesJson of ["[1]", "null", '"read"', "{not json", "42"])
      assert.deepEqual(publicOf({ ...text, attributesJson }), {}, attributesJson);
  });

  void test("approvals keep ids, the tool and waiting time", () => {
    assert.deepEqual(
      redact("approval.requested", { attributes: { approval_id: "ap-1", tool_name: "deploy", timeout_ms: 60000 } })
        .attributes,
      {
        approval_id: "ap-1",
        tool_name: "deploy",
        timeout_ms: 60000,
      },
    );
    assert.deepEqual(
      redact("approval.answered", { attributes: { approval_id: "ap-1", decision: "allow", waited_ms: 900 } })
        .attributes,
      {
        approval_id: "ap-1",
        decision: "allow",
        waited_ms: 900,
      },
    );
  });

  void test("llm.call_completed keeps provider, model and token counts", () => {
    const event = redact("llm.call_completed", {
      tokens: { inputTokens: 10, outputTokens: 20, cacheReadTokens: 3, cacheWriteTokens: 4 },
      attributes: { provider: "anthropic", model: "claude-sonnet-4-5", attempts: 2, latency_ms: 800 },
    });
    assert.deepEqual(event.attributes, {
      provider: "anthropic",
      model: "claude-sonnet-4-5",
      attempts: 2,
      latency_ms: 800,
    });
    assert.equal(event.tokens?.inputTokens, 10);
    assert.equal(event.tokens?.cacheWriteTokens, 4);
  });

  void test("what the producers send today keeps its safe fields", () => {
    // The LLM proxy's usage event (services/llm-proxy/src/usage-sink.ts).
    const usage = redact("llm.call_completed", {
      tokens: { inputTokens: 7 },
      attributes: {
        operation_id: "op-1",
        provider: "anthropic",
        model: "claude-x",
        wire: "anthropic_messages",
        stream: true,
        http_status: 200,
        attempts: 1,
        reasoning_tokens: 0,
        cost_usd: 0.0042,
        latency_ms: 812,
        ttft_ms: 120,
        estimated: false,
      },
    });
    assert.deepEqual(usage.attributes, {
      operation_id: "op-1",
      provider: "anthropic",
      model: "claude-x",
      wire: "anthropic_messages",
      stream: true,
      http_status: 200,
      attempts: 1,
      reasoning_tokens: 0,
      cost_usd: 0.0042,
      latency_ms: 812,
      ttft_ms: 120,
      estimated: false,
    });
    // The sandbox's session end, with a proto enum number as stop reason.
    assert.deepEqual(redact("session.ended", { attributes: { error_code: "", stop_reason: 1, turns: 3 } }).attributes, {
      stop_reason: 1,
      turns: 3,
    });
    // The orchestrator's names: harness_name, decider.
    assert.deepEqual(redact("session.started", { attributes: { harness_name: "claude" } }).attributes, {
      harness: "claude",
    });
    assert.deepEqual(
      redact("permission.decided", {
        status: "allowed",
        attributes: { tool_name: "read", decider: "hook", input: { path: SECRET } },
      }).attributes,
      {
        tool_name: "read",
        label: "read",
        decided_by: "hook",
      },
    );
    assert.deepEqual(redact("job.created", { attributes: { task: "abc" } }).attributes, { task_chars: 3 });
  });

  void test("harness.operation_started keeps key, task character count and timeout", () => {
    const event = redact("harness.operation_started", {
      operationInvocationId: "inv-1",
      toolCallId: "call-1",
      attributes: { operation_key: "extract_shipment", task: "Extract order 4831", timeout_ms: 120000 },
    });
    assert.deepEqual(event.attributes, { operation_key: "extract_shipment", task_chars: 18, timeout_ms: 120000 });
    assert.equal(event.operationInvocationId, "inv-1");
  });

  void test("a model step is summarised only by the tool it requested, or by finishing", () => {
    const requested = redact("harness.operation_step", {
      attributes: { step_kind: "model", step_index: 0, requested_tool: "read" },
    });
    assert.deepEqual(requested.attributes, {
      step_index: 0,
      step_kind: "model",
      label: "Requested read",
      requested_tool: "read",
    });
    const finished = redact("harness.operation_step", {
      attributes: { step_kind: "model", step_index: 3, finish: true },
    });
    assert.deepEqual(finished.attributes, { step_index: 3, step_kind: "model", label: FINISH_SUMMARY, finish: true });
    const neither = redact("harness.operation_step", { attributes: { step_kind: "model" } });
    assert.equal(neither.attributes?.label, "Model turn");
  });

  void test("a tool step keeps the tool and the path it touched", () => {
    const event = redact("harness.operation_step", {
      attributes: { step_kind: "tool", step_index: 1, tool_name: "read", path: "uploads/order.pdf", duration_ms: 4 },
    });
    assert.deepEqual(event.attributes, {
      step_index: 1,
      step_kind: "tool",
      label: "read uploads/order.pdf",
      tool_name: "read",
      path: "uploads/order.pdf",
      duration_ms: 4,
    });
  });

  void test("operation ends keep key, timing, error code and validation state, never the result", () => {
    assert.deepEqual(
      redact("harness.operation_completed", {
        attributes: { operation_key: "x", duration_ms: 10, result_validation: "invalid" },
      }).attributes,
      {
        operation_key: "x",
        duration_ms: 10,
        result_validation: "valid",
      },
    );
    assert.deepEqual(
      redact("harness.operation_failed", {
        attributes: { operation_key: "x", error_code: "RESULT_INVALID", result_validation: "invalid" },
      }).attributes,
      {
        operation_key: "x",
        error_code: "RESULT_INVALID",
        result_validation: "invalid",
      },
    );
    assert.deepEqual(
      redact("harness.operation_timed_out", { attributes: { operation_key: "x", timeout_ms: 1000, duration_ms: 1001 } })
        .attributes,
      {
        operation_key: "x",
        timeout_ms: 1000,
        duration_ms: 1001,
      },
    );
  });

  void test("graph events keep step names, kinds and counters", () => {
    assert.deepEqual(
      redact("graph.run_started", { attributes: { graph_name: "intake", graph_version: "2" } }).attributes,
      { graph_name: "intake", graph_version: "2" },
    );
    assert.deepEqual(
      redact("graph.step_completed", {
        attributes: { step_name: "verify", step_kind: "agent", iteration: 2, branch: "ok", duration_ms: 3 },
      }).attributes,
      {
        step_name: "verify",
        step_kind: "agent",
        iteration: 2,
        branch: "ok",
        duration_ms: 3,
      },
    );
  });

  void test("a path is portable file name characters between slashes: prose written into one is dropped", () => {
    const leak = `Extract order 4831 for ACME Corp, ship to 12 Main St; result: {"shipmentReference":"4831"}`;
    for (const path of [leak, "notes for alice.txt", "a//b", "résumé.pdf", "x".repeat(256), `a/${"b/".repeat(300)}c`]) {
      const step = redact("harness.operation_step", {
        attributes: { step_kind: "tool", step_index: 1, tool_name: "read_file", path },
      });
      assert.equal(step.attributes?.path, undefined, path);
      assert.equal(step.attributes?.label, "read_file", "the label names the tool alone");
    }
    for (const path of ["uploads/order.pdf", "/work/src/app.ts", "src/", ".env.example", "a/b-c_d.e"])
      assert.equal(redact("tool.called", { attributes: { tool_name: "read", path } }).attributes?.path, path);
  });

  void test("a session token in a path or an identifier is dropped: a session can read its own", () => {
    const token = "oz0st_Zm9vYmFyYmF6cXV4Zm9vYmFyYmF6cXV4Zm9vYmFy";
    for (const path of [`notes/${token}.txt`, token, `/tmp/x-${token.toUpperCase()}`]) {
      const step = redact("harness.operation_step", {
        attributes: { step_kind: "tool", step_index: 1, tool_name: "read_file", path },
      });
      assert.equal(step.attributes?.path, undefined, path);
      assert.equal(step.attributes?.label, "read_file");
    }
    assert.deepEqual(redact("tool.called", { attributes: { tool_name: token } }).attributes, {});
    assert.equal(
      redact("tool.called", { attributes: { tool_name: "read", path: "oz0/st.txt" } }).attributes?.path,
      "oz0/st.txt",
    );
  });

  void test("values that are not what the allowlist expects are dropped", () => {
    const event = redact("tool.called", { attributes: { tool_name: "read this secret file please", path: "a\nb" } });
    assert.deepEqual(event.attributes, {});
    const counts = redact("harness.operation_started", {
      attributes: { operation_key: "Not A Key", timeout_ms: -5, task: 42 },
    });
    assert.deepEqual(counts.attributes, {});
  });

  void test("an unknown type keeps only its envelope and says so", () => {
    const outcome = redactEvent(
      foreignEvent("custom.happened", {
        jobId: "job-1",
        status: "completed",
        tokens: { inputTokens: 5 },
        attributes: { ...sensitive, tool_name: "read" },
      }),
    );
    assert.ok(outcome.ok);
    assert.equal(outcome.event.reduced, true);
    assert.deepEqual(outcome.event.attributes, {});
    assert.equal(outcome.event.status, "completed");
    assert.equal(outcome.event.tokens?.inputTokens, 5);
  });

  void test("envelope fields that are not identifiers are cleared, not copied", () => {
    const outcome = redactEvent(
      rawEvent("job.created", {
        jobId: `job with ${SECRET}`,
        sessionId: "s-1",
        agentName: `agent ${SECRET}`,
        status: `failed: ${SECRET}`,
        traceparent: SECRET,
        source: "orchestrator",
      }),
    );
    assert.ok(outcome.ok);
    assert.equal(outcome.event.jobId, "");
    assert.equal(outcome.event.agentName, "");
    assert.equal(outcome.event.status, "");
    assert.equal(outcome.event.traceparent, "");
    assert.equal(outcome.event.sessionId, "s-1");
    assert.equal(outcome.event.source, "orchestrator");
  });

  void test("a malformed id or type is refused", () => {
    assert.deepEqual(redactEvent(rawEvent("job.created", { id: "has spaces" })), {
      ok: false,
      code: "EVENT_ID_INVALID",
    });
    assert.deepEqual(redactEvent(foreignEvent("Job Started")), { ok: false, code: "EVENT_TYPE_INVALID" });
    assert.deepEqual(redactEvent(foreignEvent("nodot")), { ok: false, code: "EVENT_TYPE_INVALID" });
  });

  void test("a valid traceparent is kept", () => {
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const outcome = redactEvent(rawEvent("job.created", { traceparent }));
    assert.ok(outcome.ok);
    assert.equal(outcome.event.traceparent, traceparent);
  });
});
