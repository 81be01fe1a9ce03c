// A command on a pseudo-terminal (`script`), its output replayed into a
// headless terminal emulator, so a test reads the rows a person would see:
// what was redrawn in place or erased is gone, as on a real screen.
import { spawn } from "node:child_process";
import xterm from "@xterm/headless";

export interface PtyScreen {
  /** The screen's lines (scrollback included; a line the terminal wrapped is one), trailing blanks trimmed. */
  rows(): string[];
  /** {@link rows}, with each run of bold characters between `**` marks. */
  boldRows(): string[];
  /** Everything the command wrote, escape sequences included. */
  raw(): string;
  /** Waits until `check` holds for the rows; the test's own timeout bounds it. */
  waitFor(check: (rows: string[]) => boolean): Promise<string[]>;
  /** Types into the terminal (`\r` is Enter). */
  type(text: string): void;
  readonly exited: Promise<number>;
}

/** Runs `command` (a shell command line) on a terminal `cols` wide. */
export function ptyScreen(
  command: string,
  options: { env: NodeJS.ProcessEnv; cols?: number; rows?: number },
): PtyScreen {
  const cols = options.cols ?? 120;
  const height = options.rows ?? 40;
  const term = new xterm.Terminal({ cols, rows: height, scrollback: 5_000, allowProposedApi: true });
  // The terminal's size is set before the command starts, so it knows its width.
  const child = spawn("script", ["-qfec", `stty cols ${cols} rows ${height}; exec ${command}`, "/dev/null"], {
    env: { TERM: "xterm-256color", ...options.env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  let raw = "";
  const waiters = new Set<() => void>();
  const screenRows = (bold: boolean): string[] => {
    const buffer = term.buffer.active;
    const lines: string[] = [];
    for (let i = 0; i < buffer.length; i++) {
      const line = buffer.getLine(i);
      const text = (bold ? line && withBold(line) : line?.translateToString(true)) ?? "";
      // A row the terminal wrapped continues the line above it.
      if (line?.isWrapped && lines.length > 0) lines[lines.length - 1] += text;
      else lines.push(text);
    }
    while (lines.length > 0 && lines.at(-1) === "") lines.pop();
    return lines;
  };
  const rows = (): string[] => screenRows(false);
  child.stdout.on("data", (chunk: Buffer) => {
    raw += chunk.toString();
    term.write(chunk, () => {
      for (const wake of [...waiters]) wake();
    });
  });
  child.stderr.on("data", (chunk: Buffer) => (raw += chunk.toString()));
  const exited = new Promise<number>((resolve) => child.on("exit", (code) => resolve(code ?? 1)));
  return {
    rows,
    boldRows: () => screenRows(true),
    raw: () => raw,
    type: (text) => child.stdin.write(text),
    exited,
    waitFor(check) {
      return new Promise((resolve, reject) => {
        const wake = (): void => {
          const now = rows();
          if (!check(now)) return;
          waiters.delete(wake);
          resolve(now);
        };
        waiters.add(wake);
        wake();
        void exited.then(() =>
          // Everything written is parsed before the last callback; give it one more look.
          term.write("", () => {
            if (!waiters.has(wake)) return;
            waiters.delete(wake);
            const now = rows();
            if (check(now)) resolve(now);
            else
              reject(new Error(`the command ended before the screen showed what was waited for:\n${now.join("\n")}`));
          }),
        );
      });
    },
  };
}

/** A row's text with its bold runs between `**` marks, trailing blanks trimmed. */
function withBold(line: xterm.IBufferLine): string {
  let text = "";
  let inBold = false;
  for (let x = 0; x < line.length; x++) {
    const cell = line.getCell(x);
    if (!cell || cell.getWidth() === 0) continue;
    const bold = cell.isBold() !== 0;
    if (bold !== inBold) text += "**";
    inBold = bold;
    text += cell.getChars() || " ";
  }
  if (inBold) text += "**";
  return text.trimEnd();
}
