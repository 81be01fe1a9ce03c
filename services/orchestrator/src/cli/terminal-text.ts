// Text from a harness or a model, as oz0 prints it on a terminal: what the
// model said, its tool names, titles and inputs, a tool's output, a job's
// result and error, a session's stderr. Any of it may hold what a terminal
// acts on (an escape sequence that clears the screen, retitles the window or
// writes the clipboard; a carriage return that writes over a line; a
// bidirectional override that shows a command reversed in the approval
// prompt), put there by a harness, a model or a file a tool read. Printed, each
// such character is a `\uXXXX` escape; line feeds and tabs stay as they are.
// `--json` output is the API's JSON, which a script parses, but which also
// lands on terminals and in CI logs: it holds the same values, with every
// character a terminal acts on written as a JSON `\uXXXX` escape.
import { escapeRefusedCharacters } from "@oz0/harness/host";
import stringWidth from "string-width";

/** `text` to print as lines: line feeds, tabs and CRLFs kept, every other character a terminal acts on escaped. */
export function terminalText(text: string): string {
  return escapeRefusedCharacters(text, { keepLinesAndTabs: true });
}

/** `text` to print on one line (a status line): every character a terminal acts on escaped, line feeds too. */
export function terminalLine(text: string): string {
  return escapeRefusedCharacters(text);
}

/**
 * `value` as one line of JSON (`--json`): what JSON.stringify writes, so a parser reads the very same values,
 * with the characters it leaves raw that a terminal acts on (C1 controls such as CSI, DEL, the line and
 * paragraph separators, the bidirectional controls) written as `\uXXXX` escapes too: JSON.stringify escapes
 * only C0 controls and half characters.
 */
export function jsonLine(value: unknown): string {
  return terminalLine(JSON.stringify(value));
}

/** Characters that word a shell command safely as they are. */
const SHELL_SAFE = /^[A-Za-z0-9._:@+=,/-]+$/;

/**
 * `text` as one word of a shell command a person copies (an id in an `oz0 approve` hint): as it is when it is
 * only plain characters, else single-quoted. An id is the harness's, and may hold `;`, `$(…)` or a space
 * followed by `--input`: pasted unquoted, that would run in the operator's shell or approve another input.
 */
export function shellWord(text: string): string {
  return SHELL_SAFE.test(text) ? text : `'${text.replaceAll("'", "'\\''")}'`;
}

/**
 * A harness's field (a tool name, a title, a reason) on one line, inert, its runs of white space one space and
 * cut to `max` characters: padded to a terminal's width, a field would otherwise wrap and start what looks
 * like a line of its own.
 */
export function fieldText(text: string, max = 120): string {
  return terminalLine(short(text, max));
}

/** `value` (a string, or JSON) on one line: its runs of white space one space, cut to `max` characters. */
export function short(value: unknown, max = 160): string {
  const text = typeof value === "string" ? value : (JSON.stringify(value) ?? "");
  const one = text.replace(/\s+/g, " ").trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one;
}

/** Runs of white space this long or longer are shown by their length in a call's input (inputText). */
const LONG_BLANK = 8;
/** The most of a call's input a question shows: its start and its end, with what lies between counted. */
const INPUT_HEAD = 1_200;
const INPUT_TAIL = 400;

/**
 * A call's input as a question about it shows it: its JSON, inert, with
 * each run of 8 or more blanks (JSON keeps spaces raw) shown as
 * `⟨N blanks⟩`, and past 1,600 characters its start and end with the
 * characters between counted. Shown whole, an input that put a dangerous
 * command first and then thousands of blanks before something harmless
 * filled the screen with blanks and showed only the harmless end above
 * "Allow it?" (attacker review). What runs is the input itself, unchanged.
 */
export function inputText(input: unknown): string {
  const json = (JSON.stringify(input) ?? "").replace(
    new RegExp(` {${LONG_BLANK},}`, "g"),
    (run) => `⟨${run.length} blanks⟩`,
  );
  const text =
    json.length <= INPUT_HEAD + INPUT_TAIL
      ? json
      : `${json.slice(0, INPUT_HEAD)}⟨… ${json.length - INPUT_HEAD - INPUT_TAIL} characters …⟩${json.slice(-INPUT_TAIL)}`;
  return terminalLine(text);
}

const graphemes = new Intl.Segmenter(undefined, { granularity: "grapheme" });

/**
 * How many terminal rows one line of `text` (no line feed) takes on a terminal `columns` wide, as a terminal
 * lays it out: a wide character (CJK, most emoji) takes two columns and moves to the next row whole when one is
 * left, a combining or zero-width one takes none. Counting code points instead, an approval question with
 * wide characters was erased one row short, leaving part of it on the screen (or one row too far, over a line
 * before it, with zero-width ones).
 */
export function rowsOfLine(line: string, columns: number): number {
  const width = Math.max(columns, 1);
  let rows = 1;
  let column = 0;
  for (const { segment } of graphemes.segment(line)) {
    const w = stringWidth(segment);
    if (w === 0) continue;
    if (column + w > width) {
      rows += 1;
      column = 0;
    }
    column += w;
  }
  return rows;
}

/** `text` (one line) cut to whole characters that fit in `columns` terminal columns. */
export function clipToColumns(text: string, columns: number): string {
  let used = 0;
  for (const { segment, index } of graphemes.segment(text)) {
    used += stringWidth(segment);
    if (used > columns) return text.slice(0, index);
  }
  return text;
}
