// The y/n/edit prompt `oz0 run` shows on a terminal when a call waits for a
// person, and takes back (erases) when the call is answered elsewhere. It
// reads from any stream pair, so tests drive it without a TTY.
import { createInterface } from "node:readline";
import type { JsonObject } from "@bufbuild/protobuf";
import { fieldText, inputText, rowsOfLine, terminalLine } from "./terminal-text.js";

export interface PromptedCall {
  /** `<harness>.<tool>` or the tool's name. */
  tool: string;
  /** What the call runs with when approved: a hook's changed input, else the harness's. */
  input?: JsonObject;
  /** Who changed the input (a hook's label), when it is not the harness's; `harnessInput` is then what the harness asked. */
  inputChangedBy?: string;
  harnessInput?: JsonObject;
  /** Why it waits (the rule or hook that asked). */
  reason: string;
}

export interface PromptAnswer {
  allow: boolean;
  /** The edited input, when the person changed it. */
  input?: JsonObject;
  reason: string;
}

/** Lines as they come, kept until asked for: answers typed ahead are not lost between questions. */
class LineQueue {
  readonly #lines: string[] = [];
  readonly #waiting: ((line: string | undefined) => void)[] = [];
  #ended = false;

  constructor(input: NodeJS.ReadableStream) {
    const rl = createInterface({ input, terminal: false });
    rl.on("line", (line) => {
      const waiter = this.#waiting.shift();
      if (waiter) waiter(line);
      else this.#lines.push(line);
    });
    rl.on("close", () => {
      this.#ended = true;
      for (const waiter of this.#waiting.splice(0)) waiter(undefined);
    });
    this.close = () => rl.close();
  }

  readonly close: () => void;

  next(): Promise<string | undefined> {
    const line = this.#lines.shift();
    if (line !== undefined) return Promise.resolve(line);
    if (this.#ended) return Promise.resolve(undefined);
    return new Promise((resolve) => this.#waiting.push(resolve));
  }
}

/** Beside the input a call runs, when it is not the harness's: who changed it, and what the harness asked. */
export function inputChangedText(call: { inputChangedBy?: string; input?: JsonObject }): string {
  if (!call.inputChangedBy) return "";
  return `  (input changed by ${fieldText(call.inputChangedBy)}; the harness asked ${inputText(call.input ?? {})})`;
}

/** How many terminal rows `text` takes on a terminal `columns` wide (the cursor ends on the last). */
export function rowsOf(text: string, columns: number): number {
  return text.split("\n").reduce((rows, line) => rows + rowsOfLine(line, columns), 0);
}

/**
 * Asks until it gets a usable answer: y approves, n denies (asking why: the
 * model reads it), e edits the input as one line of JSON and approves that.
 * Input that ends (Ctrl-D) denies, since nobody approved. When `signal`
 * aborts (the call was answered elsewhere), the question and what was typed
 * are erased from the terminal (or, with `erase: false`, the question is
 * marked answered elsewhere) and the result is undefined.
 */
export async function promptForAnswer(options: {
  call: PromptedCall;
  input: NodeJS.ReadableStream;
  output: NodeJS.WritableStream;
  signal?: AbortSignal;
  /** Erase a retracted question with cursor movements (a terminal that redraws; not with NO_COLOR or TERM=dumb). Default true. */
  erase?: boolean;
}): Promise<PromptAnswer | undefined> {
  const { call, output, signal } = options;
  const lines = new LineQueue(options.input);
  // Everything on the screen since the question began, typed answers included (the terminal echoes them).
  let shown = "";
  const write = (text: string): void => {
    shown += text;
    output.write(text);
  };
  const retracted = new Promise<undefined>((resolve) => {
    if (signal?.aborted) resolve(undefined);
    signal?.addEventListener("abort", () => resolve(undefined), { once: true });
  });
  const RETRACTED = Symbol("retracted");
  const ask = async (question: string): Promise<string | undefined | typeof RETRACTED> => {
    write(question);
    const line = await Promise.race([lines.next(), retracted.then((): typeof RETRACTED => RETRACTED)]);
    if (line === RETRACTED) return RETRACTED;
    if (line !== undefined) shown += `${line}\n`;
    return line?.trim();
  };
  const erase = (): undefined => {
    if (options.erase === false) {
      output.write("(answered elsewhere)\n");
      return undefined;
    }
    const up = rowsOf(shown, (output as NodeJS.WriteStream).columns || 80) - 1;
    output.write(`\r${up > 0 ? `\x1b[${up}A` : ""}\x1b[J`);
    return undefined;
  };
  try {
    if (signal?.aborted) return undefined;
    // The tool, the reason and the input are the harness's (or a hook's): printed inert, the person reads what would run.
    const changed = call.inputChangedBy
      ? `\n  ${terminalLine(inputChangedText({ inputChangedBy: call.inputChangedBy, input: call.harnessInput ?? {} }).trim())}`
      : "";
    write(
      `\n${fieldText(call.tool)} waits for approval: ${fieldText(call.reason, 400)}\n  input: ${inputText(call.input ?? {})}${changed}\n`,
    );
    for (;;) {
      const choice = await ask("Allow it? [y]es, [n]o, [e]dit the input: ");
      if (choice === RETRACTED) return erase();
      if (choice === undefined) return { allow: false, reason: "nobody answered at the terminal (its input ended)" };
      if (/^y(es)?$/i.test(choice)) return { allow: true, reason: "approved at the terminal" };
      if (/^no?$/i.test(choice)) {
        const reason = await ask("Why not? (the model reads this) ");
        if (reason === RETRACTED) return erase();
        return { allow: false, reason: reason || "denied at the terminal" };
      }
      if (/^e(dit)?$/i.test(choice)) {
        const text = await ask("New input, as one line of JSON: ");
        if (text === RETRACTED) return erase();
        if (text === undefined) return { allow: false, reason: "nobody answered at the terminal (its input ended)" };
        try {
          const edited = JSON.parse(text) as unknown;
          if (edited !== null && typeof edited === "object" && !Array.isArray(edited))
            return {
              allow: true,
              input: edited as JsonObject,
              reason: "approved with an edited input at the terminal",
            };
        } catch {
          // Falls through to the message below.
        }
        write('That is not a JSON object; for example {"command":"npm test"}. Asking again.\n');
        continue;
      }
      write("Answer y, n or e.\n");
    }
  } finally {
    lines.close();
  }
}
