// Which orchestrator a command talks to, and as whom. Where: OZ0_URL when
// set; else the orchestrator `oz0 login` saved; else the stack a running
// `oz0 dev` wrote to <OZ0_HOME>/dev.json; else an embedded stack started for
// the length of the command. As whom: OZ0_TOKEN when set; else the login's
// token for its orchestrator; else the owner's credential of this machine
// (<OZ0_HOME>/credentials/owner), which the local stacks accept, and which is
// sent to this machine only (an OZ0_URL on another host gets none).
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { bearerInterceptor } from "@oz0/serving";
import { AgentService, JobService, PluginService, SecretService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { LoginService } from "@oz0/proto/oz0/orchestrator/v1/login_pb";
import { isolationNotice, readDiscovery, startEmbeddedStack, type EmbeddedStack } from "../dev/embedded-stack.js";
import { assertOwnHome, readLogin, readOwnerCredential } from "../dev/local-credentials.js";
import { CliError } from "./cli-error.js";
import {
  applyEnvironmentKeys,
  chosenModelScript,
  embeddedStackEnv,
  MODEL_SCRIPT_VARIABLE,
} from "./embedded-defaults.js";
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
  /** The data folder this command found its stack by (OZ0_HOME): another terminal's oz0 dev is seen only with the same. */
  readonly home: string;
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

/** OZ0_URL read as a URL; a usage error saying the form when it is not one. */
function orchestratorUrl(value: string): URL {
  try {
    const url = new URL(value);
    if (url.protocol === "http:" || url.protocol === "https:") return url;
  } catch {
    // Said below.
  }
  throw new CliError(
    `OZ0_URL must be an orchestrator's URL such as http://127.0.0.1:7700 or https://oz0.example.com; got ${JSON.stringify(value)}`,
    EXIT.usage,
  );
}

/**
 * The credential a command sends to the orchestrator at `url` (OZ0_URL): OZ0_TOKEN, else the login's token when
 * the login is for that URL, else this machine's owner credential, but only when the URL names this machine. The
 * owner credential opens this machine's stacks as a person with every role; it was once sent to any OZ0_URL, so a
 * mistyped or hostile URL received it (operator review).
 */
export function credentialForUrl(options: {
  url: string;
  token: string | undefined;
  login: { url: string; token: string } | undefined;
  ownerCredential: () => string | undefined;
}): string | undefined {
  if (options.token) return options.token;
  if (options.login?.url === options.url) return options.login.token;
  return isLoopback(orchestratorUrl(options.url)) ? options.ownerCredential() : undefined;
}

/** Whether `url` names this machine: a loopback address, or localhost. */
function isLoopback(url: URL): boolean {
  const host = url.hostname.replace(/^\[|\]$/g, "");
  return host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

export async function connect(options: {
  home: string;
  onEmbeddedStart?: () => void;
  /** The command's `--model-script`: only a stack this command starts can answer from it. */
  modelScript?: string | undefined;
}): Promise<Connection> {
  const fromEnv = process.env.OZ0_URL?.trim();
  const token = process.env.OZ0_TOKEN?.trim() || undefined;
  // Before its login, its dev.json or its owner credential is read: another user's would say where this command
  // sends its credential and what it is asked to pass on.
  assertOwnHome(options.home);
  const login = readLogin(options.home);
  const local = (): string | undefined => token ?? readOwnerCredential(options.home);
  // A running stack keeps the model it was started with; OZ0_MODEL_SCRIPT is for stacks started here, so it alone is
  // no error (a shell may keep it exported), but it is said to be unused: a job answered by another model than the
  // script the person named, in silence, read as the script's.
  const noScriptThere = (where: string): string[] => {
    if (options.modelScript) {
      throw new CliError(
        `--model-script works only on a stack this command starts, but commands go to ${where}: start that stack with \`oz0 dev --model-script FILE\` instead`,
        EXIT.usage,
      );
    }
    return process.env[MODEL_SCRIPT_VARIABLE]?.trim()
      ? [
          `${MODEL_SCRIPT_VARIABLE} is not used: commands go to ${where}, which answers with the model it was started with (\`oz0 dev --model-script FILE\` starts one on a script)`,
        ]
      : [];
  };
  if (fromEnv) {
    const target = orchestratorUrl(fromEnv);
    const notes = noScriptThere(`${fromEnv} (OZ0_URL)`);
    const credential = credentialForUrl({
      url: fromEnv,
      token,
      login,
      ownerCredential: () => readOwnerCredential(options.home),
    });
    // Every call but health needs a credential: without one, nothing would work there.
    if (credential === undefined)
      throw new CliError(
        `${target.origin} (OZ0_URL) is not on this machine, so this machine's owner credential is not sent to it, and no other is set: set OZ0_TOKEN, or \`oz0 login --url ${fromEnv}\``,
        EXIT.usage,
      );
    return {
      url: fromEnv,
      mode: "url",
      home: options.home,
      clients: clientsFor(fromEnv, credential),
      notes,
      close: async () => {},
    };
  }
  if (login) {
    const notes = noScriptThere(`${login.url} (oz0 login)`);
    return {
      url: login.url,
      mode: "login",
      home: options.home,
      clients: clientsFor(login.url, token ?? login.token),
      notes,
      close: async () => {},
    };
  }
  const dev = readDiscovery(options.home);
  if (dev) {
    const notes = noScriptThere(`the oz0 dev at ${dev.url}`);
    return {
      url: dev.url,
      mode: "dev",
      home: options.home,
      clients: clientsFor(dev.url, local()),
      notes,
      close: async () => {},
    };
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
    home: options.home,
    clients,
    notes: [...defaults.notes, ...(isolationNotice(stack) ? [isolationNotice(stack)!] : [])],
    close: () => stack.close(),
  };
}
