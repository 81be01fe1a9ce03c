// Without bubblewrap, a harness would outlive a sandbox killed with SIGKILL
// (no exit hook runs then). `setpriv --pdeathsig SIGKILL` (util-linux) makes
// the kernel kill the harness when the sandbox dies; setpriv execs the
// command, so the pid and process group are the harness's own. What the
// harness itself started is killed only on a clean exit of the sandbox (or
// under bubblewrap, whose --die-with-parent takes the whole namespace).
import { commandIsExecutable, processGroupLauncher, type HarnessLauncher } from "@oz0/harness/host";
import { systemCommand } from "./system-command.js";

export function findSetpriv(): string | undefined {
  return systemCommand("setpriv");
}

export function parentDeathLauncher(options: { setprivPath: string }): HarnessLauncher {
  const inner = processGroupLauncher();
  return {
    launch(spec) {
      // A command that cannot run is started as is, so the host reports spawn_failed rather than setpriv's exit code.
      if (!commandIsExecutable(spec)) return inner.launch(spec);
      return inner.launch({ ...spec, command: [options.setprivPath, "--pdeathsig", "SIGKILL", "--", ...spec.command] });
    },
  };
}
