// Which orchestrator a command talks to: OZ0_URL when set; else the stack a
// running `oz0 dev` wrote to <OZ0_HOME>/dev.json; else an embedded stack
// started for the length of the command.
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AgentService, JobService, PluginService, SecretService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { readDiscovery, startEmbeddedStack, type EmbeddedStack } from "../embedded-stack.js";
import { applyEnvironmentKeys, embeddedStackEnv } from "./embedded-defaults.js";

export interface Clients {
  jobs: Client<typeof JobService>;
  plugins: Client<typeof PluginService>;
  agents: Client<typeof AgentService>;
  secrets: Client<typeof SecretService>;
}

export interface Connection {
  readonly url: string;
  /** How the target was found, for messages. */
  readonly mode: "url" | "dev" | "embedded";
  readonly clients: Clients;
  /** Notes for the person (for example: the scripted model is in use). */
  readonly notes: string[];
  close(): Promise<void>;
}

export function clientsFor(url: string): Clients {
  const transport = createGrpcTransport({ baseUrl: url });
  return {
    jobs: createClient(JobService, transport),
    plugins: createClient(PluginService, transport),
    agents: createClient(AgentService, transport),
    secrets: createClient(SecretService, transport),
  };
}

export async function connect(options: { home: string; onEmbeddedStart?: () => void }): Promise<Connection> {
  const fromEnv = process.env.OZ0_URL?.trim();
  if (fromEnv) return { url: fromEnv, mode: "url", clients: clientsFor(fromEnv), notes: [], close: async () => {} };
  const dev = readDiscovery(options.home);
  if (dev) return { url: dev.url, mode: "dev", clients: clientsFor(dev.url), notes: [], close: async () => {} };
  options.onEmbeddedStart?.();
  const defaults = embeddedStackEnv({ home: options.home });
  const stack: EmbeddedStack = await startEmbeddedStack({ home: options.home, env: defaults.env });
  const clients = clientsFor(stack.urls.orchestrator);
  if (!defaults.scripted) {
    try {
      await applyEnvironmentKeys((s) => clients.secrets.setSecret(s));
    } catch (error) {
      await stack.close();
      throw error;
    }
  }
  return {
    url: stack.urls.orchestrator,
    mode: "embedded",
    clients,
    notes: defaults.notes,
    close: () => stack.close(),
  };
}
