// One tool call waiting for a person: what it wants to do, for whom, how long
// it has waited; approve, approve with an edited input, or deny with a
// reason, for people with the approver role (the API refuses everyone else
// anyway). The input shown, and the one Edit starts from, is the input an
// approval runs (`input_to_run`): a hook may have changed the harness's,
// which is then shown beside it, marked as changed.
import { useId, useState } from "preact/hooks";
import type { JsonObject } from "@bufbuild/protobuf";
import type { Approval } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { jobs, messageOf } from "../api.js";
import { clock, dateOf, duration, json, visible, visibleExactly } from "../format.js";
import { href } from "../router.js";

/** `now`: the page's one clock (useNow), shared by every card, so a long queue does not run a timer per card. */
export function ApprovalCard({
  approval,
  canAnswer,
  onAnswered,
  now,
}: {
  approval: Approval;
  canAnswer: boolean;
  onAnswered: () => void;
  now: number;
}) {
  const [reason, setReason] = useState("");
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | undefined>(undefined);
  const [edited, setEdited] = useState<string | undefined>(undefined);
  const requested = dateOf(approval.requestedAt);
  const deadline = dateOf(approval.deadline);
  // Not made of the call id: a harness picks it, two jobs may use one (the fake harness numbers them), and a space
  // in it makes aria-labelledby name other elements.
  const titleId = useId();
  // What Approve runs; an older orchestrator sends no input_to_run, and runs the harness's input.
  const inputToRun = approval.inputToRun ?? approval.input;
  const answer = async (allow: boolean, input?: JsonObject): Promise<void> => {
    setBusy(true);
    setProblem(undefined);
    try {
      await jobs.answerPermission({
        jobId: approval.jobId,
        callId: approval.callId,
        allow,
        reason: reason.trim(),
        ...(input ? { input } : {}),
      });
      onAnswered();
    } catch (error) {
      setProblem(messageOf(error));
    } finally {
      setBusy(false);
    }
  };
  return (
    <article class="approval" aria-labelledby={titleId} data-call={approval.callId}>
      <h2 id={titleId}>
        <code>{visibleExactly(approval.tool)}</code>{" "}
        {approval.title ? <span class="muted">{visible(approval.title)}</span> : null}
      </h2>
      <dl class="facts">
        <dt>Agent</dt>
        <dd>
          {approval.agent?.name} v{approval.agent?.version}
        </dd>
        <dt>Job</dt>
        <dd>
          <a href={href({ page: "job", jobId: approval.jobId })}>{approval.jobId}</a>
        </dd>
        <dt>Waiting</dt>
        <dd>{requested ? `${duration(now - requested.getTime())} (since ${clock(requested)})` : ""}</dd>
        <dt>Deadline</dt>
        <dd>{deadline ? clock(deadline) : "none: it waits until answered"}</dd>
        {approval.approvers.length > 0 ? (
          <>
            <dt>Who may answer</dt>
            <dd>{approval.approvers.join(", ")}</dd>
          </>
        ) : null}
      </dl>
      <pre class="input" aria-label="Input">
        {json(inputToRun)}
      </pre>
      {approval.inputChangedBy ? (
        <div class="input-changed" data-testid="input-changed">
          <p>
            Input changed by <strong>{visible(approval.inputChangedBy)}</strong>: the call runs with the input above,
            not with the one the harness asked for:
          </p>
          <pre class="input" aria-label="Input the harness asked for">
            {json(approval.input)}
          </pre>
        </div>
      ) : null}
      {canAnswer ? (
        <form
          class="answer"
          onSubmit={(e) => {
            e.preventDefault();
          }}
        >
          <label>
            Reason{" "}
            <input
              type="text"
              value={reason}
              placeholder="shown to the model when denied"
              onInput={(e) => setReason((e.target as HTMLInputElement).value)}
            />
          </label>
          <button type="button" class="approve" disabled={busy} onClick={() => void answer(true)}>
            Approve
          </button>
          <button type="button" class="deny" disabled={busy} onClick={() => void answer(false)}>
            Deny
          </button>
          {edited === undefined ? (
            <button type="button" disabled={busy} onClick={() => setEdited(json(inputToRun))}>
              Edit input…
            </button>
          ) : null}
          {edited !== undefined ? (
            <div class="edit-input">
              <label>
                Input to run instead (JSON)
                <textarea
                  rows={Math.min(12, edited.split("\n").length + 1)}
                  value={edited}
                  onInput={(e) => setEdited((e.target as HTMLTextAreaElement).value)}
                />
              </label>
              <button
                type="button"
                class="approve"
                disabled={busy}
                onClick={() => {
                  const input = parseObject(edited);
                  if (input) void answer(true, input);
                  else setProblem("the edited input is not a JSON object");
                }}
              >
                Approve with this input
              </button>{" "}
              <button type="button" disabled={busy} onClick={() => setEdited(undefined)}>
                Keep the input above
              </button>
            </div>
          ) : null}
        </form>
      ) : (
        <p class="muted">You can see this request; answering it needs the approver role.</p>
      )}
      {problem ? (
        <p role="alert" class="error">
          {problem}
        </p>
      ) : null}
    </article>
  );
}

function parseObject(text: string): JsonObject | undefined {
  try {
    const value = JSON.parse(text) as unknown;
    return value && typeof value === "object" && !Array.isArray(value) ? (value as JsonObject) : undefined;
  } catch {
    return undefined;
  }
}
