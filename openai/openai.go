// Package openai translates between the OpenAI HTTP API (chat
// completions, completions, models) and Tarfa's generation parameters. It
// is pure: it parses and checks request bodies into Params, and builds the
// response, chunk and error bodies; the HTTP, the model and the scheduler
// are package server's.
//
// Requests are decoded strictly: an unknown member, a member of the wrong
// type or a value out of range is an *Error (status 400) naming the
// parameter, never silently ignored. Parameters the OpenAI API has but
// Tarfa does not implement (presence_penalty, logit_bias, …) are accepted
// only at their neutral value.
package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"

	"github.com/tarfa-ai/tarfa/jnf"
)

// Limits of a request.
const (
	MaxStop        = 4  // stop sequences
	MaxStopLen     = 64 // bytes per stop sequence
	MaxTopLogprobs = 20 // chat top_logprobs
	MaxCompLogprob = 5  // completions logprobs
	MaxMessages    = 1024
	MaxTools       = 128
	MaxTopK        = 1 << 20 // top_k (more than any vocabulary: off)
	// metadata: at most MaxMetadata pairs, keys of at most
	// MaxMetadataKey bytes, string values of at most MaxMetadataValue
	// (the OpenAI API's limits).
	MaxMetadata      = 16
	MaxMetadataKey   = 64
	MaxMetadataValue = 512
)

// Error is an API error: the HTTP status and the body
// {"error":{"message","type","param","code"}}.
type Error struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *Error) Error() string { return e.Message }

// Body is the error's JSON body.
func (e *Error) Body() []byte {
	b, _ := json.Marshal(struct {
		Error *Error `json:"error"`
	}{e})
	return b
}

func strp(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Errorf returns an error of status with a message; param names the
// request parameter at fault ("" for none) and code is the machine code.
func Errorf(status int, param, code, format string, a ...any) *Error {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusUnauthorized:
		typ = "authentication_error"
	case status == http.StatusNotFound && code == "model_not_found":
		typ = "invalid_request_error"
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_exceeded"
	case status >= 500:
		typ = "server_error"
	}
	return &Error{Status: status, Message: fmt.Sprintf(format, a...), Type: typ, Param: strp(param), Code: strp(code)}
}

func badParam(param, format string, a ...any) *Error {
	return Errorf(http.StatusBadRequest, param, "invalid_value", "%s: %s", param, fmt.Sprintf(format, a...))
}

// Params are a request's generation parameters, checked.
type Params struct {
	Model string
	// MaxTokens is 0 when the request sets none (the server's default).
	MaxTokens int
	// Temperature (default 1), TopP (default 1, off), TopK (default 0,
	// off); Seed is nil when the request sets none.
	Temperature, TopP float64
	TopK              int
	Seed              *uint64
	Stop              []string
	Logprobs          bool
	TopLogprobs       int
	Stream            bool
	IncludeUsage      bool
	// Chat: the messages (content parts joined into text) and tools as the
	// chat template takes them.
	Messages []json.RawMessage
	Tools    []json.RawMessage
	// NoTools is tool_choice "none": the tools are in the prompt, but the
	// output is text, tool-call blocks included.
	NoTools bool
	// Completions: the prompt as text or as token ids (exactly one is set).
	Prompt       *string
	PromptTokens []int
	Echo         bool
}

// decode decodes body into v strictly: one JSON object, no unknown
// members, nothing after it, and the rules of jnf.CheckJSON (valid UTF-8,
// no member given twice at any depth: encoding/json keeps the last). The
// error names the member at fault.
func decode(body []byte, v any) *Error {
	if len(bytes.TrimSpace(body)) > 0 {
		if err := jnf.CheckJSON(body); err != nil {
			return Errorf(http.StatusBadRequest, "", "invalid_json", "the request body is not valid JSON: %v", err)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return Errorf(http.StatusBadRequest, "", "invalid_json", "the request body is not valid JSON: %v (at byte %d)", err, se.Offset)
		case errors.As(err, &te):
			f := strings.TrimPrefix(te.Field, "common.") // the members both endpoints share
			return Errorf(http.StatusBadRequest, f, "invalid_type", "%s: %s, want %s", f, te.Value, te.Type)
		case errors.Is(err, io.EOF):
			return Errorf(http.StatusBadRequest, "", "invalid_json", "the request body is empty: want a JSON object")
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return Errorf(http.StatusBadRequest, f, "unknown_parameter", "unrecognized request argument supplied: %s", f)
		default:
			return Errorf(http.StatusBadRequest, "", "invalid_json", "the request body is not valid JSON: %v", err)
		}
	}
	if dec.More() {
		return Errorf(http.StatusBadRequest, "", "invalid_json", "the request body has data after its JSON object")
	}
	return nil
}

// streamOptions is stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// common are the members both endpoints share.
type common struct {
	Model            string          `json:"model"`
	MaxTokens        *int            `json:"max_tokens"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	TopK             *int            `json:"top_k"`
	Seed             *int64          `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	N                *int            `json:"n"`
	Stream           bool            `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	LogitBias        map[string]any  `json:"logit_bias"`
	User             string          `json:"user"`
}

func (c *common) params(p *Params) *Error {
	if c.Model == "" {
		return Errorf(http.StatusBadRequest, "model", "missing_required_parameter", "model: required (GET /v1/models lists the one this server runs)")
	}
	p.Model = c.Model
	if c.MaxTokens != nil {
		if *c.MaxTokens < 1 {
			return badParam("max_tokens", "%d, want at least 1", *c.MaxTokens)
		}
		p.MaxTokens = *c.MaxTokens
	}
	p.Temperature, p.TopP = 1, 1
	if c.Temperature != nil {
		if t := *c.Temperature; !(t >= 0 && t <= 2) {
			return badParam("temperature", "%g, want 0 to 2", t)
		}
		p.Temperature = *c.Temperature
	}
	if c.TopP != nil {
		if t := *c.TopP; !(t > 0 && t <= 1) {
			return badParam("top_p", "%g, want above 0 and at most 1", t)
		}
		p.TopP = *c.TopP
	}
	if c.TopK != nil {
		// -1 is vLLM's "off", sent by clients that set it by default.
		if k := *c.TopK; k < -1 || k > MaxTopK {
			return badParam("top_k", "%d, want 1 to %d, or 0 or -1 (off)", k, MaxTopK)
		}
		p.TopK = max(*c.TopK, 0)
	}
	if c.Seed != nil {
		if *c.Seed < 0 {
			return badParam("seed", "%d, want 0 or more", *c.Seed)
		}
		s := uint64(*c.Seed)
		p.Seed = &s
	}
	if len(c.Stop) > 0 && string(c.Stop) != "null" {
		var one string
		if err := json.Unmarshal(c.Stop, &one); err == nil {
			p.Stop = []string{one}
		} else if err := json.Unmarshal(c.Stop, &p.Stop); err != nil {
			return badParam("stop", "want a string or an array of strings")
		}
		if len(p.Stop) > MaxStop {
			return badParam("stop", "%d sequences, want at most %d", len(p.Stop), MaxStop)
		}
		for i, s := range p.Stop {
			if s == "" || len(s) > MaxStopLen {
				return badParam("stop", "sequence %d is %d bytes, want 1 to %d", i, len(s), MaxStopLen)
			}
		}
	}
	if c.N != nil && *c.N != 1 {
		return badParam("n", "%d: this server returns one choice per request (n = 1); send n requests with different seeds instead", *c.N)
	}
	if c.StreamOptions != nil {
		if !c.Stream {
			return badParam("stream_options", "only allowed with stream: true")
		}
		p.IncludeUsage = c.StreamOptions.IncludeUsage
	}
	p.Stream = c.Stream
	for name, v := range map[string]*float64{"presence_penalty": c.PresencePenalty, "frequency_penalty": c.FrequencyPenalty} {
		if v != nil && *v != 0 {
			return badParam(name, "%g: not supported (the model's distribution is used as it is); want 0 or none", *v)
		}
	}
	if len(c.LogitBias) > 0 {
		return badParam("logit_bias", "not supported; want none")
	}
	return nil
}

// chatRequest is POST /v1/chat/completions.
type chatRequest struct {
	common
	Messages            []json.RawMessage `json:"messages"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Logprobs            bool              `json:"logprobs"`
	TopLogprobs         *int              `json:"top_logprobs"`
	Tools               []json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls"`
	// Accepted at their neutral values only (noops).
	ResponseFormat  json.RawMessage `json:"response_format"`
	Store           *bool           `json:"store"`
	Metadata        json.RawMessage `json:"metadata"`
	ReasoningEffort *string         `json:"reasoning_effort"`
	ServiceTier     *string         `json:"service_tier"`
}

// noops checks the chat parameters that frameworks send by default and
// that change nothing at their neutral value: those are accepted (and
// ignored); any other value would change what the response means, and is
// refused naming the parameter.
func (c *chatRequest) noops() *Error {
	if rf := bytes.TrimSpace(c.ResponseFormat); len(rf) > 0 && string(rf) != "null" {
		var f struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(rf, &f); err != nil || f.Type == "" {
			return badParam("response_format", `want {"type": "text"}`)
		}
		if f.Type != "text" {
			return badParam("response_format", `type %q: not supported (the output is not constrained to a format); want {"type": "text"} or none`, f.Type)
		}
	}
	if c.Store != nil && *c.Store {
		return badParam("store", "true: this server stores no completions for later retrieval (with --key it keeps each response's signed report: GET /v1/attestations/{id}); want false or none")
	}
	if md := bytes.TrimSpace(c.Metadata); len(md) > 0 && string(md) != "null" {
		var m map[string]string
		if err := json.Unmarshal(md, &m); err != nil {
			return badParam("metadata", "want an object of string values")
		}
		if len(m) > MaxMetadata {
			return badParam("metadata", "%d pairs, want at most %d", len(m), MaxMetadata)
		}
		for k, v := range m {
			if len(k) > MaxMetadataKey || len(v) > MaxMetadataValue {
				return badParam("metadata", "key %.64q: want keys of at most %d bytes and values of at most %d", k, MaxMetadataKey, MaxMetadataValue)
			}
		}
	}
	if c.ReasoningEffort != nil && *c.ReasoningEffort != "medium" {
		return badParam("reasoning_effort", `%q: not supported (the model reasons as its chat template has it); want "medium" (the default) or none`, *c.ReasoningEffort)
	}
	if c.ServiceTier != nil && *c.ServiceTier != "auto" && *c.ServiceTier != "default" {
		return badParam("service_tier", `%q: this server has one tier; want "auto", "default" or none`, *c.ServiceTier)
	}
	return nil
}

// ParseChat parses and checks a chat completions request.
func ParseChat(body []byte) (*Params, *Error) {
	var c chatRequest
	if err := decode(body, &c); err != nil {
		return nil, err
	}
	p := &Params{}
	if err := c.params(p); err != nil {
		return nil, err
	}
	if err := c.noops(); err != nil {
		return nil, err
	}
	if c.MaxCompletionTokens != nil {
		if c.MaxTokens != nil && *c.MaxTokens != *c.MaxCompletionTokens {
			return nil, badParam("max_completion_tokens", "%d and max_tokens %d: give one", *c.MaxCompletionTokens, *c.MaxTokens)
		}
		if *c.MaxCompletionTokens < 1 {
			return nil, badParam("max_completion_tokens", "%d, want at least 1", *c.MaxCompletionTokens)
		}
		p.MaxTokens = *c.MaxCompletionTokens
	}
	p.Logprobs = c.Logprobs
	if c.TopLogprobs != nil {
		if !c.Logprobs {
			return nil, badParam("top_logprobs", "needs logprobs: true")
		}
		if n := *c.TopLogprobs; n < 0 || n > MaxTopLogprobs {
			return nil, badParam("top_logprobs", "%d, want 0 to %d", n, MaxTopLogprobs)
		}
		p.TopLogprobs = *c.TopLogprobs
	}
	if len(c.Messages) == 0 {
		return nil, badParam("messages", "want at least one message")
	}
	if len(c.Messages) > MaxMessages {
		return nil, badParam("messages", "%d messages, want at most %d", len(c.Messages), MaxMessages)
	}
	for i, m := range c.Messages {
		nm, err := message(m)
		if err != nil {
			return nil, badParam(fmt.Sprintf("messages[%d]", i), "%v", err)
		}
		p.Messages = append(p.Messages, nm)
	}
	if len(c.Tools) > MaxTools {
		return nil, badParam("tools", "%d tools, want at most %d", len(c.Tools), MaxTools)
	}
	for i, t := range c.Tools {
		var tool struct {
			Type     string `json:"type"`
			Function *struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(t, &tool); err != nil || tool.Type != "function" || tool.Function == nil || tool.Function.Name == "" {
			return nil, badParam(fmt.Sprintf("tools[%d]", i), `want {"type": "function", "function": {"name": …, …}}`)
		}
		p.Tools = append(p.Tools, t)
	}
	if tc := strings.TrimSpace(string(c.ToolChoice)); tc != "" && tc != "null" && tc != `"auto"` && tc != `"none"` {
		return nil, badParam("tool_choice", `%s: only "auto" and "none" are supported (the template offers the tools; the model decides)`, tc)
	} else if tc == `"none"` {
		p.NoTools = true
	}
	return p, nil
}

// message checks one chat message and joins text content parts into one
// string, the form chat templates take.
func message(raw json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, errors.New("want a JSON object")
	}
	var role string
	if err := json.Unmarshal(m["role"], &role); err != nil {
		return nil, errors.New("role: want a string")
	}
	switch role {
	case "system", "developer", "user", "assistant", "tool":
	default:
		return nil, fmt.Errorf("role %q: want system, developer, user, assistant or tool", role)
	}
	if role == "developer" {
		m["role"] = json.RawMessage(`"system"`)
	}
	if tc, ok := m["tool_calls"]; ok && string(tc) != "null" {
		if role != "assistant" {
			return nil, fmt.Errorf("tool_calls: only an assistant message has them, not a %s message", role)
		}
		calls, err := historyCalls(tc)
		if err != nil {
			return nil, err
		}
		m["tool_calls"] = calls
	}
	if c := m["content"]; role == "assistant" && (len(c) == 0 || string(c) == "null") {
		// The API lets an assistant message that only calls tools have no
		// content; templates take it as a string.
		m["content"] = json.RawMessage(`""`)
	}
	if c, ok := m["content"]; ok && len(c) > 0 && c[0] == '[' {
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return nil, errors.New("content: want a string or an array of text parts")
		}
		var b strings.Builder
		for j, pt := range parts {
			if pt.Type != "text" {
				return nil, fmt.Errorf("content[%d]: type %q, want text (this model reads text only)", j, pt.Type)
			}
			b.WriteString(pt.Text)
		}
		s, _ := json.Marshal(b.String())
		m["content"] = s
	} else if ok && string(c) != "null" {
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return nil, errors.New("content: want a string or an array of text parts")
		}
	}
	return json.Marshal(m)
}

// historyCalls checks an assistant message's tool_calls and gives each
// call's arguments to the template as the JSON object they encode (the
// API sends them as a string; templates print an object with tojson or
// walk its items).
func historyCalls(raw json.RawMessage) (json.RawMessage, error) {
	var calls []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function *struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, errors.New(`tool_calls: want an array of {"id", "type": "function", "function": {"name", "arguments"}}`)
	}
	out := make([]map[string]any, len(calls))
	for j, c := range calls {
		if c.Type != "function" || c.Function == nil || c.Function.Name == "" {
			return nil, fmt.Errorf(`tool_calls[%d]: want {"id", "type": "function", "function": {"name", "arguments"}}`, j)
		}
		var args string
		if err := json.Unmarshal(c.Function.Arguments, &args); err != nil {
			return nil, fmt.Errorf("tool_calls[%d].function.arguments: want a string (the arguments as JSON)", j)
		}
		var obj json.RawMessage
		if strings.TrimSpace(args) == "" {
			obj = json.RawMessage("{}")
		} else if err := json.Unmarshal([]byte(args), &obj); err != nil || bytes.TrimSpace(obj)[0] != '{' {
			return nil, fmt.Errorf("tool_calls[%d].function.arguments: %.40q is not a JSON object", j, args)
		}
		out[j] = map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Function.Name, "arguments": obj}}
	}
	return json.Marshal(out)
}

// completionRequest is POST /v1/completions.
type completionRequest struct {
	common
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	BestOf   *int            `json:"best_of"`
	Suffix   *string         `json:"suffix"`
}

// ParseCompletion parses and checks a completions request. The prompt is
// one string or one array of token ids (a batch of prompts is refused:
// send one request per prompt).
func ParseCompletion(body []byte) (*Params, *Error) {
	var c completionRequest
	if err := decode(body, &c); err != nil {
		return nil, err
	}
	p := &Params{}
	if err := c.params(p); err != nil {
		return nil, err
	}
	if c.Logprobs != nil {
		if n := *c.Logprobs; n < 0 || n > MaxCompLogprob {
			return nil, badParam("logprobs", "%d, want 0 to %d", n, MaxCompLogprob)
		}
		p.Logprobs, p.TopLogprobs = true, *c.Logprobs
	}
	if c.BestOf != nil && *c.BestOf != 1 {
		return nil, badParam("best_of", "%d: want 1", *c.BestOf)
	}
	if c.Suffix != nil && *c.Suffix != "" {
		return nil, badParam("suffix", "not supported; want none")
	}
	p.Echo = c.Echo
	if len(c.Prompt) == 0 || string(c.Prompt) == "null" {
		return nil, Errorf(http.StatusBadRequest, "prompt", "missing_required_parameter", "prompt: required")
	}
	if err := prompt(c.Prompt, p); err == nil {
		return p, nil
	}
	// A batch of one prompt is that prompt; a larger one is refused.
	var batch []json.RawMessage
	if json.Unmarshal(c.Prompt, &batch) == nil && len(batch) != 1 {
		return nil, badParam("prompt", "a batch of %d prompts: send one request per prompt", len(batch))
	} else if len(batch) == 1 {
		if err := prompt(batch[0], p); err != nil {
			return nil, err
		}
		return p, nil
	}
	return nil, badParam("prompt", "want a string or an array of token ids")
}

// prompt sets p's prompt from a string or an array of token ids.
func prompt(raw json.RawMessage, p *Params) *Error {
	var s string
	var ids []int
	switch {
	case json.Unmarshal(raw, &s) == nil:
		if s == "" {
			return badParam("prompt", "empty")
		}
		p.Prompt = &s
	case json.Unmarshal(raw, &ids) == nil:
		if len(ids) == 0 {
			return badParam("prompt", "an empty list of token ids")
		}
		for i, id := range ids {
			if id < 0 {
				return badParam("prompt", "token %d is %d, want a token id (0 or more)", i, id)
			}
		}
		p.PromptTokens = ids
	default:
		return badParam("prompt", "want a string or an array of token ids")
	}
	return nil
}

// Usage is the token count of a response.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// NewUsage counts prompt and completion tokens.
func NewUsage(prompt, completion int) *Usage {
	return &Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
}

// TopLogprob is one alternative of a chat token's logprobs.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// TokenLogprob is one chat token's logprobs.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// ChatLogprobs is choices[].logprobs of a chat response.
type ChatLogprobs struct {
	Content []TokenLogprob `json:"content"`
	Refusal []TokenLogprob `json:"refusal"`
}

// Bytes is the "bytes" member of a token whose text is s: its UTF-8
// bytes as integers. A token that stands for raw bytes which are not
// valid UTF-8 alone (a byte-level BPE piece of a character) has them as
// its bytes: see RawBytes.
func Bytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

// RawBytes is the "bytes" member of a token that stands for the bytes b
// (possibly part of a UTF-8 character): b as integers, so that the bytes
// of a response's tokens, concatenated, are its text.
func RawBytes(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

// Logprob converts a float32 log-probability for JSON; −∞ (a token the
// model gives no mass in float32) becomes the most negative float64, as
// JSON has no infinity.
func Logprob(lp float32) float64 {
	if math.IsInf(float64(lp), -1) {
		return -math.MaxFloat64
	}
	return float64(lp)
}

// ChatMessage is a response message. Content is null when the message
// is only tool calls.
type ChatMessage struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	Refusal   *string    `json:"refusal"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ChatChoice is a choice of a chat response.
type ChatChoice struct {
	Index        int           `json:"index"`
	Message      ChatMessage   `json:"message"`
	FinishReason string        `json:"finish_reason"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
}

// ChatCompletion is a chat response. Tarfa is the "tarfa" extension
// member (attestation facts), kept by the SDKs as an extra field.
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage"`
	Tarfa             any          `json:"tarfa,omitempty"`
}

// ChatDelta is the delta of a chat chunk.
type ChatDelta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []ToolCallDelta `json:"tool_calls,omitempty"`
}

// ChunkChoice is a choice of a chat chunk.
type ChunkChoice struct {
	Index        int           `json:"index"`
	Delta        ChatDelta     `json:"delta"`
	FinishReason *string       `json:"finish_reason"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
}

// ChatChunk is one server-sent event of a streamed chat response.
type ChatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []ChunkChoice `json:"choices"`
	Usage             *Usage        `json:"usage,omitempty"`
	Tarfa             any           `json:"tarfa,omitempty"`
}

// CompletionLogprobs is the legacy logprobs of a completions choice.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

// CompletionChoice is a choice of a completions response or chunk.
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	FinishReason *string             `json:"finish_reason"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
}

// Completion is a completions response or (object "text_completion" as
// well) one chunk of a streamed one.
type Completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
	Tarfa             any                `json:"tarfa,omitempty"`
}

// Model is an entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// Finish reasons.
const (
	FinishStop      = "stop"
	FinishLength    = "length"
	FinishToolCalls = "tool_calls"
)
