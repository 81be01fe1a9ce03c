// The runtime side: run one session of any harness command and get its outcome.
import { startHostSession } from "@oz0/harness/host";
import type { SessionOutcome } from "@oz0/harness/host";
import type { SessionRequest } from "@oz0/proto/oz0/harness/v1/harness_pb";

export async function runSession(
  command: string[],
  request: SessionRequest,
  log: (line: string) => void,
): Promise<SessionOutcome> {
  const session = startHostSession({
    command,
    cwd: request.workingDir,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: request.stateDir }, // nothing else is inherited
    request,
    graceMs: 10_000,
    onEvent(event) {
      if (event.event.case === "text") log(`text: ${event.event.value.text}`);
      if (event.event.case === "permissionRequest") {
        const { id, tool } = event.event.value;
        log(`permission asked for ${tool}`);
        session.answerPermission({ id, allow: true, reason: "allowed by the example" });
      }
    },
  });
  const stop = (): void => session.cancel("interrupted");
  process.once("SIGINT", stop);
  const outcome = await session.outcome; // resolves once, whatever the harness does
  process.off("SIGINT", stop);
  return outcome;
}
