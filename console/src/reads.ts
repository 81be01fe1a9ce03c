// A value read from the API when something it depends on changed: `key`
// names that something (for example how many tool calls the job's stream has
// shown). Reads after a change are gathered for a moment, so a burst of
// events costs one read. `again` asks for one more read a second later (the
// events service's transcript trails the job's own events), a few times at most.
import { useEffect, useRef, useState } from "preact/hooks";
import { messageOf } from "./api.js";

const GATHER_MS = 150;
const AGAIN_MS = 1_000;
const AGAIN_AT_MOST = 15;

export interface Read<T> {
  value: T | undefined;
  error: string | undefined;
}

export function useRead<T>(
  read: (signal: AbortSignal) => Promise<T>,
  key: string,
  options: { enabled?: boolean; again?: (value: T) => boolean } = {},
): Read<T> {
  const [value, setValue] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const latest = useRef({ read, again: options.again });
  latest.current = { read, again: options.again };
  const enabled = options.enabled ?? true;
  useEffect(() => {
    if (!enabled) return;
    const abort = new AbortController();
    let timer: ReturnType<typeof setTimeout>;
    let tries = 0;
    const run = async (): Promise<void> => {
      try {
        const next = await latest.current.read(abort.signal);
        if (abort.signal.aborted) return;
        setValue(next);
        setError(undefined);
        if (latest.current.again?.(next) && ++tries < AGAIN_AT_MOST) timer = setTimeout(() => void run(), AGAIN_MS);
      } catch (e) {
        if (!abort.signal.aborted) setError(messageOf(e));
      }
    };
    timer = setTimeout(() => void run(), GATHER_MS);
    return () => {
      abort.abort();
      clearTimeout(timer);
    };
  }, [key, enabled]);
  return { value, error };
}
