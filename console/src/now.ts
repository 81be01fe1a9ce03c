// The time, again every second while `ticking`: for what the page shows as it
// passes (a job's running time and its timeline's end, how long a call has
// waited for a person) without asking the API anything.
import { useEffect, useState } from "preact/hooks";

export function useNow(ticking: boolean): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (!ticking) return;
    const timer = setInterval(() => setNow(Date.now()), 1_000);
    return () => clearInterval(timer);
  }, [ticking]);
  return now;
}
