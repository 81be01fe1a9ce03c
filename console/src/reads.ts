// A value read from the API when something it depends on changed: `key`
// names that something (for example how many usage events the job's stream
// has shown). Reads after a change are gathered for a moment, so a burst of
// events costs one read.
import { useEffect, useRef, useState } from "preact/hooks";
import { messageOf } from "./api.js";

const GATHER_MS = 150;

export interface Read<T> {
  value: T | undefined;
  error: string | undefined;
}

export function useRead<T>(
  read: (signal: AbortSignal) => Promise<T>,
  key: string,
  options: { enabled?: boolean } = {},
): Read<T> {
  const [value, setValue] = useState<T | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const latest = useRef(read);
  latest.current = read;
  const enabled = options.enabled ?? true;
  useEffect(() => {
    if (!enabled) return;
    const abort = new AbortController();
    const timer = setTimeout(() => {
      latest.current(abort.signal).then(
        (next) => {
          if (abort.signal.aborted) return;
          setValue(next);
          setError(undefined);
        },
        (e: unknown) => {
          if (!abort.signal.aborted) setError(messageOf(e));
        },
      );
    }, GATHER_MS);
    return () => {
      abort.abort();
      clearTimeout(timer);
    };
  }, [key, enabled]);
  return { value, error };
}
