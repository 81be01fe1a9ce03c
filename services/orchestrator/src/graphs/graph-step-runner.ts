// The generic "step runner" harness: how a graph's custom step runs in the
// sandbox instead of the orchestrator's process. The orchestrator starts it
// as a session whose input is the step call as JSON ({ module, export, name,
// bag, runId, idempotencyKey, iteration }); it imports the module from the
// plugin's folder (OZ0_PLUGIN_DIR), runs the step over a context bag built
// from `bag`, and returns the keys the step set as the result text
// (`{"set":{...}}`), so the orchestrator checkpoints only the writes.
import path from "node:path";
import { pathToFileURL } from "node:url";
import { HarnessContext } from "@oz0/graph";
import { runHarness } from "@oz0/harness";

/** The session input the orchestrator sends. */
export interface StepCall {
  name: string;
  module: string;
  export?: string;
  bag: Record<string, unknown>;
  runId: string;
  idempotencyKey: string;
  iteration: number;
}

interface RunnableStep {
  run(
    ctx: HarnessContext,
    info: { runId: string; idempotencyKey: string; iteration: number; signal: AbortSignal },
  ): unknown;
}

await runHarness({ name: "oz0-graph-step-runner", version: "0.1.0", exitWhenDone: true }, async (session) => {
  const call = JSON.parse(session.request.input) as StepCall;
  const pluginDir = process.env.OZ0_PLUGIN_DIR ?? "";
  if (!pluginDir)
    throw new Error("OZ0_PLUGIN_DIR is not set: the step runner must run as a session with the graph's plugin folder");
  const file = path.resolve(pluginDir, call.module);
  if (!file.startsWith(path.resolve(pluginDir) + path.sep))
    throw new Error(`step module ${call.module} is outside the plugin's folder`);
  const mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
  const ctor = mod[call.export ?? "default"];
  if (typeof ctor !== "function")
    throw new Error(
      `module ${call.module} exports no step class named ${call.export ?? "default"}; check the step's export`,
    );
  const step = new (ctor as new () => RunnableStep)();
  if (typeof step.run !== "function")
    throw new Error(`${call.export ?? "default"} in ${call.module} has no run(ctx) method`);
  const base = new HarnessContext({ initial: call.bag });
  // An overlay records exactly what the step set: that delta is what goes back.
  const ctx = base.overlay();
  await step.run(ctx, {
    runId: call.runId,
    idempotencyKey: call.idempotencyKey,
    iteration: call.iteration,
    signal: session.signal,
  });
  const set = ctx.writes();
  return { text: JSON.stringify({ set }) };
});
