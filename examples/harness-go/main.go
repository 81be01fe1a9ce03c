// A complete Orchestrator Zero harness in Go, on the standard library only.
//
// It reads the SessionRequest from stdin, writes SessionEvents to stdout (one
// JSON line each), calls the model on the route the request's model names
// (OpenAI Chat Completions for `openai/...` models, the Anthropic Messages API
// for the others) with its token and headers, offers the model two file tools confined to the
// working directory (read_file, write_file) and the runtime's tools, asks
// before every tool call, and ends with exactly one result, also on SIGTERM.
// It passes the whole conformance kit:
//
//	go build -o harness . && npx oz0-harness-conformance -- ./harness
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// The parts of the SessionRequest this harness reads. Fields left out of a
// line are their zero value (proto3 JSON omits defaults); unknown fields are
// ignored (rule 2).
type sessionRequest struct {
	ProtocolVersion json.RawMessage `json:"protocolVersion"`
	Model           struct {
		Primary string `json:"primary"`
	} `json:"model"`
	Instructions string `json:"instructions"`
	Input        string `json:"input"`
	WorkingDir   string `json:"workingDir"`
	Limits       struct {
		MaxTurns int `json:"maxTurns"`
	} `json:"limits"`
	Permissions bool `json:"permissions"`
	LLM         struct {
		AnthropicBaseURL string            `json:"anthropicBaseUrl"`
		OpenAIBaseURL    string            `json:"openaiBaseUrl"`
		Token            string            `json:"token"`
		Headers          map[string]string `json:"headers"`
	} `json:"llm"`
	RuntimeTools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
	} `json:"runtimeTools"`
	OutputSchema json.RawMessage `json:"outputSchema"`
}

// One content block of a Messages API answer.
type block struct {
	Type  string          `json:"type"`
	Text  string          `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

type modelReply struct {
	Content []block `json:"content"`
	Usage   struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

// The session's output: one event per line, nothing after the result.
type session struct {
	mu         sync.Mutex
	out        *bufio.Writer
	resultSent bool
	turns      int
	model      string
	inTokens   int64
	outTokens  int64
	nextID     int
	stdin      *bufio.Reader
}

func (s *session) emit(event map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.write(event)
}

// write needs s.mu held.
func (s *session) write(event map[string]any) {
	if s.resultSent {
		return
	}
	line, _ := json.Marshal(event)
	s.out.Write(append(line, '\n'))
	s.out.Flush()
}

// finish writes the one result (with the usage totals and turns), once.
func (s *session) finish(stopReason, text, errText string, structured json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	result := map[string]any{"stopReason": stopReason, "text": text, "error": errText, "turns": s.turns}
	if s.model != "" {
		result["usage"] = []map[string]any{{"model": s.model, "inputTokens": fmt.Sprint(s.inTokens), "outputTokens": fmt.Sprint(s.outTokens)}}
	}
	if structured != nil {
		result["structuredOutput"] = structured
	}
	s.write(map[string]any{"result": result})
	s.resultSent = true
}

// ask writes a request with a fresh id and reads stdin until the answer of that id.
func (s *session) ask(kind, answerKind string, payload map[string]any) (map[string]any, error) {
	s.mu.Lock()
	s.nextID++
	id := fmt.Sprintf("%s-%d", kind, s.nextID)
	s.mu.Unlock()
	payload["id"] = id
	s.emit(map[string]any{kind: payload})
	for {
		line, err := s.stdin.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			// Other top-level fields may be anything (rule 2): decode only the one wanted.
			var message map[string]json.RawMessage
			var answer map[string]any
			if json.Unmarshal(line, &message) == nil && json.Unmarshal(message[answerKind], &answer) == nil && answer["id"] == id {
				return answer, nil
			}
		}
		if err != nil {
			return nil, errors.New("the runtime closed stdin before answering")
		}
	}
}

func main() {
	s := &session{out: bufio.NewWriter(os.Stdout), stdin: bufio.NewReaderSize(os.Stdin, 1<<20)}
	ctx, cancel := context.WithCancel(context.Background())
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	go func() { // rule 5: one cancelled result, then exit
		<-terms
		cancel()
		s.finish("STOP_REASON_CANCELLED", "", "cancelled by the runtime", nil)
		os.Exit(0)
	}()
	if err := run(ctx, s); err != nil {
		s.finish("STOP_REASON_ERROR", "", err.Error(), nil)
		fmt.Fprintln(os.Stderr, "harness-go:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, s *session) error {
	line, err := s.stdin.ReadBytes('\n')
	if len(bytes.TrimSpace(line)) == 0 {
		return fmt.Errorf("no session request on stdin (%v)", err)
	}
	var req sessionRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return fmt.Errorf("the session request is not valid JSON: %v", err)
	}
	// Rule 1: refuse a version this harness does not speak, with a result alone.
	if v := string(req.ProtocolVersion); v != `"PROTOCOL_VERSION_1"` && v != "1" {
		s.finish("STOP_REASON_ERROR", "", "this harness speaks PROTOCOL_VERSION_1, not "+v, nil)
		return nil
	}
	s.emit(map[string]any{"started": map[string]any{
		"protocolVersion": "PROTOCOL_VERSION_1",
		"harnessName":     "oz0-example-harness-go",
		"harnessVersion":  "0.1.0",
		"capabilities":    map[string]bool{"permissions": true, "runtimeTools": true, "structuredOutput": true},
	}})

	root, err := filepath.EvalSymlinks(req.WorkingDir)
	if err != nil {
		return fmt.Errorf("the working directory: %v", err)
	}
	s.model = req.Model.Primary[strings.LastIndex(req.Model.Primary, "/")+1:]
	system := req.Instructions
	if len(req.OutputSchema) > 0 {
		system += "\nAnswer with only a JSON object valid against this JSON Schema: " + string(req.OutputSchema)
	}
	runtime := map[string]bool{}
	tools := []map[string]any{
		{"name": "read_file", "description": "Read a UTF-8 file in the working directory.", "input_schema": json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
		{"name": "write_file", "description": "Write a UTF-8 file in the working directory.", "input_schema": json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}`)},
	}
	for _, t := range req.RuntimeTools {
		runtime[t.Name] = true
		schema := t.InputSchema
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object"}`)
		}
		tools = append(tools, map[string]any{"name": t.Name, "description": t.Description, "input_schema": schema})
	}
	maxTurns := req.Limits.MaxTurns
	if maxTurns == 0 {
		maxTurns = 25
	}
	messages := []map[string]any{{"role": "user", "content": req.Input}}

	for s.turns < maxTurns {
		s.turns++
		reply, status, err := callModel(ctx, &req, map[string]any{"model": s.model, "max_tokens": 4096, "system": system, "messages": messages, "tools": tools})
		if status == http.StatusPaymentRequired { // the LLM proxy's budget_exhausted
			s.finish("STOP_REASON_BUDGET_EXHAUSTED", "", err.Error(), nil)
			return nil
		}
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.inTokens += reply.Usage.InputTokens
		s.outTokens += reply.Usage.OutputTokens
		s.mu.Unlock()
		s.emit(map[string]any{"usage": map[string]any{"model": s.model, "inputTokens": fmt.Sprint(reply.Usage.InputTokens), "outputTokens": fmt.Sprint(reply.Usage.OutputTokens)}})
		messages = append(messages, map[string]any{"role": "assistant", "content": reply.Content})
		var text strings.Builder
		var calls []block
		for _, b := range reply.Content {
			switch b.Type {
			case "text":
				text.WriteString(b.Text)
			case "tool_use":
				calls = append(calls, b)
			}
		}
		if text.Len() > 0 {
			s.emit(map[string]any{"text": map[string]any{"itemId": fmt.Sprintf("turn-%d", s.turns), "text": text.String()}})
		}
		if len(calls) == 0 {
			var structured json.RawMessage
			if len(req.OutputSchema) > 0 {
				var object map[string]any
				if json.Unmarshal([]byte(text.String()), &object) != nil {
					s.finish("STOP_REASON_ERROR", text.String(), "the model's final answer is not the JSON object the output schema asks for", nil)
					return nil
				}
				structured = json.RawMessage(text.String())
			}
			s.finish("STOP_REASON_COMPLETED", text.String(), "", structured)
			return nil
		}
		var results []map[string]any
		for _, call := range calls {
			output, isError := s.toolCall(root, &req, runtime, call)
			s.emit(map[string]any{"toolResult": map[string]any{"callId": call.ID, "output": output, "isError": isError}})
			results = append(results, map[string]any{"type": "tool_result", "tool_use_id": call.ID, "content": output, "is_error": isError})
		}
		messages = append(messages, map[string]any{"role": "user", "content": results})
	}
	s.finish("STOP_REASON_MAX_TURNS", "", fmt.Sprintf("stopped after %d turns", maxTurns), nil)
	return nil
}

// toolCall announces one call, asks permission (rule 6), and runs it or says why not.
func (s *session) toolCall(root string, req *sessionRequest, runtime map[string]bool, call block) (string, bool) {
	input := call.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	s.emit(map[string]any{"toolCall": map[string]any{"callId": call.ID, "tool": call.Name, "input": input}})
	if req.Permissions {
		answer, err := s.ask("permissionRequest", "permissionAnswer", map[string]any{"tool": call.Name, "input": input, "callId": call.ID, "title": call.Name})
		if err != nil {
			return err.Error(), true
		}
		// Only an explicit OUTCOME_ANSWERED can allow: timed out and cancelled deny (rule 7).
		if answer["allow"] != true || answer["outcome"] != "OUTCOME_ANSWERED" {
			reason, _ := answer["reason"].(string)
			return "Permission denied: " + reason, true
		}
		if replacement, ok := answer["input"].(map[string]any); ok {
			input, _ = json.Marshal(replacement)
		}
	}
	if runtime[call.Name] {
		var args map[string]any
		json.Unmarshal(input, &args)
		got, err := s.ask("runtimeToolCall", "runtimeToolResult", map[string]any{"name": call.Name, "input": args})
		if err != nil {
			return err.Error(), true
		}
		if got["isError"] == true {
			message, _ := got["error"].(string)
			return message, true
		}
		output, _ := json.Marshal(got["output"])
		return string(output), false
	}
	output, err := runFileTool(root, call.Name, input)
	if err != nil {
		return err.Error(), true
	}
	return output, false
}

func runFileTool(root, name string, input json.RawMessage) (string, error) {
	var args struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	if err := json.Unmarshal(input, &args); err != nil {
		return "", fmt.Errorf("bad input: %v", err)
	}
	file, err := confine(root, args.Path)
	if err != nil {
		return "", err
	}
	switch name {
	case "read_file":
		data, err := os.ReadFile(file)
		return string(data), err
	case "write_file":
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return "", err
		}
		return "wrote " + args.Path, os.WriteFile(file, []byte(args.Content), 0o644)
	}
	return "", fmt.Errorf("unknown tool %s", name)
}

// confine resolves path inside root, refusing `..`, absolute paths elsewhere
// and symlinks that lead out (the nearest existing ancestor is resolved).
func confine(root, path string) (string, error) {
	target := path
	if !filepath.IsAbs(target) {
		target = filepath.Join(root, path)
	}
	target = filepath.Clean(target)
	existing, rest := target, ""
	for {
		if resolved, err := filepath.EvalSymlinks(existing); err == nil {
			target = filepath.Join(resolved, rest)
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	if rel, err := filepath.Rel(root, target); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%s is outside the working directory", path)
	}
	return target, nil
}

// The request's model names the route: `openai/...` models are called
// through OpenAI Chat Completions at {openaiBaseUrl}/chat/completions, every
// other model through the Anthropic Messages API at {anthropicBaseUrl}/v1/messages.
// The conversation is kept in the Messages form and translated for OpenAI.
func isOpenAI(req *sessionRequest) bool {
	return strings.HasPrefix(req.Model.Primary, "openai/")
}

// callModel makes one model call with the session token and the Oz0 headers
// (rule 4) on the request's route, and returns the answer as Messages content.
func callModel(ctx context.Context, req *sessionRequest, body map[string]any) (*modelReply, int, error) {
	url := strings.TrimRight(req.LLM.AnthropicBaseURL, "/") + "/v1/messages"
	if isOpenAI(req) {
		url = strings.TrimRight(req.LLM.OpenAIBaseURL, "/") + "/chat/completions"
		body = toOpenAI(body)
	}
	payload, _ := json.Marshal(body)
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return nil, 0, err
	}
	for name, value := range req.LLM.Headers {
		httpReq.Header.Set(name, value)
	}
	httpReq.Header.Set("content-type", "application/json")
	if isOpenAI(req) {
		httpReq.Header.Set("authorization", "Bearer "+req.LLM.Token)
	} else {
		httpReq.Header.Set("x-api-key", req.LLM.Token)
		httpReq.Header.Set("anthropic-version", "2023-06-01")
	}
	response, err := http.DefaultClient.Do(httpReq)
	if err != nil {
		return nil, 0, fmt.Errorf("the model call failed: %v", err)
	}
	defer response.Body.Close()
	data, _ := io.ReadAll(response.Body)
	if response.StatusCode != http.StatusOK {
		return nil, response.StatusCode, fmt.Errorf("the model call failed: HTTP %d %s", response.StatusCode, strings.TrimSpace(string(data)))
	}
	var reply modelReply
	if isOpenAI(req) {
		err = fromOpenAI(data, &reply)
	} else {
		err = json.Unmarshal(data, &reply)
	}
	if err != nil {
		return nil, response.StatusCode, fmt.Errorf("the model's answer is not JSON: %v", err)
	}
	return &reply, response.StatusCode, nil
}

// toOpenAI turns a Messages request body into a Chat Completions one: the
// system prompt becomes the first message, tool_use blocks become tool_calls
// and each tool_result a `tool` message.
func toOpenAI(body map[string]any) map[string]any {
	var chat []map[string]any
	if system, _ := body["system"].(string); system != "" {
		chat = append(chat, map[string]any{"role": "system", "content": system})
	}
	for _, message := range body["messages"].([]map[string]any) {
		switch content := message["content"].(type) {
		case string:
			chat = append(chat, map[string]any{"role": message["role"], "content": content})
		case []block: // the assistant's answer, kept as it came
			var text strings.Builder
			var calls []map[string]any
			for _, b := range content {
				if b.Type == "text" {
					text.WriteString(b.Text)
				} else if b.Type == "tool_use" {
					calls = append(calls, map[string]any{"id": b.ID, "type": "function", "function": map[string]any{"name": b.Name, "arguments": string(b.Input)}})
				}
			}
			assistant := map[string]any{"role": "assistant", "content": nil}
			if text.Len() > 0 {
				assistant["content"] = text.String()
			}
			if len(calls) > 0 {
				assistant["tool_calls"] = calls
			}
			chat = append(chat, assistant)
		case []map[string]any: // tool results
			for _, result := range content {
				chat = append(chat, map[string]any{"role": "tool", "tool_call_id": result["tool_use_id"], "content": result["content"]})
			}
		}
	}
	var functions []map[string]any
	for _, tool := range body["tools"].([]map[string]any) {
		functions = append(functions, map[string]any{"type": "function", "function": map[string]any{"name": tool["name"], "description": tool["description"], "parameters": tool["input_schema"]}})
	}
	return map[string]any{"model": body["model"], "max_tokens": body["max_tokens"], "messages": chat, "tools": functions}
}

// fromOpenAI reads a Chat Completions answer as Messages content and usage.
func fromOpenAI(data []byte, reply *modelReply) error {
	var completion struct {
		Choices []struct {
			Message struct {
				Content   *string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &completion); err != nil {
		return err
	}
	if len(completion.Choices) == 0 {
		return errors.New("no choices in the answer")
	}
	message := completion.Choices[0].Message
	if message.Content != nil && *message.Content != "" {
		reply.Content = append(reply.Content, block{Type: "text", Text: *message.Content})
	}
	for _, call := range message.ToolCalls {
		// The arguments are JSON text; anything but an object reaches the tool as an empty input.
		input := json.RawMessage(call.Function.Arguments)
		var object map[string]any
		if json.Unmarshal(input, &object) != nil {
			input = json.RawMessage("{}")
		}
		reply.Content = append(reply.Content, block{Type: "tool_use", ID: call.ID, Name: call.Function.Name, Input: input})
	}
	reply.Usage.InputTokens = completion.Usage.PromptTokens
	reply.Usage.OutputTokens = completion.Usage.CompletionTokens
	return nil
}
