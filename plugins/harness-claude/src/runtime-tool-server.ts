// Runtime tools (SessionRequest.runtime_tools) offered to the model through an
// in-process SDK MCP server; each call goes to the runtime over the protocol.
import type { JsonObject } from "@bufbuild/protobuf";
import type { RuntimeTool } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { createSdkMcpServer, tool, type McpSdkServerConfigWithInstance } from "@anthropic-ai/claude-agent-sdk";
import { z } from "zod";
import type { ClaudeSessionHost } from "./session-port.js";

/** The MCP server's name; Claude Code calls its tools `mcp__oz0__<name>`. */
export const RUNTIME_TOOL_SERVER = "oz0";
const PREFIX = `mcp__${RUNTIME_TOOL_SERVER}__`;

/** The names of one session's runtime tools, as the runtime and as Claude Code call them. */
export interface RuntimeToolNames {
  /** The runtime's name for a name the model used, or undefined when it is not a runtime tool. */
  runtimeName(sdkName: string): string | undefined;
  /**
   * Claude Code offers MCP tools as `mcp__oz0__<name>`; a model that calls a
   * runtime tool by the plain name the runtime gave it (as the protocol's
   * "model-facing name" invites) is routed to it too.
   */
  aliases: Record<string, string>;
}

export function runtimeToolNames(tools: readonly RuntimeTool[], reserved: ReadonlySet<string>): RuntimeToolNames {
  const plain = new Set(tools.map((t) => t.name));
  const aliases: Record<string, string> = {};
  // A plain name that is also one of Claude Code's own tools keeps meaning that tool.
  for (const name of plain) if (!reserved.has(name)) aliases[name] = `${PREFIX}${name}`;
  return {
    runtimeName(sdkName) {
      if (sdkName.startsWith(PREFIX) && plain.has(sdkName.slice(PREFIX.length))) return sdkName.slice(PREFIX.length);
      return aliases[sdkName] !== undefined ? sdkName : undefined;
    },
    aliases,
  };
}

/** Thrown when a runtime tool's input schema cannot be offered to the model. */
export class RuntimeToolSchemaError extends Error {
  readonly code = "invalid_runtime_tool";
  constructor(
    readonly tool: string,
    detail: string,
  ) {
    super(`runtime tool ${tool}: ${detail}`);
    this.name = "RuntimeToolSchemaError";
  }
}

function inputShape(runtimeTool: RuntimeTool): z.ZodRawShape {
  const schema = runtimeTool.inputSchema ?? { type: "object", properties: {} };
  let converted: z.ZodType;
  try {
    converted = z.fromJSONSchema(schema as Parameters<typeof z.fromJSONSchema>[0]);
  } catch (error) {
    throw new RuntimeToolSchemaError(
      runtimeTool.name,
      `its input schema is not a JSON Schema zod can read (${(error as Error).message})`,
    );
  }
  if (!(converted instanceof z.ZodObject)) {
    throw new RuntimeToolSchemaError(runtimeTool.name, "its input schema must describe an object (`type: object`)");
  }
  return converted.shape;
}

export function createRuntimeToolServer(options: {
  session: Pick<ClaudeSessionHost, "callRuntimeTool">;
  tools: RuntimeTool[];
}): McpSdkServerConfigWithInstance {
  const { session } = options;
  const tools = options.tools.map((runtimeTool) =>
    tool(
      runtimeTool.name,
      runtimeTool.description || runtimeTool.name,
      inputShape(runtimeTool),
      async (args) => {
        const result = await session.callRuntimeTool(
          runtimeTool.name,
          JSON.parse(JSON.stringify(args ?? {})) as JsonObject,
        );
        if (result.isError) {
          return {
            isError: true,
            content: [{ type: "text" as const, text: result.error || `${runtimeTool.name} failed` }],
          };
        }
        const output = result.output ?? null;
        return {
          content: [{ type: "text" as const, text: typeof output === "string" ? output : JSON.stringify(output) }],
        };
      },
      { alwaysLoad: true },
    ),
  );
  return createSdkMcpServer({ name: RUNTIME_TOOL_SERVER, version: "1.0.0", tools, alwaysLoad: true });
}
