// Runtime tools the orchestrator serves some jobs itself (a graph's manager
// agent gets its decision tools this way). Offering them is the
// orchestrator's decision, so their calls are allowed without the tool
// policy. A job names its set (`JobRecord.servedTools`), so any replica that
// runs it, after a restart or a takeover, serves it alike. Each call and its
// answer are recorded as the job's `servedToolCall` event before the answer
// reaches the session; that record is what was decided.
import { create, fromJson, type JsonObject as ProtoJsonObject } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { RuntimeToolResultSchema, type RuntimeTool, type RuntimeToolCall } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { ServedToolCallSchema, type ServedToolCall } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { SessionChannel } from "../sessions/session-runner.js";
import type { JobStore } from "../store/job-store.js";
import type { JobEventInit } from "./job-events.js";

export interface ServedRuntimeTools {
  tools: RuntimeTool[];
  /** The answer to a call, from the call and the job's earlier served calls (oldest first) only. */
  answer(
    call: { name: string; input: ProtoJsonObject },
    earlier: readonly ServedToolCall[],
  ): { output: ProtoJsonObject } | { error: string };
}

/** The served runtime tool calls of a job and their answers, oldest first (from its events). */
export async function servedToolCalls(store: JobStore, jobId: string): Promise<ServedToolCall[]> {
  const calls: ServedToolCall[] = [];
  for (let after = 0; ;) {
    const page = await store.listJobEvents(jobId, after, 500);
    for (const e of page) if (e.event.case === "servedToolCall") calls.push(e.event.value);
    if (page.length < 500) return calls;
    after = Number(page[page.length - 1]!.seq);
  }
}

/**
 * Answers a call of a served runtime tool. Recorded (`record`, as the job's
 * event) before the answer is written and before the session's position
 * moves past the call: a crash in between sees the call again and sends the
 * recorded answer, so the answer is decided once, whichever replica runs the job.
 */
export async function answerServedCall(o: {
  store: JobStore;
  jobId: string;
  served: ServedRuntimeTools;
  call: RuntimeToolCall;
  channel: SessionChannel | undefined;
  record(event: JobEventInit): Promise<unknown>;
}): Promise<void> {
  const earlier = await servedToolCalls(o.store, o.jobId);
  let record = earlier.find((r) => r.callId === o.call.id);
  if (!record) {
    const answer = o.served.answer({ name: o.call.name, input: o.call.input ?? {} }, earlier);
    record = create(ServedToolCallSchema, {
      callId: o.call.id,
      tool: o.call.name,
      input: o.call.input ?? {},
      ...("output" in answer ? { output: fromJson(ValueSchema, answer.output) } : { error: answer.error }),
    });
    await o.record({ event: { case: "servedToolCall", value: record } });
  }
  await sendServedAnswer(o.channel, record);
}

/** Writes a recorded answer to the session. */
export async function sendServedAnswer(channel: SessionChannel | undefined, record: ServedToolCall): Promise<void> {
  await channel?.answerRuntimeTool(
    create(
      RuntimeToolResultSchema,
      record.error
        ? { id: record.callId, isError: true, error: record.error }
        : { id: record.callId, ...(record.output ? { output: record.output } : {}) },
    ),
  );
}
