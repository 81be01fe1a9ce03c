// Text from a harness or a model, as oz0 prints it on a terminal: what the
// model said, its tool names, titles and inputs, a tool's output, a job's
// result and error, a session's stderr. Any of it may hold what a terminal
// acts on (an escape sequence that clears the screen, retitles the window or
// writes the clipboard; a carriage return that writes over a line; a
// bidirectional override that shows a command reversed in the approval
// prompt), put there by a harness, a model or a file a tool read. Printed, each
// such character is a `\uXXXX` escape; line feeds and tabs stay as they are.
// `--json` output is the API's JSON, which a script parses rather than shows.
import { escapeRefusedCharacters } from "@oz0/harness/host";

/** `text` to print as lines: line feeds, tabs and CRLFs kept, every other character a terminal acts on escaped. */
export function terminalText(text: string): string {
  return escapeRefusedCharacters(text, { keepLinesAndTabs: true });
}

/** `text` to print on one line (a status line): every character a terminal acts on escaped, line feeds too. */
export function terminalLine(text: string): string {
  return escapeRefusedCharacters(text);
}
