// What a harness's manifest promises (oz0-plugin.yaml) against what the
// harness says it does when it starts (SessionStarted.capabilities). The
// orchestrator trusts the manifest: with `permissions: true` it lets agents
// with requires_approval and hooks run on the harness, and fails any tool
// call nobody was asked about. A harness that does not ask would then fail
// each job at its first tool call, as a policy bypass that reads like an
// attack; said at its start instead, the mismatch is named for what it is.
import type { SessionStarted } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { HarnessManifest } from "../plugins/plugin-types.js";
import { clippedHarnessText } from "./harness-text.js";

/** Why the job fails when the harness's start contradicts its manifest; undefined when it does not. */
export function capabilitiesViolation(
  manifest: Pick<HarnessManifest, "name" | "permissions">,
  started: Pick<SessionStarted, "harnessName" | "capabilities">,
): string | undefined {
  if (!manifest.permissions || started.capabilities?.permissions) return undefined;
  const named = started.harnessName ? ` (it names itself ${clippedHarnessText(started.harnessName)})` : "";
  return `harness ${manifest.name}${named} does not declare the permissions capability in its started event, though its manifest says permissions: true (rule: a harness whose manifest says permissions asks before every tool call and says so when it starts, capabilities.permissions = true); fix the harness, or take permissions: true out of oz0-plugin.yaml (then no agent with requires_approval or hooks runs on it); the job was stopped`;
}
