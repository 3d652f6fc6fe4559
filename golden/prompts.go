package golden

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/tarfa-ai/tarfa/jnf"
)

// DefaultMaxTokens is used when a prompt line gives no max_tokens.
const DefaultMaxTokens = 16

// MaxTokensLimit bounds a prompt's max_tokens: the engine's bound on a
// sequence's positions (a model's own context is checked when it is open).
const MaxTokensLimit = 1 << 24

// MaxTemperature bounds a prompt's temperature, as the engine does.
const MaxTemperature = 1e6

// MaxPromptFileSize bounds a prompt file (it is read whole).
const MaxPromptFileSize = jnf.MaxJSONMetaSize

// ReadPromptFile reads and parses the prompt file at path (ParsePrompts):
// a regular file of at most MaxPromptFileSize bytes (a FIFO or device is
// refused before a byte is read).
func ReadPromptFile(path string) ([]Prompt, error) {
	b, err := jnf.ReadFileLimit(path, MaxPromptFileSize, "prompt file")
	if err != nil {
		return nil, err
	}
	return ParsePrompts(bytes.NewReader(b), path)
}

// Prompt is one line of a prompt file (JSONL). Exactly one of Text, Messages
// and Tokens is set.
type Prompt struct {
	Line     int             // 1-based line number
	Source   string          // the line as written
	Text     *string         // {"prompt": "..."}: encoded without a chat template
	Messages json.RawMessage // {"messages": [...]}: rendered with the chat template, generation prompt added
	// EnableThinking is passed to the chat template when set.
	EnableThinking *bool
	Tokens         []int // {"tokens": [...]}
	MaxTokens      int
	Stop           []int
	Sampling       Sampling
}

type promptLine struct {
	Prompt         *string         `json:"prompt"`
	Messages       json.RawMessage `json:"messages"`
	Tokens         []int           `json:"tokens"`
	EnableThinking *bool           `json:"enable_thinking"`
	MaxTokens      *int            `json:"max_tokens"`
	Seed           *uint64         `json:"seed"`
	Temperature    *float64        `json:"temperature"`
	TopP           *float64        `json:"top_p"`
	TopK           *int            `json:"top_k"`
	Stop           []int           `json:"stop"`
}

// ParsePrompts reads a JSONL prompt file: one object per line with exactly
// one of "prompt" (text), "messages" (chat) or "tokens" (ids), and optional
// "max_tokens" (1 to MaxTokensLimit), "temperature" (0 = greedy, the
// default, to MaxTemperature), "seed", "top_p", "top_k" (these three only
// with a temperature above 0: greedy decoding does not use them), "stop"
// (token ids) and "enable_thinking". Blank lines are skipped; unknown fields
// are errors.
func ParsePrompts(r io.Reader, name string) ([]Prompt, error) {
	var out []Prompt
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var pl promptLine
		if err := jnf.DecodeJSON(line, &pl); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, n, promptFieldError(err))
		}
		p := Prompt{Line: n, Source: string(line), Text: pl.Prompt, Messages: pl.Messages, Tokens: pl.Tokens,
			EnableThinking: pl.EnableThinking, MaxTokens: DefaultMaxTokens, Stop: pl.Stop}
		kinds := 0
		if pl.Prompt != nil {
			kinds++
		}
		if len(pl.Messages) > 0 {
			kinds++
		}
		if pl.Tokens != nil {
			kinds++
			if len(pl.Tokens) == 0 {
				return nil, fmt.Errorf("%s:%d: empty \"tokens\"", name, n)
			}
		}
		if kinds != 1 {
			return nil, fmt.Errorf("%s:%d: want exactly one of \"prompt\", \"messages\" or \"tokens\", got %d", name, n, kinds)
		}
		if pl.MaxTokens != nil {
			if *pl.MaxTokens <= 0 || *pl.MaxTokens > MaxTokensLimit {
				return nil, fmt.Errorf("%s:%d: max_tokens %d, want 1 to %d", name, n, *pl.MaxTokens, MaxTokensLimit)
			}
			p.MaxTokens = *pl.MaxTokens
		}
		if pl.Seed != nil {
			p.Sampling.Seed = *pl.Seed
		}
		if pl.Temperature != nil {
			if *pl.Temperature < 0 || *pl.Temperature > MaxTemperature {
				return nil, fmt.Errorf("%s:%d: temperature %g, want 0 (greedy) to %g", name, n, *pl.Temperature, MaxTemperature)
			}
			p.Sampling.Temperature = *pl.Temperature
		}
		if pl.TopP != nil {
			if *pl.TopP <= 0 || *pl.TopP > 1 {
				return nil, fmt.Errorf("%s:%d: top_p %g, want (0, 1]", name, n, *pl.TopP)
			}
			p.Sampling.TopP = *pl.TopP
		}
		if pl.TopK != nil {
			if *pl.TopK < 0 {
				return nil, fmt.Errorf("%s:%d: top_k %d, want >= 0", name, n, *pl.TopK)
			}
			p.Sampling.TopK = *pl.TopK
		}
		if p.Sampling.Temperature == 0 {
			for _, f := range []struct {
				name string
				set  bool
			}{{"seed", pl.Seed != nil}, {"top_p", pl.TopP != nil}, {"top_k", pl.TopK != nil}} {
				if f.set {
					return nil, fmt.Errorf("%s:%d: %q without a \"temperature\" above 0: greedy decoding does not use it (add a temperature to sample)", name, n, f.name)
				}
			}
		}
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no prompts", name)
	}
	return out, nil
}

// promptFieldError says a member of a prompt line has the wrong type in
// the file's words ("prompt" must be a string, got a number), not in Go's
// (cannot unmarshal number into Go struct field promptLine.prompt).
func promptFieldError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return err
	}
	want := map[string]string{
		"prompt":          "a string",
		"messages":        "a list of messages",
		"tokens":          "a list of token ids (whole numbers from 0)",
		"stop":            "a list of token ids (whole numbers from 0)",
		"enable_thinking": "true or false",
		"max_tokens":      "a whole number",
		"seed":            fmt.Sprintf("a whole number from 0 to %d", uint64(math.MaxUint64)),
		"temperature":     "a number",
		"top_p":           "a number",
		"top_k":           "a whole number",
	}[te.Field]
	if want == "" {
		return err
	}
	got := te.Value
	switch {
	case got == "object", got == "array":
		got = "an " + got
	case got != "":
		got = "a " + got
	}
	return fmt.Errorf("%q must be %s, got %s (at byte %d)", te.Field, want, got, te.Offset)
}
