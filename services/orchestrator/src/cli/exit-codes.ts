// The exit statuses of `oz0`, documented in the README.
export const EXIT = {
  /** The command did what was asked; for `run` and `jobs watch`, the job succeeded. */
  ok: 0,
  /** The command could not do what was asked (unknown agent, server unreachable, invalid plugin, ...). */
  error: 1,
  /** The command line itself was wrong. */
  usage: 2,
  /** The job failed. */
  failed: 3,
  /** The job was cancelled. */
  cancelled: 4,
  /** The job waits for a person's approval (run or watch gave up waiting without a terminal to ask on). */
  waiting: 5,
} as const;
