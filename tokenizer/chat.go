package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/tokenizer/internal/jinja"
)

// ChatTemplate is a tokenizer's Jinja chat template, rendered as
// transformers' apply_chat_template renders it (Jinja2 sandbox with
// trim_blocks and lstrip_blocks, Python-compatible tojson). It is safe for
// concurrent use.
type ChatTemplate struct {
	origin string // where the template came from, for errors
	source string
	tmpl   *jinja.Template
	tokens configTokens
	now    time.Time // zero: the clock
}

// WithNow returns a copy of c whose strftime_now() sees t instead of the
// clock, for reproducible renderings of templates that print the date.
func (c *ChatTemplate) WithNow(t time.Time) *ChatTemplate {
	cp := *c
	cp.now = t
	return &cp
}

// parseChatTemplate parses src; origin names the file it came from.
func parseChatTemplate(origin, src string, tokens configTokens) (*ChatTemplate, error) {
	tmpl, err := jinja.Parse(src, jinja.Options{TrimBlocks: true, LStripBlocks: true})
	if err != nil {
		return nil, fmt.Errorf("chat template (%s) is not supported: %w", origin, err)
	}
	return &ChatTemplate{origin: origin, source: src, tmpl: tmpl, tokens: tokens}, nil
}

// LoadChatTemplate reads only the chat template of a tokenizer directory
// (chat_template.jinja, else tokenizer_config.json's "chat_template"), with
// the file rules of Load.
func LoadChatTemplate(dir string) (*ChatTemplate, error) {
	c, err := loadChatTemplate(dirReader(dir))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, dir)
	}
	return c, nil
}

// LoadChatTemplateFS is LoadChatTemplate over a file system.
func LoadChatTemplateFS(fsys fs.FS) (*ChatTemplate, error) { return loadChatTemplate(fsReader(fsys)) }

func loadChatTemplate(read readFunc) (*ChatTemplate, error) {
	cfg, err := read(TokenizerConfigFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var tokens configTokens
	var src string
	if cfg != nil {
		var c tokenizerConfig
		if err := jnf.DecodeForeignJSON(cfg, &c); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", TokenizerConfigFile, err)
		}
		if tokens, err = c.tokens(); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", TokenizerConfigFile, err)
		}
		if src, err = chatTemplateSource(c.ChatTemplate); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", TokenizerConfigFile, err)
		}
	}
	origin := TokenizerConfigFile + " chat_template"
	if data, err := read(ChatTemplateFile); err == nil {
		src, origin = string(data), ChatTemplateFile
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if src == "" {
		return nil, fmt.Errorf("tokenizer: no chat template (neither %s nor a \"chat_template\" in %s)", ChatTemplateFile, TokenizerConfigFile)
	}
	return parseChatTemplate(origin, src, tokens)
}

// Source returns the template text.
func (c *ChatTemplate) Source() string { return c.source }

// Message is one chat turn as the Qwen3 template reads it. Optional fields
// left at their zero value are not passed to the template at all.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent is the assistant's thinking, when kept apart from
	// Content.
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// ToolCall is an assistant's call of a tool.
type ToolCall struct {
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the tool and carries its arguments: a JSON object (the
// template prints it with tojson) or a JSON string (printed as is).
type FunctionCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ChatRequest is the input of apply_chat_template.
type ChatRequest struct {
	Messages []Message
	// Tools are tool schemas as raw JSON; key order is kept, as Python's
	// json.loads keeps it.
	Tools               []json.RawMessage
	AddGenerationPrompt bool
	// EnableThinking, when non-nil, is passed as the template variable
	// enable_thinking (Qwen3: false adds an empty <think></think> block).
	EnableThinking *bool
}

// Render renders req. It is RenderJSON of req written as JSON.
func (c *ChatTemplate) Render(req ChatRequest) (string, error) {
	in := map[string]any{
		"messages":              req.Messages,
		"add_generation_prompt": req.AddGenerationPrompt,
	}
	if req.Messages == nil {
		in["messages"] = []Message{}
	}
	if req.Tools != nil {
		in["tools"] = req.Tools
	}
	if req.EnableThinking != nil {
		in["enable_thinking"] = *req.EnableThinking
	}
	data, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("tokenizer: chat request: %w", err)
	}
	return c.RenderJSON(data)
}

// RenderJSON renders a JSON object whose members become the template's
// variables, as the keyword arguments of apply_chat_template do:
// "messages" (required, a list), "tools", "documents",
// "add_generation_prompt" (default false), and any others such as
// "enable_thinking". Members of a "kwargs" object are passed the same way.
// The tokenizer's special tokens (bos_token, eos_token, ...) are defined
// too, and raise_exception / strftime_now are available. The input is read
// strictly (jnf.CheckJSON: valid UTF-8, no duplicate key).
func (c *ChatTemplate) RenderJSON(input []byte) (string, error) {
	// Strict JSON (jnf.CheckJSON): a key given twice is refused, not left
	// to the last occurrence.
	if err := jnf.CheckJSON(input); err != nil {
		return "", fmt.Errorf("tokenizer: chat input: %w", err)
	}
	v, err := jinja.FromJSON(input)
	if err != nil {
		return "", fmt.Errorf("tokenizer: chat input: %w", err)
	}
	obj, ok := v.(*jinja.Dict)
	if !ok {
		return "", errors.New("tokenizer: chat input: want a JSON object")
	}
	vars := map[string]jinja.Value{
		"tools":                 nil,
		"documents":             nil,
		"add_generation_prompt": false,
	}
	for name, tok := range map[string]*string{
		"bos_token": c.tokens.bos, "eos_token": c.tokens.eos,
		"pad_token": c.tokens.pad, "unk_token": c.tokens.unk,
	} {
		if tok != nil {
			vars[name] = *tok
		}
	}
	if len(c.tokens.additional) > 0 {
		l := &jinja.List{}
		for _, s := range c.tokens.additional {
			l.Items = append(l.Items, s)
		}
		vars["additional_special_tokens"] = l
	}
	var set func(d *jinja.Dict) error
	set = func(d *jinja.Dict) error {
		for _, k := range d.Keys() {
			name, ok := k.(string)
			if !ok {
				return fmt.Errorf("tokenizer: chat input: key %v is not a string", k)
			}
			val, _ := d.Get(k)
			if name == "kwargs" {
				kw, ok := val.(*jinja.Dict)
				if !ok {
					return errors.New("tokenizer: chat input: \"kwargs\" must be an object")
				}
				if err := set(kw); err != nil {
					return err
				}
				continue
			}
			vars[name] = val
		}
		return nil
	}
	if err := set(obj); err != nil {
		return "", err
	}
	if msgs, ok := vars["messages"]; !ok {
		return "", errors.New("tokenizer: chat input: \"messages\" is missing (want {\"messages\": [{\"role\": \"user\", \"content\": \"...\"}]})")
	} else if _, ok := msgs.(*jinja.List); !ok {
		return "", errors.New("tokenizer: chat input: \"messages\" must be a list")
	}
	out, err := c.tmpl.Render(jinja.Env{Vars: vars, Now: c.now})
	if err != nil {
		return "", fmt.Errorf("tokenizer: rendering %s: %w", c.origin, err)
	}
	return out, nil
}
