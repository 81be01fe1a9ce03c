// The y/n/edit prompt `oz0 run` shows on a terminal when a call waits for a
// person. It reads from any stream pair, so tests drive it without a TTY.
import { createInterface } from "node:readline";
import type { JsonObject } from "@bufbuild/protobuf";

export interface PromptedCall {
  /** `<harness>.<tool>` or the tool's name. */
  tool: string;
  input?: JsonObject;
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

/**
 * Asks until it gets a usable answer: y approves, n denies (asking why: the
 * model reads it), e edits the input as one line of JSON and approves that.
 * Input that ends (Ctrl-D) denies, since nobody approved.
 */
export async function promptForAnswer(options: { call: PromptedCall; input: NodeJS.ReadableStream; output: NodeJS.WritableStream }): Promise<PromptAnswer> {
  const { call, output } = options;
  const lines = new LineQueue(options.input);
  const ask = async (question: string): Promise<string | undefined> => {
    output.write(question);
    return (await lines.next())?.trim();
  };
  try {
    output.write(`\n${call.tool} waits for approval: ${call.reason}\n  input: ${JSON.stringify(call.input ?? {})}\n`);
    for (;;) {
      const choice = await ask("Allow it? [y]es, [n]o, [e]dit the input: ");
      if (choice === undefined) return { allow: false, reason: "nobody answered at the terminal (its input ended)" };
      if (/^y(es)?$/i.test(choice)) return { allow: true, reason: "approved at the terminal" };
      if (/^no?$/i.test(choice)) {
        const reason = await ask("Why not? (the model reads this) ");
        return { allow: false, reason: reason || "denied at the terminal" };
      }
      if (/^e(dit)?$/i.test(choice)) {
        const text = await ask("New input, as one line of JSON: ");
        if (text === undefined) return { allow: false, reason: "nobody answered at the terminal (its input ended)" };
        try {
          const edited = JSON.parse(text) as unknown;
          if (edited !== null && typeof edited === "object" && !Array.isArray(edited)) return { allow: true, input: edited as JsonObject, reason: "approved with an edited input at the terminal" };
        } catch {
          // Falls through to the message below.
        }
        output.write('That is not a JSON object; for example {"command":"npm test"}. Asking again.\n');
        continue;
      }
      output.write("Answer y, n or e.\n");
    }
  } finally {
    lines.close();
  }
}
