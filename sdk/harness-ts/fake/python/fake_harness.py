#!/usr/bin/env python3
"""A complete Orchestrator Zero harness in plain Python (standard library only).

It reads the SessionRequest line from stdin, writes SessionEvent lines to
stdout, calls the model on the route the request's model names (OpenAI Chat
Completions at {openaiBaseUrl}/chat/completions for `openai/...` models, the
Anthropic Messages API at {anthropicBaseUrl}/v1/messages for the others) with
its headers and token, asks permission before every tool call, and passes the
same conformance kit as the TypeScript fake harness, on both routes.
"""
import http.client, json, os, signal, subprocess, sys, urllib.parse

state = {"result_sent": False, "turns": 0, "ids": 0, "usage": {}}


def emit(**event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def finish(stop_reason, text="", error="", structured=None):
    if state["result_sent"]:
        return
    state["result_sent"] = True
    totals = [{"model": m, "inputTokens": str(u[0]), "outputTokens": str(u[1])} for m, u in state["usage"].items()]
    result = {"stopReason": stop_reason, "text": text, "error": error, "turns": state["turns"], "usage": totals}
    if structured is not None:
        result["structuredOutput"] = structured
    emit(result=result)


def on_sigterm(*_):  # rule 5: exactly one cancelled result, then exit
    finish("STOP_REASON_CANCELLED", error="cancelled by the runtime")
    os._exit(0)


def ask(kind, answer_kind, payload):
    """Writes a request with a fresh id and reads stdin until its answer."""
    state["ids"] += 1
    request_id = f"{kind}-{state['ids']}"
    emit(**{kind: {"id": request_id, **payload}})
    for line in sys.stdin:
        answer = json.loads(line).get(answer_kind)
        if answer and answer.get("id") == request_id:
            return answer
    raise RuntimeError("the runtime closed stdin before answering")


def inside(root, path):
    full = os.path.realpath(os.path.join(root, path))
    if os.path.commonpath([root, full]) != root:
        raise ValueError(f"{path} is outside the working directory")
    return full


def run_tool(root, name, args):
    if name == "read_file":
        with open(inside(root, args["path"])) as f:
            return f.read()
    if name == "write_file":
        path = inside(root, args["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(args.get("content", ""))
        return "wrote " + args["path"]
    if name == "run_command":
        done = subprocess.run(["/bin/sh", "-c", args["command"]], cwd=root, capture_output=True, text=True, timeout=120)
        output = f"exit code {done.returncode}\n{done.stdout}{done.stderr}"
        if done.returncode != 0:
            # A command that exits non-zero is a failed call: its output is the error.
            raise RuntimeError(output)
        return output
    raise ValueError("unknown tool " + name)


def to_openai(system, messages, tools):
    """The conversation (kept in the Messages form) as a Chat Completions body's messages and tools."""
    out = [{"role": "system", "content": system}] if system else []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            out.append({"role": message["role"], "content": content})
        elif message["role"] == "assistant":
            text = "".join(block.get("text", "") for block in content if block["type"] == "text")
            calls = [{"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b["input"])}}
                     for b in content if b["type"] == "tool_use"]
            out.append({"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})})
        else:
            out += [{"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]} for b in content if b["type"] == "tool_result"]
    functions = [{"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]}} for t in tools]
    return out, functions


def from_openai(reply):
    """A Chat Completions answer as Messages content blocks and (input, output) tokens."""
    message = reply["choices"][0]["message"]
    content = [{"type": "text", "text": message["content"]}] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        try:
            args = json.loads(call["function"].get("arguments") or "{}")
        except ValueError:
            args = {}
        content.append({"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": args if isinstance(args, dict) else {}})
    usage = reply.get("usage") or {}
    return content, (usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))


# One connection per origin, kept for the whole session as the official SDKs
# keep theirs: a new connection per model call costs the sandbox's forwarder
# and the LLM proxy a connect, an accept and a close each time.
connections = {}


def post_json(url, body, headers):
    """POSTs body as JSON on the origin's kept connection; returns the parsed answer, raises on a status other than 2xx."""
    parts = urllib.parse.urlsplit(url)
    origin = (parts.scheme, parts.netloc)
    target = parts.path + ("?" + parts.query if parts.query else "")
    data = json.dumps(body).encode()
    while True:
        conn = connections.get(origin)
        reused = conn is not None
        if not reused:
            kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            conn = connections[origin] = kind(parts.netloc)
        try:
            conn.request("POST", target, data, headers)
            response = conn.getresponse()
        except (http.client.RemoteDisconnected, http.client.CannotSendRequest, ConnectionResetError, BrokenPipeError):
            conn.close()
            del connections[origin]
            if reused:
                continue  # the server closed the kept connection between two calls: once more, on a new one
            raise
        # Not sent again once its answer began: the call was received (and may be billed).
        try:
            payload = response.read()
        except Exception:
            conn.close()
            del connections[origin]
            raise
        if response.will_close:
            conn.close()
            del connections[origin]
        if not 200 <= response.status < 300:
            raise RuntimeError(f"{url} answered {response.status} {response.reason}: {payload[:500].decode(errors='replace')}")
        return json.loads(payload)


def call_model(llm, provider, model, system, messages, tools):
    """One model call on the route the model's provider names; returns content blocks and (input, output) tokens."""
    auth = {**llm.get("headers", {}), "x-api-key": llm.get("token", ""), "content-type": "application/json"}
    if provider == "openai":
        chat, functions = to_openai(system, messages, tools)
        body = {"model": model, "max_tokens": 4096, "messages": chat, "tools": functions}
        url = llm["openaiBaseUrl"].rstrip("/") + "/chat/completions"
        return from_openai(post_json(url, body, auth))
    body = {"model": model, "max_tokens": 4096, "system": system, "messages": messages, "tools": tools}
    url = llm["anthropicBaseUrl"].rstrip("/") + "/v1/messages"
    reply = post_json(url, body, {**auth, "anthropic-version": "2023-06-01"})
    usage = reply.get("usage", {})
    return reply["content"], (usage.get("input_tokens", 0), usage.get("output_tokens", 0))


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    req = json.loads(sys.stdin.readline())
    if req.get("protocolVersion") not in ("PROTOCOL_VERSION_1", 1):
        return finish("STOP_REASON_ERROR", error="this harness speaks PROTOCOL_VERSION_1 only")
    emit(started={"protocolVersion": "PROTOCOL_VERSION_1", "harnessName": "oz0-fake-harness-python", "harnessVersion": "0.1.0",
                  "capabilities": {"permissions": True, "runtimeTools": True, "structuredOutput": True}})
    llm, schema, root = req.get("llm", {}), req.get("outputSchema"), os.path.realpath(req.get("workingDir") or os.getcwd())
    runtime = {tool["name"] for tool in req.get("runtimeTools", [])}
    tools = [{"name": n, "description": n.replace("_", " "), "input_schema": {"type": "object"}} for n in ("read_file", "write_file", "run_command")]
    tools += [{"name": t["name"], "description": t.get("description", ""), "input_schema": t.get("inputSchema", {"type": "object"})} for t in req.get("runtimeTools", [])]
    system = req.get("instructions", "") + (f"\nAnswer with only JSON valid against {json.dumps(schema)}" if schema else "")
    primary = req.get("model", {}).get("primary", "")
    messages, model, provider = [{"role": "user", "content": req.get("input", "")}], primary.split("/")[-1], primary.split("/")[0] if "/" in primary else ""
    max_turns = req.get("limits", {}).get("maxTurns") or 25
    while state["turns"] < max_turns:
        state["turns"] += 1
        content, (input_tokens, output_tokens) = call_model(llm, provider, model, system, messages, tools)
        total = state["usage"].setdefault(model, [0, 0])
        total[0] += input_tokens
        total[1] += output_tokens
        emit(usage={"model": model, "inputTokens": str(input_tokens), "outputTokens": str(output_tokens)})
        messages.append({"role": "assistant", "content": content})
        text = "".join(block.get("text", "") for block in content if block["type"] == "text")
        if text:
            emit(text={"itemId": f"turn-{state['turns']}", "text": text})
        calls = [block for block in content if block["type"] == "tool_use"]
        if not calls:
            return finish("STOP_REASON_COMPLETED", text, structured=json.loads(text) if schema else None)
        results = []
        for call in calls:
            emit(toolCall={"callId": call["id"], "tool": call["name"], "input": call["input"]})
            args, output, is_error = call["input"], "", False
            if req.get("permissions"):  # rule 6: ask first, run only when allowed, with the answer's input
                answer = ask("permissionRequest", "permissionAnswer", {"tool": call["name"], "input": args, "callId": call["id"]})
                if not (answer.get("allow") and answer.get("outcome") == "OUTCOME_ANSWERED"):
                    output, is_error = "Permission denied: " + answer.get("reason", ""), True
                args = answer.get("input") or args
            if not is_error:
                try:
                    if call["name"] in runtime:
                        got = ask("runtimeToolCall", "runtimeToolResult", {"name": call["name"], "input": args})
                        output, is_error = (got.get("error", ""), True) if got.get("isError") else (json.dumps(got.get("output")), False)
                    else:
                        output = run_tool(root, call["name"], args)
                except Exception as error:  # the model sees what went wrong
                    output, is_error = str(error), True
            emit(toolResult={"callId": call["id"], "output": output, "isError": is_error})
            results.append({"type": "tool_result", "tool_use_id": call["id"], "content": output, "is_error": is_error})
        messages.append({"role": "user", "content": results})
    finish("STOP_REASON_MAX_TURNS", error=f"stopped after {max_turns} turns")


if __name__ == "__main__":
    try:
        main()
    except Exception as error:
        finish("STOP_REASON_ERROR", error=str(error))
        sys.exit(1)
