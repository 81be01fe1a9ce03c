// Lists the API has no stream for (jobs, approvals) are read again every
// `intervalMs` while the page is open; an answer given elsewhere or a job that
// changed state shows within that interval. A tab in the background is not
// read for; it reads at once when it is shown again.
import { useEffect, useRef, useState } from "preact/hooks";
import { messageOf } from "./api.js";

export interface Polled<T> {
  value: T | undefined;
  error: string | undefined;
  /** Read again now (after the page changed something). */
  refresh(): void;
}

export function usePolling<T>(read: () => Promise<T>, intervalMs: number, deps: unknown[]): Polled<T> {
  const [value, setValue] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const tick = useRef<() => void>(() => undefined);
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let generation = 0;
    const run = async (): Promise<void> => {
      const mine = ++generation;
      clearTimeout(timer);
      try {
        const next = await read();
        if (!stopped && mine === generation) {
          setValue(next);
          setError(undefined);
        }
      } catch (e) {
        if (!stopped && mine === generation) setError(messageOf(e));
      }
      if (!stopped && mine === generation && document.visibilityState !== "hidden")
        timer = setTimeout(() => void run(), intervalMs);
    };
    const shown = (): void => {
      if (document.visibilityState === "visible") void run();
    };
    tick.current = () => void run();
    void run();
    document.addEventListener("visibilitychange", shown);
    return () => {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener("visibilitychange", shown);
    };
  }, deps);
  return { value, error, refresh: () => tick.current() };
}
