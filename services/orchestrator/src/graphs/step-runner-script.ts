// Where the generic step runner is (graph-step-runner.ts, built into
// dist/graphs): the harness every custom step of a graph runs as, in the sandbox.
// Its own module, so that what starts sessions and what decides what a
// session may read (the embedded stack) name the same file.
import path from "node:path";
import { fileURLToPath } from "node:url";

// The built one, whether this module runs from dist/graphs or (under tsx, in a test) from src/graphs.
export const STEP_RUNNER_SCRIPT = path.resolve(
  path.dirname(fileURLToPath(import.meta.url)),
  "..",
  "..",
  "dist",
  "graphs",
  "graph-step-runner.js",
);

/** The packages the step runner imports, which a session running it must be able to read. */
export const STEP_RUNNER_PACKAGES = ["@oz0/graph", "@oz0/harness"] as const;
