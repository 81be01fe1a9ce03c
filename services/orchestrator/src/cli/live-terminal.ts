// A job's output on a terminal with a live status line below it: what the
// job is doing now, redrawn in place (at most ten times a second, and each
// second for the clock) and cleared before any other line is written, so
// the lines above read exactly as they would without it. While a question
// is open (the approval prompt) the status line is gone and other output
// waits, so the question is not torn apart; it comes out once the question
// closes. Without a status line (not a terminal, --json, NO_COLOR,
// TERM=dumb) it writes through untouched.
import { clipToColumns } from "./terminal-text.js";

/** What the event printer writes to: a stream, or this. */
export interface TextSink {
  write(text: string): unknown;
}

const CLEAR_LINE = "\r\x1b[2K";
const DIM = "\x1b[2m";
const RESET = "\x1b[0m";
/** Redraws at most this often. */
const MIN_REDRAW_MS = 100;

/** Whether `out` gets a status line: a terminal that can redraw, and nobody asked for plain output. */
export function wantsStatusLine(
  out: NodeJS.WritableStream,
  options: { json: boolean; env?: NodeJS.ProcessEnv },
): boolean {
  const env = options.env ?? process.env;
  if (options.json || !(out as NodeJS.WriteStream).isTTY) return false;
  // NO_COLOR (https://no-color.org) asks for plain output; a dumb terminal cannot move the cursor.
  if (env.NO_COLOR !== undefined && env.NO_COLOR !== "") return false;
  return env.TERM !== "dumb";
}

export class LiveTerminal implements TextSink {
  /** Those with a status line now, so Ctrl-C can take theirs off the screen before the process exits. */
  static readonly #drawing = new Set<LiveTerminal>();

  /** Clears every status line (the process is about to exit). */
  static clearAll(): void {
    for (const terminal of LiveTerminal.#drawing) terminal.stop();
  }

  readonly #out: NodeJS.WritableStream;
  readonly #render: (() => string) | undefined;
  #shown = false;
  #atLineStart = true;
  #held = 0;
  readonly #waiting: string[] = [];
  #lastDraw = 0;
  #timer: NodeJS.Timeout | undefined;
  readonly #tick: NodeJS.Timeout | undefined;
  #stopped = false;

  /** `render`: the status line's text, or undefined for no status line (plain output). */
  constructor(options: { out: NodeJS.WritableStream; render?: (() => string) | undefined }) {
    this.#out = options.out;
    this.#render = options.render;
    if (this.#render) {
      LiveTerminal.#drawing.add(this);
      // The clock moves even when nothing happens.
      this.#tick = setInterval(() => this.refresh(), 1_000);
      this.#tick.unref();
    }
  }

  get live(): boolean {
    return this.#render !== undefined;
  }

  /** Normal output: the status line goes, the text is written (or waits while a question is open), the status line comes back. */
  write(text: string): boolean {
    if (text === "") return true;
    if (this.#held > 0) {
      this.#waiting.push(text);
      return true;
    }
    this.#clear();
    this.#out.write(text);
    this.#atLineStart = text.endsWith("\n");
    this.refresh();
    return true;
  }

  /** Run `fn` (which writes to the same terminal some other way, such as stderr) with the status line out of its way. */
  around(fn: () => void): void {
    this.#clear();
    fn();
    this.refresh();
  }

  /** A question opens: the status line goes and other output waits until `release`. */
  hold(): void {
    this.#held++;
    this.#clear();
  }

  release(): void {
    if (this.#held === 0) return;
    this.#held--;
    if (this.#held > 0) return;
    for (const text of this.#waiting.splice(0)) this.write(text);
    this.refresh();
  }

  /** Redraw soon: now when the last draw is old enough, else once that much time has passed. */
  refresh(): void {
    if (!this.#render || this.#stopped || this.#timer) return;
    const wait = this.#lastDraw + MIN_REDRAW_MS - Date.now();
    if (wait <= 0) {
      this.#draw();
      return;
    }
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#draw();
    }, wait);
    this.#timer.unref();
  }

  /** The status line goes for good (the job ended); what waited is written. */
  stop(): void {
    LiveTerminal.#drawing.delete(this);
    this.#stopped = true;
    clearInterval(this.#tick);
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#held = 0;
    this.#clear();
    for (const text of this.#waiting.splice(0)) this.write(text);
  }

  #draw(): void {
    // Only on a line of its own: while text streams mid-line it would be torn into it.
    if (!this.#render || this.#stopped || this.#held > 0 || !this.#atLineStart) return;
    const columns = (this.#out as NodeJS.WriteStream).columns || 80;
    // One row, never wrapped: a wrapped line could not be cleared in place.
    const text = clipToColumns(this.#render().replace(/\s+/g, " "), Math.max(columns - 1, 1));
    this.#out.write(`${CLEAR_LINE}${DIM}${text}${RESET}`);
    this.#shown = true;
    this.#lastDraw = Date.now();
  }

  #clear(): void {
    if (!this.#shown) return;
    this.#out.write(CLEAR_LINE);
    this.#shown = false;
  }
}
