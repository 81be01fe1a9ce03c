// The bound on all a harness writes to stdout. Events are capped (in count
// and in encoded bytes), but what is not an event is not: blank lines, or
// white space around them, pass no cap, and every byte of stdout is copied to
// the node's disk by the session's keeper. So the raw bytes are counted as
// they arrive, and past the limit nothing more reaches the host: the caller
// ends the session, as it does for a flood of stderr.
import { Transform, pipeline, type TransformCallback } from "node:stream";
import type { HarnessLauncher, LaunchedHarness } from "@oz0/harness/host";

/** Default of OZ0_MAX_SESSION_STDOUT_BYTES: 512 MiB, far above a session's events at their own cap. */
export const DEFAULT_MAX_STDOUT_BYTES = 512 * 1024 * 1024;

export interface StdoutLimitOptions {
  /** The launcher that really starts the harness. */
  inner: HarnessLauncher;
  maxBytes: number;
  /** Called once, when stdout passes `maxBytes`; nothing from there on reaches the host. */
  onTooMuch: () => void;
}

/** A launcher whose harness's stdout reaches the host only up to `maxBytes`. */
export function stdoutLimitLauncher(options: StdoutLimitOptions): HarnessLauncher {
  return {
    launch(spec) {
      const launched: LaunchedHarness = options.inner.launch(spec);
      const child = launched.child;
      let seen = 0;
      let over = false;
      const counted = new Transform({
        transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback) {
          if (over) {
            callback();
            return;
          }
          seen += chunk.length;
          if (seen <= options.maxBytes) {
            callback(null, chunk);
            return;
          }
          over = true;
          options.onTooMuch();
          callback();
        },
      });
      // As line-nesting.ts does: the host's end and the harness's stdout end and fail together.
      pipeline(child.stdout, counted, () => undefined);
      child.stdout = counted;
      return launched;
    },
  };
}
