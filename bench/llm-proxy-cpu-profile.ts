// Reads a V8 CPU profile (.cpuprofile, as `node --cpu-prof` or the inspector's
// Profiler writes it) and says where the time went, per call: the functions
// with the most self time, and the same grouped by where their code lives
// (a source file of ours, a Node module, a package, a native call such as
// the `writev` system call, the garbage collector).
import { readFileSync } from "node:fs";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface ProfileLine {
  name: string;
  /** Self time per call, µs. */
  microsPerCall: number;
  /** Share of the busy (not idle) time. */
  share: number;
}

export interface ProfileSummary {
  /** Busy time per call, µs (the profiler's view: close to, not the same as, the process's CPU time). */
  busyMicrosPerCall: number;
  functions: ProfileLine[];
  places: ProfileLine[];
}

/** Where a function's code lives, shortened: `services/llm-proxy/dist/model-call.js`, `node:_http_client`, `pkg better-sqlite3`, `(writev)`. */
function placeOf(url: string, functionName: string): string {
  if (!url) return `(${functionName || "native"})`;
  const inPackage = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (inPackage) return `pkg ${inPackage[1]}`;
  return url.replace(/^file:\/\/.*?\/((?:services|lib|sdk)\/)/, "$1");
}

const IDLE = new Set(["(idle)", "(program)"]);

/** Summarises a profile taken over `calls` calls: the top `top` functions and places by self time. */
export function summariseCpuProfile(file: string, calls: number, top = 15): ProfileSummary {
  const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  // The profiler's own start-up (the inspector session answering Profiler.start) is not the proxy's.
  const parents = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id);
  const profilerOwn = new Set<number>();
  for (const node of profile.nodes) {
    for (let at: number | undefined = node.id; at !== undefined; at = parents.get(at)) {
      if (nodes.get(at)!.callFrame.url === "node:inspector") {
        profilerOwn.add(node.id);
        break;
      }
    }
  }
  const byFunction = new Map<string, number>();
  const byPlace = new Map<string, number>();
  let busy = 0;
  profile.samples.forEach((id, i) => {
    const frame = nodes.get(id)!.callFrame;
    const micros = profile.timeDeltas[i] ?? 0;
    if (IDLE.has(frame.functionName) || profilerOwn.has(id)) return;
    busy += micros;
    const place = placeOf(frame.url, frame.functionName);
    const name = frame.url ? `${frame.functionName || "(anonymous)"} ${place}:${frame.lineNumber + 1}` : place;
    byFunction.set(name, (byFunction.get(name) ?? 0) + micros);
    byPlace.set(place, (byPlace.get(place) ?? 0) + micros);
  });
  const lines = (totals: Map<string, number>): ProfileLine[] =>
    [...totals]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, micros]) => ({ name, microsPerCall: micros / calls, share: micros / busy }));
  return { busyMicrosPerCall: busy / calls, functions: lines(byFunction), places: lines(byPlace) };
}

/** The summary as lines for a bench's printout. */
export function formatProfileSummary(summary: ProfileSummary, indent = "  "): string[] {
  const row = (line: ProfileLine): string =>
    `${indent}  ${line.microsPerCall.toFixed(1).padStart(6)} µs ${(line.share * 100).toFixed(1).padStart(5)}%  ${line.name}`;
  return [
    `${indent}busy ${summary.busyMicrosPerCall.toFixed(0)} µs per call; top self time by function:`,
    ...summary.functions.map(row),
    `${indent}by where the code lives:`,
    ...summary.places.map(row),
  ];
}
