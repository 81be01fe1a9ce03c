/** What the demo's check found: the tests' output, and why the patched project did not pass (empty when it did). */
export interface PatchCheck {
  passed: boolean;
  output: string;
  error: string;
}

/** Applies a job's patch to a fresh copy of a project and runs its tests, in a session of the stack's sandbox. */
export function checkPatchInSandbox(options: {
  sandboxUrl: string;
  /** The orchestrator's credential for sandboxes. */
  token: string;
  /** The stack's data directory. */
  home: string;
  project: string;
  patch: string;
  /** The session is cancelled past it. Default 5 minutes. */
  deadlineMs?: number;
}): Promise<PatchCheck>;
