// Embedded defaults for the stack `oz0` starts itself: the LLM proxy uses the
// provider keys in the environment when there are any, else the scripted model.
export interface EmbeddedDefaults {
  env: { "llm-proxy"?: Record<string, string> };
  notes: string[];
}

export function embeddedStackEnv(_options: { home: string }): EmbeddedDefaults {
  const hasKey = Boolean(process.env.ANTHROPIC_API_KEY || process.env.OPENAI_API_KEY);
  return {
    env: {},
    notes: hasKey ? [] : ["no provider key is configured: model calls go to the scripted model"],
  };
}
