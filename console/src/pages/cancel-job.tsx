// Cancelling a job from its page: one click opens the question (with a
// reason, as `oz0 jobs cancel --reason` takes), a second cancels. A cancel
// cannot be taken back and stops an agent mid-work, so a stray click on the
// job page must not do it.
import { useState } from "preact/hooks";
import type { Job } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { jobs, messageOf } from "../api.js";

/** The reason a cancel from the console gives when the person gives none. */
export const DEFAULT_CANCEL_REASON = "cancelled in the console";

export function CancelJob({ jobId, onCancelled }: { jobId: string; onCancelled: (job: Job) => void }) {
  const [asking, setAsking] = useState(false);
  const [reason, setReason] = useState("");
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | undefined>(undefined);
  const cancel = async (): Promise<void> => {
    setBusy(true);
    try {
      const answer = await jobs.cancelJob({ jobId, reason: reason.trim() || DEFAULT_CANCEL_REASON });
      if (answer.job) onCancelled(answer.job);
      setAsking(false);
    } catch (error) {
      setProblem(messageOf(error));
    } finally {
      setBusy(false);
    }
  };
  if (!asking)
    return (
      <button type="button" class="deny" onClick={() => setAsking(true)}>
        Cancel job…
      </button>
    );
  return (
    <form
      class="answer"
      aria-label="Cancel this job"
      onSubmit={(e) => {
        e.preventDefault();
        void cancel();
      }}
    >
      <p>Cancel this job? Its session is stopped and what it changed so far is kept; this cannot be undone.</p>
      <label>
        Reason{" "}
        <input
          type="text"
          value={reason}
          placeholder={DEFAULT_CANCEL_REASON}
          onInput={(e) => setReason((e.target as HTMLInputElement).value)}
        />
      </label>
      <button type="submit" class="deny" disabled={busy}>
        Cancel job
      </button>{" "}
      <button
        type="button"
        disabled={busy}
        onClick={() => {
          // Asked again later, the question starts afresh: no reason or error of this one.
          setAsking(false);
          setReason("");
          setProblem(undefined);
        }}
      >
        Keep it running
      </button>
      {problem ? (
        <p role="alert" class="error">
          {problem}
        </p>
      ) : null}
    </form>
  );
}
