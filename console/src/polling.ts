// A list read when the page opens and again on `refresh()` (a change a
// stream announced), and every `intervalMs` besides when one is given (the
// jobs page's safety net beside WatchJobs): a tab in the background is then
// not read for, and reads at once when it is shown again.
import { useEffect, useRef, useState } from "preact/hooks";
import { messageOf } from "./api.js";
import { ReadOrder } from "./read-order.js";

export interface Polled<T> {
  value: T | undefined;
  error: string | undefined;
  /** Read again now (after the page changed something). */
  refresh(): void;
}

export function usePolling<T>(read: () => Promise<T>, intervalMs: number | undefined, deps: unknown[]): Polled<T> {
  const [value, setValue] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const tick = useRef<() => void>(() => undefined);
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const order = new ReadOrder();
    const run = async (): Promise<void> => {
      const mine = order.start();
      clearTimeout(timer);
      try {
        const next = await read();
        if (!stopped && order.show(mine)) {
          setValue(next);
          setError(undefined);
        }
      } catch (e) {
        if (!stopped && order.show(mine)) setError(messageOf(e));
      }
      if (intervalMs !== undefined && !stopped && order.isLatest(mine) && document.visibilityState !== "hidden")
        timer = setTimeout(() => void run(), intervalMs);
    };
    const shown = (): void => {
      if (document.visibilityState === "visible") void run();
    };
    tick.current = () => void run();
    void run();
    if (intervalMs !== undefined) document.addEventListener("visibilitychange", shown);
    return () => {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener("visibilitychange", shown);
    };
  }, deps);
  return { value, error, refresh: () => tick.current() };
}
