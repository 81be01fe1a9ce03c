// The seed's ParseEmail custom step. It runs in the sandbox (the orchestrator's
// step runner imports it from this plugin), never in the orchestrator.
// Any class with run(ctx, info) works; extending Step from @oz0/graph is optional.
export class ParseEmail {
  name = "parse-email";

  async run(ctx, info) {
    const raw = String(ctx.get("prompt") ?? "");
    ctx.set("subject", raw.split("\n")[0]);
    ctx.set("output", raw);
    // The same after a crash: a step with side effects can use it to do them once.
    ctx.set("parsed_by", info.idempotencyKey);
  }
}
