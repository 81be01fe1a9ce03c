// Text a harness chose (a permission id, a call id, a tool name), in a message
// the orchestrator writes to its log and to a job's stored error. A harness
// line may be up to a megabyte, so a message that held such a value whole
// could be several; a long value is cut to its first characters, saying how
// long it was. And a harness may put anything in it: a control character, a
// line separator or a bidirectional override is written as a `\uXXXX` escape,
// so a message cannot clear an operator's terminal, forge a log line or read
// reversed.
import { escapeRefusedCharacters } from "@oz0/harness/host";

/** The first characters a long value keeps. */
const KEPT = 120;

/** `value`, or its first `kept` characters (120 by default) and its length when it is longer; inert (see above). */
export function clippedHarnessText(value: string, kept = KEPT): string {
  return escapeRefusedCharacters(clipped(value, kept));
}

/** `value` as clippedHarnessText cuts it, quoted as a JSON string; inert (see above). */
export function quotedHarnessText(value: string): string {
  return escapeRefusedCharacters(JSON.stringify(clipped(value)));
}

function clipped(value: string, kept = KEPT): string {
  return value.length <= kept ? value : `${value.slice(0, kept)}… (${value.length} characters)`;
}
