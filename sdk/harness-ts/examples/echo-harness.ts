// A complete harness: one model call, one permission-gated "tool", one result.
import { runHarness } from "@oz0/harness";

await runHarness({ name: "echo-harness", version: "1.0.0", capabilities: { permissions: true } }, async (session) => {
  const { request, model } = session;
  session.turns++;
  const response = await fetch(`${model.anthropicBaseUrl}/v1/messages`, {
    method: "POST",
    // model.headers carries Oz0-Job, Oz0-Agent and the session token (rule 4).
    headers: { ...model.headers, "content-type": "application/json", "anthropic-version": "2023-06-01" },
    body: JSON.stringify({
      model: model.model,
      max_tokens: 1024,
      system: request.instructions,
      messages: [{ role: "user", content: request.input }],
    }),
    signal: session.signal, // aborted on SIGTERM; the SDK then writes the one cancelled result
  });
  const reply = (await response.json()) as {
    content: Array<{ type: string; text?: string }>;
    usage: { input_tokens: number; output_tokens: number };
  };
  session.usage({ model: model.model, inputTokens: reply.usage.input_tokens, outputTokens: reply.usage.output_tokens });
  const text = reply.content.map((block) => block.text ?? "").join("");
  session.text(text);

  // Ask before acting (rule 6); with permissions off this allows at once.
  const decision = await session.requestPermission({
    tool: "save_note",
    input: { note: text },
    title: "Save the answer",
  });
  if (!decision.allow) return `Not saved: ${decision.reason}`;
  return text; // becomes the result (STOP_REASON_COMPLETED)
});
