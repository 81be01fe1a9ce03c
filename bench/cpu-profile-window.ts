// A V8 .cpuprofile (node --cpu-prof) cut to a window of time, so that what a
// service did while a bench's work ran is apart from its start-up and
// shutdown: both in the summary (llm-proxy-cpu-profile.ts) and in the file a
// flame graph opens (Chrome DevTools' Performance panel, speedscope.app).

/** The parts of V8's Profiler.Profile a window changes; the rest is kept as is. */
export interface TimedCpuProfile {
  /** CLOCK_MONOTONIC microseconds, the clock of process.hrtime in any process on the machine. */
  startTime: number;
  endTime: number;
  samples: number[];
  /** Microseconds since the previous sample (the first: since startTime). */
  timeDeltas: number[];
}

/** The samples taken from `fromUs` (inclusive) to `toUs` (exclusive), the profile's start and end moved to the window's. */
export function cpuProfileWindow<P extends TimedCpuProfile>(profile: P, window: { fromUs: number; toUs: number }): P {
  const samples: number[] = [];
  const timeDeltas: number[] = [];
  let at = profile.startTime;
  let previous = window.fromUs;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0;
    if (at < window.fromUs || at >= window.toUs) continue;
    samples.push(profile.samples[i]!);
    timeDeltas.push(at - previous);
    previous = at;
  }
  return { ...profile, startTime: window.fromUs, endTime: window.toUs, samples, timeDeltas };
}
