// Which orchestrator a command talks to, and as whom. Where: OZ0_URL when
// set; else the orchestrator `oz0 login` saved; else the stack a running
// `oz0 dev` wrote to <OZ0_HOME>/dev.json; else an embedded stack started for
// the length of the command. As whom: OZ0_TOKEN when set; else the login's
// token for its orchestrator; else the owner's credential of this machine
// (<OZ0_HOME>/credentials/owner), which the local stacks accept.
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { bearerInterceptor } from "@oz0/serving";
import { AgentService, JobService, PluginService, SecretService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { LoginService } from "@oz0/proto/oz0/orchestrator/v1/login_pb";
import { isolationNotice, readDiscovery, startEmbeddedStack, type EmbeddedStack } from "../dev/embedded-stack.js";
import { readLogin, readOwnerCredential } from "../dev/local-credentials.js";
import { CliError } from "./cli-error.js";
import { applyEnvironmentKeys, chosenModelScript, embeddedStackEnv } from "./embedded-defaults.js";
import { EXIT } from "./exit-codes.js";

export interface Clients {
  jobs: Client<typeof JobService>;
  plugins: Client<typeof PluginService>;
  agents: Client<typeof AgentService>;
  secrets: Client<typeof SecretService>;
  login: Client<typeof LoginService>;
}

export interface Connection {
  readonly url: string;
  /** How the target was found, for messages. */
  readonly mode: "url" | "login" | "dev" | "embedded";
  readonly clients: Clients;
  /** Notes for the person (for example: the scripted model is in use). */
  readonly notes: string[];
  close(): Promise<void>;
}

/** Clients of the orchestrator at `url`, each call carrying `token` (`authorization: Bearer`). */
export function clientsFor(url: string, token: string | undefined): Clients {
  const transport = createGrpcTransport({ baseUrl: url, interceptors: [bearerInterceptor(token)] });
  return {
    jobs: createClient(JobService, transport),
    plugins: createClient(PluginService, transport),
    agents: createClient(AgentService, transport),
    secrets: createClient(SecretService, transport),
    login: createClient(LoginService, transport),
  };
}

export async function connect(options: {
  home: string;
  onEmbeddedStart?: () => void;
  /** The command's `--model-script`: only a stack this command starts can answer from it. */
  modelScript?: string | undefined;
}): Promise<Connection> {
  const fromEnv = process.env.OZ0_URL?.trim();
  const token = process.env.OZ0_TOKEN?.trim() || undefined;
  const login = readLogin(options.home);
  const local = (): string | undefined => token ?? readOwnerCredential(options.home);
  // A running stack keeps the model it was started with; OZ0_MODEL_SCRIPT is for stacks started here, so it alone is no error.
  const noScriptThere = (where: string): void => {
    if (options.modelScript) {
      throw new CliError(
        `--model-script works only on a stack this command starts, but commands go to ${where}: start that stack with \`oz0 dev --model-script FILE\` instead`,
        EXIT.usage,
      );
    }
  };
  if (fromEnv) {
    noScriptThere(`${fromEnv} (OZ0_URL)`);
    const credential = token ?? (login?.url === fromEnv ? login.token : readOwnerCredential(options.home));
    return { url: fromEnv, mode: "url", clients: clientsFor(fromEnv, credential), notes: [], close: async () => {} };
  }
  if (login) {
    noScriptThere(`${login.url} (oz0 login)`);
    return {
      url: login.url,
      mode: "login",
      clients: clientsFor(login.url, token ?? login.token),
      notes: [],
      close: async () => {},
    };
  }
  const dev = readDiscovery(options.home);
  if (dev) {
    noScriptThere(`the oz0 dev at ${dev.url}`);
    return { url: dev.url, mode: "dev", clients: clientsFor(dev.url, local()), notes: [], close: async () => {} };
  }
  // Read before the stack starts, so a bad script costs no start-up.
  const defaults = embeddedStackEnv({ home: options.home, modelScript: chosenModelScript(options.modelScript) });
  options.onEmbeddedStart?.();
  const stack: EmbeddedStack = await startEmbeddedStack({ home: options.home, env: defaults.env });
  const clients = clientsFor(stack.urls.orchestrator, token ?? stack.ownerToken);
  if (!defaults.scripted) {
    try {
      // The machine's owner hands over the keys, whoever runs the command.
      await applyEnvironmentKeys((s) => clientsFor(stack.urls.orchestrator, stack.ownerToken).secrets.setSecret(s));
    } catch (error) {
      await stack.close();
      throw error;
    }
  }
  return {
    url: stack.urls.orchestrator,
    mode: "embedded",
    clients,
    notes: [...defaults.notes, ...(isolationNotice(stack) ? [isolationNotice(stack)!] : [])],
    close: () => stack.close(),
  };
}
