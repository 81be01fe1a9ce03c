// The job's artifacts; a patch is shown as a diff (added and removed lines
// marked by colour and by their +/- prefix, so the meaning never rests on
// colour alone), any other text as is. A patch is code a model wrote, read
// here before it is applied: it is shown as exactly as a tool's input is
// (every character a page draws as nothing an escape, left to right whatever
// its letters), so it cannot read as another patch.
import type { Artifact } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { count, visible, visibleExactly } from "../format.js";

/** Lines beyond this are left out of the page (the artifact is whole on disk). */
const MAX_LINES = 2_000;

export function ArtifactsView({
  artifacts,
  contents,
}: {
  artifacts: readonly Artifact[];
  contents: readonly Uint8Array[];
}) {
  const decoder = new TextDecoder();
  return (
    <>
      {artifacts.map((artifact, i) => {
        const content = contents[i];
        return (
          <section key={artifact.name} class="artifact" aria-label={`Artifact ${artifact.name}`}>
            <h3>
              {visible(artifact.name)}{" "}
              <span class="muted">
                ({count(artifact.sizeBytes)} bytes, {artifact.mediaType || "unknown type"})
              </span>
            </h3>
            {content === undefined ? (
              <p class="muted">Not read (too large for the page).</p>
            ) : isPatch(artifact) ? (
              <Diff text={decoder.decode(content)} />
            ) : (
              <pre class="prose">{visible(decoder.decode(content.subarray(0, 200_000)))}</pre>
            )}
          </section>
        );
      })}
    </>
  );
}

export function isPatch(artifact: Artifact): boolean {
  return (
    artifact.mediaType === "text/x-diff" ||
    artifact.mediaType === "text/x-patch" ||
    /\.(patch|diff)$/.test(artifact.name)
  );
}

function Diff({ text }: { text: string }) {
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  const shown = lines.slice(0, MAX_LINES);
  return (
    <>
      <pre class="diff patch" data-testid="diff" tabIndex={0}>
        {shown.map((line, i) => (
          <span key={i} class={`diff-${kindOf(line)}`}>
            {/* A patch is reviewed, then applied: `is\u200b_admin` is another name than the `is_admin` it reads as. */}
            {visibleExactly(line)}
            {"\n"}
          </span>
        ))}
      </pre>
      {lines.length > shown.length ? (
        <p class="muted">{count(lines.length - shown.length)} more lines not shown.</p>
      ) : null}
    </>
  );
}

function kindOf(line: string): string {
  if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff ") || line.startsWith("index "))
    return "file";
  if (line.startsWith("@@")) return "hunk";
  if (line.startsWith("+")) return "add";
  if (line.startsWith("-")) return "del";
  return "context";
}
