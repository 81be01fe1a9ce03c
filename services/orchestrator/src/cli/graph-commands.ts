// `oz0 graph show NAME`: a graph harness drawn for the terminal (renderGraph)
// or as a Mermaid flowchart (--mermaid). Graphs live in the agents' name
// space, so the definition comes from AgentService.GetAgent (runtime `graph`).
import { Code, ConnectError } from "@connectrpc/connect";
import { parseDefinition, renderGraph, toMermaid } from "@oz0/graph";
import { CliError } from "./cli-error.js";
import type { Output } from "./commands.js";
import type { Connection } from "./connection.js";
import { terminalText } from "./terminal-text.js";

export async function graphShow(options: {
  conn: Connection;
  name: string;
  version?: number;
  mermaid: boolean;
  io: Output;
}): Promise<number> {
  let agent;
  try {
    ({ agent } = await options.conn.clients.agents.getAgent({ name: options.name, version: options.version ?? 0 }));
  } catch (error) {
    if (ConnectError.from(error).code === Code.NotFound)
      throw new CliError(
        `unknown graph "${options.name}"; install the plugin that declares it (graphs: in oz0-plugin.yaml) with \`oz0 plugin install\``,
      );
    throw error;
  }
  if (!agent || agent.runtime !== "graph")
    throw new CliError(`${options.name} is an agent, not a graph; see \`oz0 agents show ${options.name}\``);
  const definition = parseDefinition(agent.definition ?? {});
  if (options.mermaid) {
    // Node ids and names are the plugin's words: inert.
    options.io.out.write(`${terminalText(toMermaid(definition))}\n`);
  } else {
    options.io.out.write(
      terminalText(
        `${agent.name} v${agent.version} (plugin ${agent.plugin} ${agent.pluginVersion})\n${renderGraph(definition)}\n`,
      ),
    );
  }
  return 0;
}
