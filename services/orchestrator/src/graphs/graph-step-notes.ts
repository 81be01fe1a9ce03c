// The lines a graph job's events show for its steps (`▸ agent:writer /0/b1
// started`, `✓ … finished, set output`), written by graph-jobs.ts and read
// back by job-activity.ts to know which steps run now. One module holds the
// format both ways, so the reader cannot drift from the writer.

export type StepNoteKind = "started" | "finished" | "replayed" | "failed";

const MARK: Record<StepNoteKind, string> = { started: "▸", finished: "✓", replayed: "↺", failed: "✗" };
const VERB: Record<StepNoteKind, string> = {
  started: "started",
  finished: "finished",
  replayed: "already recorded, not run again",
  failed: "failed",
};

/** Where a step is: its node id, its path, and its loop iteration when there is one. */
export function stepWhere(step: {
  nodeId?: string | undefined;
  path?: string | undefined;
  iteration?: number | undefined;
}): string {
  return `${step.nodeId ?? ""} ${step.path ?? ""}${step.iteration ? ` (iteration ${step.iteration})` : ""}`;
}

/** `detail` follows the verb as written (`, set output`, `: the error`). */
export function stepNote(kind: StepNoteKind, where: string, detail = ""): string {
  return `${MARK[kind]} ${where} ${VERB[kind]}${detail}\n`;
}

const NOTE = new RegExp(
  `^(${Object.values(MARK).join("|")}) (.*?) (${Object.values(VERB)
    .map((v) => v.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
    .join("|")})`,
);

/** The step a note is about, or undefined for any other line. */
export function readStepNote(text: string): { kind: StepNoteKind; where: string } | undefined {
  const match = NOTE.exec(text);
  if (!match) return undefined;
  const kind = (Object.keys(MARK) as StepNoteKind[]).find((k) => MARK[k] === match[1] && VERB[k] === match[3]);
  return kind ? { kind, where: match[2]! } : undefined;
}

/**
 * A step's id on lifecycle events (graph_step_id): node id and path, in the characters the events service keeps.
 * The registry refuses a graph whose longest one the events service would clear (graph-registry.ts).
 */
export function stepIdOf(event: { nodeId?: string; path?: string }): string {
  return `${event.nodeId ?? ""}@${(event.path ?? "").replace(/^\//, "").replaceAll("/", ".")}`;
}
