// The elapsed timeline (timeline.ts) drawn as stacked bars: positions are
// set through the style object (the CSSOM), which the page's content
// security policy allows, unlike inline style attributes.
import type { Lane, Phase, Segment } from "../timeline.js";
import { MAX_LANES } from "../timeline.js";
import { duration, visible } from "../format.js";

const PHASE_NAMES: Record<Phase, string> = {
  model: "model",
  tool: "tool running",
  operation: "operation",
  waiting: "waiting for a person",
};

export function TimelineView({ totalMs, job, lanes }: { totalMs: number; job: Lane; lanes: readonly Lane[] }) {
  const shown = lanes.slice(0, MAX_LANES);
  return (
    <figure class="timeline" aria-labelledby="timeline-caption" data-testid="timeline">
      <figcaption id="timeline-caption">
        Elapsed: {duration(totalMs)}
        <span class="legend">
          {(Object.keys(PHASE_NAMES) as Phase[]).map((p) => (
            <span key={p}>
              <span class={`swatch phase-${p}`} aria-hidden="true" /> {PHASE_NAMES[p]}
            </span>
          ))}
        </span>
      </figcaption>
      <ol>
        <LaneRow lane={job} totalMs={totalMs} />
        {shown.map((lane, i) => (
          <LaneRow key={i} lane={lane} totalMs={totalMs} />
        ))}
      </ol>
      {lanes.length > shown.length ? (
        <p class="muted">and {lanes.length - shown.length} more calls (the job lane counts them all)</p>
      ) : null}
    </figure>
  );
}

function LaneRow({ lane, totalMs }: { lane: Lane; totalMs: number }) {
  const summary = lane.segments
    .map((s) => `${PHASE_NAMES[s.phase]} ${duration(s.to - s.from)} from +${duration(s.from)}`)
    .join(", ");
  return (
    <li class={lane.colour === undefined ? "lane" : `lane rail-${lane.colour}`}>
      <span class="lane-label">{visible(lane.label)}</span>
      <span class="track" role="img" aria-label={`${visible(lane.label)}: ${summary}`}>
        {lane.segments.map((s, i) => (
          <span key={i} class={`bar phase-${s.phase}`} style={position(s, totalMs)} />
        ))}
      </span>
    </li>
  );
}

function position(s: Segment, totalMs: number): { left: string; width: string } {
  const left = (s.from / totalMs) * 100;
  return { left: `${left}%`, width: `max(2px, ${((s.to - s.from) / totalMs) * 100}%)` };
}
