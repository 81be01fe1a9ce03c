// ACP `session/update` notifications as harness protocol events: message
// chunks become text deltas with an item id, tool calls and their updates
// become one tool call and one tool result each, a plan becomes a text item,
// and usage updates become usage. Anything it cannot read ends the session.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { HarnessSession } from "@oz0/harness";
import { AcpSessionError } from "./acp-errors.js";

/** The part of the harness session the mapper writes to (a fake in unit tests). */
export type EventSink = Pick<HarnessSession, "text" | "toolCall" | "toolResult" | "usage" | "log">;

/** Update kinds of ACP v1 (stable and unstable) that carry nothing for the runtime. */
const IGNORED_KINDS = new Set([
  "user_message_chunk",
  "available_commands_update",
  "session_info_update",
  "notice",
  "compaction_update",
  "compaction_summary_chunk",
  "state_update",
]);

const TERMINAL_STATUSES = new Set(["completed", "failed"]);
/** ACP's tool call statuses; any other is refused (the fail-closed check below must know what each means). */
const KNOWN_STATUSES = new Set(["pending", "in_progress", "completed", "failed"]);
/** Statuses that say a tool call ran: only a call the runtime allowed may reach them. */
const RUN_STATUSES = new Set(["in_progress", "completed"]);

/**
 * How long a permission request waits for the `tool_call` of its call.
 * claude-agent-acp sends its permission requests and its session updates from
 * two loops, and under load a request overtakes the update that announces
 * its call by some milliseconds; the update carries the tool's own name
 * (`Bash`, not the kind `execute`), which policies match on, so the request
 * waits for it rather than naming the call itself.
 */
export const ANNOUNCEMENT_GRACE_MS = 5_000;

/** Input fields that name a file in the tool inputs of common agents (Claude Code, Gemini CLI, ours). */
const INPUT_PATH_KEYS = ["file_path", "notebook_path", "path", "absolute_path"];

/** What the harness knows about one ACP tool call. */
export interface TrackedToolCall {
  id: string;
  tool: string;
  title: string;
  kind: string;
  status: string;
  input: JsonObject;
  inputSeen: boolean;
  content: unknown[];
  /** Paths the call touches: ACP `locations`, and file paths in its input. */
  paths: string[];
  rawOutput: unknown;
  /** The protocol `tool_call` is out. */
  announced: boolean;
  /** The protocol `tool_result` is out. */
  finished: boolean;
  /** What the permission bridge answered: `allowed` only when the runtime allowed this call. */
  permission: "none" | "allowed" | "refused";
}

interface TextItem {
  id: string;
  messageId: string | undefined;
  text: string;
}

type RawRecord = Record<string, unknown>;

function isRecord(value: unknown): value is RawRecord {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function str(value: unknown): string | undefined {
  return typeof value === "string" ? value : undefined;
}

/** A tool input as a JSON object: objects as they are, anything else wrapped. */
function asInput(value: unknown): JsonObject {
  if (isRecord(value)) return JSON.parse(JSON.stringify(value)) as JsonObject;
  return value === undefined || value === null ? {} : { input: JSON.parse(JSON.stringify(value)) as JsonValue };
}

/** Maps one ACP session's updates; keep one per session. */
export class SessionUpdateMapper {
  readonly #sink: EventSink;
  readonly #model: string;
  readonly #toolCalls = new Map<string, TrackedToolCall>();
  /** Permission requests waiting for their call's `tool_call`, by tool call id. */
  readonly #awaitingAnnouncement = new Map<string, Array<() => void>>();
  #assistant: TextItem | undefined;
  #thinking: TextItem | undefined;
  #nextItem = 1;
  #finalText = "";
  #reportedCostUsd = 0;
  /** The mode the session must stay in (set once `session/new` is settled); undefined before. */
  #sessionMode: string | undefined;
  #modeSettled = false;
  /** The last mode the agent reported before the session's mode was settled. */
  #reportedMode: string | undefined;

  constructor(options: { sink: EventSink; model: string }) {
    this.#sink = options.sink;
    this.#model = options.model;
  }

  /** The model's final text: the last assistant text item. */
  get finalText(): string {
    return this.#finalText;
  }

  /** The tool call with this id, when the agent announced it. */
  toolCall(id: string): TrackedToolCall | undefined {
    return this.#toolCalls.get(id);
  }

  /** Applies one `session/update` notification's params. Throws {@link AcpSessionError} on bad input. */
  apply(params: unknown): void {
    const update = isRecord(params) ? params["update"] : undefined;
    if (!isRecord(update))
      throw new AcpSessionError("invalid_message", "a session/update notification has no update object");
    const kind = str(update["sessionUpdate"]);
    if (kind === undefined) throw new AcpSessionError("invalid_message", "a session/update has no sessionUpdate kind");
    switch (kind) {
      case "agent_message_chunk":
        this.#chunk(update, "assistant");
        return;
      case "agent_thought_chunk":
        this.#chunk(update, "thinking");
        return;
      case "tool_call":
        this.#toolCallUpdate(update, true);
        return;
      case "tool_call_update":
        this.#toolCallUpdate(update, false);
        return;
      case "plan":
        this.#plan(update);
        return;
      case "usage_update":
        this.#usageUpdate(update);
        return;
      case "current_mode_update":
        this.#modeUpdate(str(update["currentModeId"]) ?? "");
        return;
      case "config_option_update":
        this.#configOptionUpdate(update);
        return;
      default:
        if (IGNORED_KINDS.has(kind)) return;
        // `_`-prefixed names are ACP extensions, which a client may ignore.
        if (kind.startsWith("_")) return;
        throw new AcpSessionError(
          "unknown_update",
          `the agent sent a session/update of unknown kind ${JSON.stringify(kind)}; this harness speaks ACP v1`,
        );
    }
  }

  /**
   * Merges the tool call of a permission request (a ToolCallUpdate) and makes
   * sure its protocol `tool_call` is out, waiting up to
   * {@link ANNOUNCEMENT_GRACE_MS} for the agent to announce the call.
   * Undefined when `signal` aborts first; throws when it was never announced.
   */
  async toolCallForPermission(toolCall: unknown, signal: AbortSignal): Promise<TrackedToolCall | undefined> {
    if (!isRecord(toolCall) || str(toolCall["toolCallId"]) === undefined) {
      throw new AcpSessionError("invalid_message", "a session/request_permission has no toolCall.toolCallId");
    }
    const id = toolCall["toolCallId"] as string;
    if (!this.#toolCalls.has(id) && !(await this.#announced(id, signal))) return undefined;
    const tracked = this.#toolCalls.get(id);
    if (tracked === undefined) {
      throw new AcpSessionError(
        "unannounced_tool_call",
        `the agent asked permission for tool call ${JSON.stringify(id)}, which it never announced with a tool_call update`,
      );
    }
    this.#merge(tracked, toolCall);
    this.#announce(tracked);
    return tracked;
  }

  /** Resolves once `id` is tracked or the grace is over (true), or when `signal` aborts (false). */
  #announced(id: string, signal: AbortSignal): Promise<boolean> {
    if (signal.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const waiters = this.#awaitingAnnouncement.get(id) ?? [];
      this.#awaitingAnnouncement.set(id, waiters);
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener("abort", aborted);
        const left = (this.#awaitingAnnouncement.get(id) ?? []).filter((w) => w !== done);
        if (left.length > 0) this.#awaitingAnnouncement.set(id, left);
        else this.#awaitingAnnouncement.delete(id);
        resolve(!signal.aborted);
      };
      const aborted = (): void => done();
      const timer = setTimeout(done, ANNOUNCEMENT_GRACE_MS);
      signal.addEventListener("abort", aborted, { once: true });
      waiters.push(done);
    });
  }

  /** The mode the agent reported with `current_mode_update` before {@link settleMode}, if any. */
  get reportedMode(): string | undefined {
    return this.#reportedMode;
  }

  /**
   * From here on the session stays in `mode` (the agent's mode that asks
   * before every tool call; undefined when the agent has no modes): any
   * `current_mode_update` to another mode ends the session.
   */
  settleMode(mode: string | undefined): void {
    this.#sessionMode = mode;
    this.#modeSettled = true;
  }

  /** Token counts of the prompt turn, from `PromptResponse.usage` (an ACP addition some agents send). */
  promptUsage(usage: unknown): void {
    if (!isRecord(usage)) return;
    // A count the protocol cannot carry (fractional, negative, past 2^53) would fail the whole session
    // after its work is done: the harness SDK cannot encode it, or the runtime refuses the event.
    const unreadable: string[] = [];
    const n = (key: string): number => {
      const value = usage[key];
      if (value === undefined || value === null) return 0;
      if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) return value;
      unreadable.push(`${key}=${JSON.stringify(value)}`);
      return 0;
    };
    const counts = {
      inputTokens: n("inputTokens"),
      outputTokens: n("outputTokens"),
      cacheReadTokens: n("cachedReadTokens"),
      cacheWriteTokens: n("cachedWriteTokens"),
      reasoningTokens: n("thoughtTokens"),
    };
    if (unreadable.length > 0)
      this.#sink.log(
        "warn",
        "the prompt's usage has token counts that are not whole numbers of 0 or more; counted as 0",
        {
          counts: unreadable.join(", "),
        },
      );
    this.#sink.usage({ model: this.#model, ...counts });
  }

  #chunk(update: RawRecord, role: "assistant" | "thinking"): void {
    const content = update["content"];
    if (!isRecord(content))
      throw new AcpSessionError("invalid_message", `an ${String(update["sessionUpdate"])} has no content block`);
    if (content["type"] !== "text") {
      this.#sink.log("debug", "ignored a non-text content chunk", { type: content["type"] });
      return;
    }
    const text = str(content["text"]) ?? "";
    const messageId = str(update["messageId"]);
    let item = role === "assistant" ? this.#assistant : this.#thinking;
    if (item === undefined || (messageId !== undefined && item.messageId !== messageId)) {
      item = { id: `item-${this.#nextItem++}`, messageId, text: "" };
      if (role === "assistant") this.#assistant = item;
      else this.#thinking = item;
    }
    // The other kind of text starts a new item when it comes back.
    if (role === "assistant") this.#thinking = undefined;
    else this.#assistant = undefined;
    item.text += text;
    if (role === "assistant") this.#finalText = item.text;
    if (text !== "") this.#sink.text(text, { itemId: item.id, delta: true, role });
  }

  #toolCallUpdate(update: RawRecord, isNew: boolean): void {
    const id = str(update["toolCallId"]);
    if (id === undefined || id === "")
      throw new AcpSessionError("invalid_message", `a ${String(update["sessionUpdate"])} has no toolCallId`);
    this.#assistant = undefined;
    this.#thinking = undefined;
    let tracked = this.#toolCalls.get(id);
    if (tracked?.finished === true) this.#refuseReuse(tracked, update, isNew);
    if (tracked === undefined) {
      if (!isNew)
        this.#sink.log("warn", "a tool_call_update for a tool call never announced; tracking it from here", {
          toolCallId: id,
        });
      tracked = {
        id,
        tool: "",
        title: "",
        kind: "",
        status: "pending",
        input: {},
        inputSeen: false,
        content: [],
        paths: [],
        rawOutput: undefined,
        announced: false,
        finished: false,
        permission: "none",
      };
      this.#toolCalls.set(id, tracked);
    }
    this.#merge(tracked, update);
    // A permission request that came first goes on once this update is applied (below, synchronously).
    for (const waiter of this.#awaitingAnnouncement.get(id) ?? []) queueMicrotask(waiter);
    if (!KNOWN_STATUSES.has(tracked.status))
      throw new AcpSessionError(
        "invalid_message",
        `the agent reported tool call ${JSON.stringify(id)} with status ${JSON.stringify(tracked.status.slice(0, 40))}, which is none of ACP's (pending, in_progress, completed, failed)`,
      );
    if (RUN_STATUSES.has(tracked.status) && tracked.permission !== "allowed") {
      // Fail closed: whatever let the agent skip asking (its mode, its own
      // rules, a tool it does not ask for), the runtime must not see a call
      // run that it never allowed. A call that goes from pending straight to
      // `failed` unasked is reported as failed: Claude Code rejects an input
      // before asking (an Edit of a file not read yet), and the claude preset
      // makes every tool of the session ask, so it did not run.
      throw new AcpSessionError(
        "unpermitted_tool_call",
        `the agent reported tool call ${JSON.stringify(id)} (${toolName(tracked)}) as ${tracked.status} without ${
          tracked.permission === "refused" ? "being allowed" : "asking permission"
        } for it; this harness lets no tool call run unless the runtime allowed it: run the agent in a mode that asks before every tool call`,
      );
    }
    // Agents stream a tool call before its input is known (claude-agent-acp
    // announces it at content_block_start with `{}`); the protocol event
    // waits for the input, a permission request or progress, whichever is first.
    if (tracked.inputSeen || tracked.status !== "pending") this.#announce(tracked);
    if (TERMINAL_STATUSES.has(tracked.status) && !tracked.finished) {
      tracked.finished = true;
      this.#sink.toolResult({ callId: id, output: toolOutput(tracked), isError: tracked.status === "failed" });
    }
  }

  /**
   * A finished call's id announced again, or set pending or running again: a second call
   * under that id. Its permission and its result would be the first call's,
   * so it would pass the fail-closed check and reach the runtime not at all.
   */
  #refuseReuse(tracked: TrackedToolCall, update: RawRecord, isNew: boolean): void {
    const status = str(update["status"]);
    if (!isNew && status !== "pending" && status !== "in_progress") return;
    const what = isNew
      ? `announced tool call ${JSON.stringify(tracked.id)} again`
      : `reported tool call ${JSON.stringify(tracked.id)} as ${status}`;
    throw new AcpSessionError(
      "invalid_message",
      `the agent ${what} after it finished (${tracked.status}); tool call ids must be unique in a session: a call reusing an id would run unasked and unseen, under the first call's permission and result`,
    );
  }

  #merge(tracked: TrackedToolCall, update: RawRecord): void {
    const title = str(update["title"]);
    if (title !== undefined) tracked.title = title;
    const kind = str(update["kind"]);
    if (kind !== undefined) tracked.kind = kind;
    const status = str(update["status"]);
    if (status !== undefined) tracked.status = status;
    const meta = isRecord(update["_meta"]) ? update["_meta"] : {};
    const claude = isRecord(meta["claudeCode"]) ? meta["claudeCode"] : {};
    const name = str(update["name"]) ?? str(claude["toolName"]);
    if (name !== undefined && name !== "") tracked.tool = name;
    if (update["rawInput"] !== undefined && update["rawInput"] !== null) {
      const input = asInput(update["rawInput"]);
      if (Object.keys(input).length > 0 || !tracked.inputSeen) {
        tracked.input = input;
        tracked.inputSeen = Object.keys(input).length > 0;
      }
    }
    if (Array.isArray(update["content"])) tracked.content = update["content"] as unknown[];
    const paths = new Set(tracked.paths);
    if (Array.isArray(update["locations"])) {
      for (const location of update["locations"])
        if (isRecord(location) && typeof location["path"] === "string") paths.add(location["path"]);
    }
    for (const key of INPUT_PATH_KEYS) if (typeof tracked.input[key] === "string") paths.add(tracked.input[key]);
    // Claude Code's Glob takes an absolute pattern (`/etc/*`) or one that climbs (`../*`) as a place to look.
    const pattern = tracked.input["pattern"];
    if (tracked.tool === "Glob" && typeof pattern === "string") {
      const base = globBase(pattern);
      const within = typeof tracked.input["path"] === "string" && !/^[/~]/.test(base) ? tracked.input["path"] : "";
      if (base !== "") paths.add(within !== "" ? `${within}/${base}` : base);
    }
    tracked.paths = [...paths];
    if (update["rawOutput"] !== undefined) tracked.rawOutput = update["rawOutput"];
  }

  #announce(tracked: TrackedToolCall): void {
    if (tracked.announced) return;
    tracked.announced = true;
    this.#sink.toolCall({ callId: tracked.id, tool: toolName(tracked), input: tracked.input, title: tracked.title });
  }

  #plan(update: RawRecord): void {
    const entries = Array.isArray(update["entries"]) ? update["entries"] : [];
    const lines = entries.filter(isRecord).map((entry) => {
      const mark = entry["status"] === "completed" ? "x" : entry["status"] === "in_progress" ? "~" : " ";
      return `- [${mark}] ${str(entry["content"]) ?? ""}`;
    });
    this.#assistant = undefined;
    this.#thinking = undefined;
    // A whole item of its own: shown in the stream, never taken as the final answer.
    this.#sink.text(`Plan:\n${lines.join("\n")}`, { itemId: `plan-${this.#nextItem++}` });
  }

  #modeUpdate(mode: string): void {
    if (!this.#modeSettled) {
      this.#reportedMode = mode;
      return;
    }
    if (mode === this.#sessionMode) return;
    throw new AcpSessionError(
      "permission_mode",
      `the agent switched to session mode ${JSON.stringify(mode)}${
        this.#sessionMode !== undefined ? ` from ${JSON.stringify(this.#sessionMode)}` : ""
      }; this harness runs agents only in the mode that asks before every tool call`,
    );
  }

  /** A `config_option_update` that carries the session mode (category or id `mode`) is checked like `current_mode_update`. */
  #configOptionUpdate(update: RawRecord): void {
    const options = Array.isArray(update["configOptions"]) ? update["configOptions"] : [];
    for (const option of options) {
      if (!isRecord(option) || (option["category"] !== "mode" && option["id"] !== "mode")) continue;
      const value = str(option["currentValue"]);
      if (value !== undefined) this.#modeUpdate(value);
    }
  }

  #usageUpdate(update: RawRecord): void {
    // `used`/`size` describe the context window; the only figure that adds up
    // across calls is the cost, which agents report as a running total.
    const cost = isRecord(update["cost"]) ? update["cost"] : undefined;
    const amount = typeof cost?.["amount"] === "number" ? cost["amount"] : undefined;
    this.#sink.log("debug", "context window", { used: update["used"], size: update["size"] });
    if (amount === undefined || cost?.["currency"] !== "USD" || amount <= this.#reportedCostUsd) return;
    this.#sink.usage({ model: this.#model, costUsd: amount - this.#reportedCostUsd });
    this.#reportedCostUsd = amount;
  }
}

/** The literal directories a glob pattern starts with (`/etc/` of `/etc/host*`), when it is absolute or climbs. */
export function globBase(pattern: string): string {
  if (!pattern.startsWith("/") && !pattern.startsWith("~") && !pattern.split("/").includes("..")) return "";
  const segments = pattern.split("/");
  const literal = segments.findIndex((segment) => /[*?[\]{}]/.test(segment));
  const kept = literal === -1 ? segments : segments.slice(0, literal);
  return kept.join("/") || "/";
}

/** The harness's tool name: the agent's own name for it, else its ACP kind. */
export function toolName(tracked: Pick<TrackedToolCall, "tool" | "kind">): string {
  return tracked.tool !== "" ? tracked.tool : tracked.kind !== "" ? tracked.kind : "tool";
}

/** A tool result's output: status, kind, title, the text it produced and the files it changed. */
export function toolOutput(tracked: TrackedToolCall): JsonObject {
  const texts: string[] = [];
  const files: string[] = [];
  for (const item of tracked.content) {
    if (!isRecord(item)) continue;
    if (item["type"] === "diff" && typeof item["path"] === "string") files.push(item["path"]);
    else if (item["type"] === "content" && isRecord(item["content"]) && typeof item["content"]["text"] === "string")
      texts.push(item["content"]["text"]);
  }
  const output: JsonObject = { status: tracked.status };
  if (tracked.kind !== "") output["kind"] = tracked.kind;
  if (tracked.title !== "") output["title"] = tracked.title;
  if (texts.length > 0) output["text"] = texts.join("\n");
  // Diffs are summarised as the paths they change; the files themselves are in the working directory.
  if (files.length > 0) output["files"] = files;
  if (tracked.rawOutput !== undefined && texts.length === 0)
    output["output"] = JSON.parse(JSON.stringify(tracked.rawOutput)) as JsonValue;
  return output;
}
