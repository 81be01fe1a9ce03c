// How many streams of one kind a person holds open at once on this replica.
// A stream costs the orchestrator a little for as long as it stays open, and
// any viewer may open them: without a bound one person could open thousands.
import { Code, ConnectError } from "@connectrpc/connect";

export class StreamsPerPerson {
  readonly #open = new Map<string, number>();

  constructor(
    /** Most a person may hold at once. */
    readonly max: number,
    /** For the refusal's message: what is refused, what opens one, and the setting that bounds them. */
    private readonly what: { streams: string; opensOne: string; setting: string },
  ) {}

  /** Counts one more stream of `person`, or refuses it with RESOURCE_EXHAUSTED; call the returned function when it ends. */
  open(person: string): () => void {
    const held = this.#open.get(person) ?? 0;
    if (held >= this.max)
      throw new ConnectError(
        `you already hold ${held} ${this.what.streams} open, the most one person may: close one (${this.what.opensOne}) and open this again, or have an operator raise ${this.what.setting} on the orchestrator`,
        Code.ResourceExhausted,
      );
    this.#open.set(person, held + 1);
    let closed = false;
    return () => {
      if (closed) return;
      closed = true;
      const left = (this.#open.get(person) ?? 1) - 1;
      if (left === 0) this.#open.delete(person);
      else this.#open.set(person, left);
    };
  }
}
