// Every conformance case, in the order they run. Each runs one or two
// scenarios and checks one rule of the protocol, failing with a message that
// says what the harness did wrong and which rule it broke.
import { PERMISSION_CASES } from "./cases-permissions.js";
import { LIFECYCLE_CASES } from "./cases-lifecycle.js";
import { SESSION_CASES } from "./cases-session.js";
import { TOOL_CASES } from "./cases-tools.js";
import type { ConformanceCase } from "./case-checks.js";

export type { CapabilityName, CaseLevel, ConformanceCase } from "./case-checks.js";

const byId = new Map([...SESSION_CASES, ...PERMISSION_CASES, ...LIFECYCLE_CASES, ...TOOL_CASES].map((c) => [c.id, c]));

const ORDER = [
  "handshake",
  "protocol-version",
  "text",
  "model-headers",
  "unknown-fields",
  "permission-allow",
  "permission-deny",
  "permission-modified-input",
  "permission-outcome",
  "unique-ids",
  "tool-events",
  "working-dir",
  "max-turns",
  "cancellation",
  "cancelled-result",
  "processes",
  "runtime-tools",
  "runtime-tool-permission",
  "structured-output",
  "usage",
];

/** Every case, in the order they run. */
export const CONFORMANCE_CASES: readonly ConformanceCase[] = ORDER.map((id) => {
  const found = byId.get(id);
  if (found === undefined) throw new Error(`conformance case ${id} is not defined`);
  return found;
});
if (CONFORMANCE_CASES.length !== byId.size) throw new Error("a conformance case is defined but not in the run order");
