package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// ToolFormat is how a chat template writes one call between its markers.
type ToolFormat uint8

// Tool-call formats. The zero ToolFormat is none: nothing is parsed.
const (
	// ToolJSON is a JSON object of the call's name and arguments,
	// {"name": …, "arguments": {…}} (Qwen3 and the Hermes-style
	// templates).
	ToolJSON ToolFormat = iota + 1
	// ToolXML is the XML-parameter form of Qwen3.5 and Qwen3-Coder: the
	// name as <function=NAME>, then each argument as <parameter=KEY>, a
	// newline, its value as text, a newline and </parameter>, and last
	// </function>. Values are text: the request's tool schemas say which
	// are numbers, booleans, objects, … (see SplitToolCalls).
	ToolXML
)

// String names the format: "json", "xml" or "none".
func (f ToolFormat) String() string {
	switch f {
	case ToolJSON:
		return "json"
	case ToolXML:
		return "xml"
	}
	return "none"
}

// ToolSyntax is how a chat template writes an assistant's tool call: Open,
// the call in Format, Close (Qwen3 and Qwen3.5: "<tool_call>",
// "</tool_call>"). The zero value parses nothing.
type ToolSyntax struct {
	Open, Close string
	Format      ToolFormat
}

// parses reports whether s is a syntax calls are parsed in.
func (s ToolSyntax) parses() bool {
	return s.Open != "" && s.Close != "" && (s.Format == ToolJSON || s.Format == ToolXML)
}

// Probe values DeriveToolSyntax renders; unlikely in any template.
const (
	probeName = "tarfa_probe_fn"
	probeArg  = "tarfa_probe_arg" // the integer 1
	probeStr  = "tarfa_probe_str" // probeText
	probeText = "tarfa probe\ntext"
)

// maxMarker bounds a derived marker, so that a template that prints the
// call inside a long run of text is not mistaken for one with a marker.
const maxMarker = 64

// DeriveToolSyntax finds a template's tool-call syntax by rendering an
// assistant turn with one tool call and reading how it was written:
// render gets the JSON input of the template ({"messages": …}) and
// returns its text. The call must be printed in one of the ToolFormats
// (its arguments, an integer and a string of two lines, intact: the
// string as text in the XML form), between a start tag such as
// <tool_call> and its end tag </tool_call>; ok is false for a template
// that prints calls any other way (or not at all), and its output is then
// returned as plain text. The format is chosen by what the template
// writes, never by the model's name.
func DeriveToolSyntax(render func(input []byte) (string, error)) (s ToolSyntax, ok bool) {
	in := map[string]any{
		"messages": []any{
			map[string]any{"role": "user", "content": "q"},
			map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{
				"id": "call_0", "type": "function",
				"function": map[string]any{"name": probeName, "arguments": map[string]any{probeArg: 1, probeStr: probeText}},
			}}},
		},
		"add_generation_prompt": false,
	}
	b, err := json.Marshal(in)
	if err != nil {
		return ToolSyntax{}, false
	}
	text, err := render(b)
	if err != nil {
		return ToolSyntax{}, false
	}
	at := strings.Index(text, probeName)
	if at < 0 {
		return ToolSyntax{}, false
	}
	// The call's extent [start, end) in one of the formats.
	var start, end int
	var format ToolFormat
	if s, e, ok := jsonProbe(text, at); ok {
		start, end, format = s, e, ToolJSON
	} else if s, e, ok := xmlProbe(text, at); ok {
		start, end, format = s, e, ToolXML
	} else {
		return ToolSyntax{}, false
	}
	before := strings.TrimRightFunc(text[:start], unicode.IsSpace)
	lt := strings.LastIndexByte(before, '<')
	if lt < 0 || !strings.HasSuffix(before, ">") {
		return ToolSyntax{}, false
	}
	open := before[lt:]
	tag := strings.TrimSuffix(strings.TrimPrefix(open, "<"), ">")
	if tag == "" || len(open) > maxMarker || strings.ContainsFunc(tag, func(r rune) bool { return unicode.IsSpace(r) || r == '<' || r == '>' || r == '/' }) {
		return ToolSyntax{}, false
	}
	closing := "</" + tag + ">"
	if !strings.HasPrefix(strings.TrimLeftFunc(text[end:], unicode.IsSpace), closing) {
		return ToolSyntax{}, false
	}
	return ToolSyntax{Open: open, Close: closing, Format: format}, true
}

// jsonProbe finds the probe call, whose name is at text[at:], printed as a
// JSON object, and returns its extent.
func jsonProbe(text string, at int) (start, end int, ok bool) {
	start = strings.LastIndexByte(text[:at], '{')
	if start < 0 {
		return 0, 0, false
	}
	dec := json.NewDecoder(strings.NewReader(text[start:]))
	var call struct {
		Name      string `json:"name"`
		Arguments struct {
			N *int    `json:"tarfa_probe_arg"`
			S *string `json:"tarfa_probe_str"`
		} `json:"arguments"`
	}
	if dec.Decode(&call) != nil || call.Name != probeName || call.Arguments.N == nil || *call.Arguments.N != 1 ||
		call.Arguments.S == nil || *call.Arguments.S != probeText {
		return 0, 0, false
	}
	return start, start + int(dec.InputOffset()), true
}

// xmlProbe finds the probe call, whose name is at text[at:], printed in
// the XML-parameter form, and returns its extent.
func xmlProbe(text string, at int) (start, end int, ok bool) {
	start = at - len(xmlFunction)
	if start < 0 || text[start:at] != xmlFunction {
		return 0, 0, false
	}
	name, params, n, err := scanXMLFunction(text[start:])
	if err != nil || name != probeName || len(params) != 2 {
		return 0, 0, false
	}
	got := map[string]string{params[0].key: params[0].value, params[1].key: params[1].value}
	if got[probeArg] != "1" || got[probeStr] != probeText {
		return 0, 0, false
	}
	return start, start + n, true
}

// ToolCall is one entry of choices[].message.tool_calls.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is a tool call's function: its name and its arguments as a
// JSON text (a string, as the API has it).
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolCallDelta is one entry of a chunk's delta.tool_calls: a call whole
// (index, id, type, name and all its arguments), as Tarfa only sends calls
// once their block is complete.
type ToolCallDelta struct {
	Index    int          `json:"index"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// parseCall parses the inside of a tool-call block: a JSON object with a
// non-empty string "name" and an object "arguments" (absent or null: no
// arguments), and nothing else after it.
func parseCall(inner string) (FunctionCall, error) {
	dec := json.NewDecoder(strings.NewReader(inner))
	var c struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := dec.Decode(&c); err != nil {
		return FunctionCall{}, err
	}
	if dec.More() {
		return FunctionCall{}, errors.New("data after the call's JSON object")
	}
	if c.Name == nil || *c.Name == "" {
		return FunctionCall{}, errors.New("no name")
	}
	args := bytes.TrimSpace(c.Arguments)
	if len(args) == 0 || string(args) == "null" {
		args = []byte("{}")
	}
	if args[0] != '{' {
		return FunctionCall{}, fmt.Errorf("arguments %.20s…: want a JSON object", args)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, args); err != nil {
		return FunctionCall{}, err
	}
	return FunctionCall{Name: *c.Name, Arguments: compact.String()}, nil
}

// ToolSplitter separates tool calls from a model's text as it comes: Feed
// it the text in pieces, and it returns the content that is final so far
// and the calls whose blocks are complete. Text that may still be the
// start of a block is held back, as is whitespace that may turn out to
// only separate content from a block (it is dropped then). A block ends at
// the first Close after its Open; one that does not parse, or is not
// closed by the end, stays text, as it is. With a zero ToolSyntax all text
// is content.
//
// Calls are returned as the model wrote them, in either format, whether or
// not the request offered a tool of that name: the client decides what to
// do with a call it cannot serve (in the XML form, such a call's values
// are strings, as no schema says otherwise).
type ToolSplitter struct {
	syn     ToolSyntax
	types   toolTypes // ToolXML: the parameter types of the request's tools
	buf     []byte    // appended to: a long block costs linear time
	inBlock bool
	sep     string // the whitespace before the block buf starts with
	// scanned is, in a block, the bytes of its body searched for Close;
	// out of one, the bytes of buf searched for Open, of which the first
	// ws are whitespace held back.
	scanned, ws int
	trim        bool // drop whitespace at the start of buf (after a block)
}

// NewToolSplitter returns a splitter for syn. tools are the request's
// tools ({"type": "function", "function": {"name", "parameters"}}): in the
// XML form, their parameters' JSON schema types convert the values the
// model writes as text (see SplitToolCalls).
func NewToolSplitter(syn ToolSyntax, tools []json.RawMessage) *ToolSplitter {
	t := &ToolSplitter{syn: syn}
	if syn.Format == ToolXML {
		t.types = paramTypes(tools)
	}
	return t
}

// Syntax is the splitter's tool-call syntax.
func (t *ToolSplitter) Syntax() ToolSyntax { return t.syn }

// Feed adds text and returns the content and calls that are final now.
func (t *ToolSplitter) Feed(text string) (content string, calls []FunctionCall) {
	t.buf = append(t.buf, text...)
	return t.split(false)
}

// Flush ends the text: what is held back is returned as content (an
// unclosed block as it is).
func (t *ToolSplitter) Flush() (content string, calls []FunctionCall) {
	return t.split(true)
}

func (t *ToolSplitter) split(end bool) (string, []FunctionCall) {
	if !t.syn.parses() {
		out := string(t.buf)
		t.buf = t.buf[:0]
		return out, nil
	}
	var out strings.Builder
	var calls []FunctionCall
	for {
		if t.trim {
			t.buf = bytes.TrimLeftFunc(t.buf, unicode.IsSpace)
			t.scanned, t.ws = 0, 0
			if len(t.buf) == 0 && !end {
				break
			}
			t.trim = false
		}
		if t.inBlock {
			// Only what came since the last search is searched again
			// (with the tail a Close may have started in), so that a long
			// block costs time in proportion to its length.
			body := t.buf[len(t.syn.Open):]
			from := max(0, t.scanned-len(t.syn.Close)+1)
			i := bytes.Index(body[from:], []byte(t.syn.Close))
			if i >= 0 {
				i += from
			}
			t.scanned = len(body)
			if i < 0 {
				if end {
					out.WriteString(t.sep)
					out.Write(t.buf)
					t.buf, t.sep = t.buf[:0], ""
				}
				break
			}
			block := t.buf[:len(t.syn.Open)+i+len(t.syn.Close)]
			t.buf = t.buf[len(block):]
			t.inBlock, t.scanned = false, 0
			if c, err := t.parse(string(body[:i])); err == nil {
				calls = append(calls, c)
				t.trim = true
			} else {
				out.WriteString(t.sep) // malformed: stays text
				out.Write(block)
			}
			t.sep = ""
			continue
		}
		// As in a block, only what is new is searched (and trimmed), so
		// that a long run of whitespace held back costs linear time.
		from := max(0, t.scanned-len(t.syn.Open)+1)
		if i := bytes.Index(t.buf[from:], []byte(t.syn.Open)); i >= 0 {
			i += from
			// The content before a block, without the whitespace that
			// separates it from the block.
			before := t.trimSpace(t.buf[:i])
			out.Write(before)
			t.sep = string(t.buf[len(before):i])
			t.buf = t.buf[i:]
			t.inBlock, t.scanned, t.ws = true, 0, 0
			continue
		}
		if end {
			out.Write(t.buf)
			t.buf, t.scanned, t.ws = t.buf[:0], 0, 0
			break
		}
		keep := partialSuffix(t.buf, t.syn.Open)
		held := t.buf[:len(t.buf)-keep]
		final := t.trimSpace(held)
		out.Write(final)
		t.buf = t.buf[len(final):]
		t.scanned, t.ws = len(t.buf), len(held)-len(final)
		break
	}
	return out.String(), calls
}

// parse parses the inside of a block.
func (t *ToolSplitter) parse(inner string) (FunctionCall, error) {
	if t.syn.Format == ToolXML {
		return parseXMLCall(inner, t.types)
	}
	return parseCall(inner)
}

// trimSpace is b (a prefix of buf) without its trailing whitespace; the
// first t.ws bytes of buf are known to be whitespace and are not read again.
func (t *ToolSplitter) trimSpace(b []byte) []byte {
	if len(b) <= t.ws {
		return b[:0]
	}
	rest := bytes.TrimRightFunc(b[t.ws:], unicode.IsSpace)
	if len(rest) == 0 {
		return b[:0]
	}
	return b[:t.ws+len(rest)]
}

// partialSuffix is the length of the longest suffix of s that is a proper
// prefix of marker.
func partialSuffix(s []byte, marker string) int {
	for n := min(len(s), len(marker)-1); n > 0; n-- {
		if bytes.HasSuffix(s, []byte(marker[:n])) {
			return n
		}
	}
	return 0
}

// SplitToolCalls separates the tool calls from a whole text: the content
// left and the calls, as a ToolSplitter fed all of text at once.
//
// In the XML form, a call's arguments become a JSON object of its
// parameters in the order written; a parameter written twice makes the
// block text. Each value is the text between <parameter=KEY> and
// </parameter> less one newline at each end (those the format adds); it
// ends at the first </parameter> followed, past whitespace, by the next
// <parameter= or by </function>. The value is converted by the JSON
// schema type that the request's tools declare for that parameter
// ("type", a name or a list of names, or the types of "anyOf" / "oneOf"):
//   - "string" (or no schema, an unknown tool or parameter): the text as
//     it is;
//   - "null": null for null or None (any case);
//   - "boolean": true or false, in any case (Qwen3.5's template writes
//     Python's True and False);
//   - "integer", "number": the text (less surrounding whitespace) when it
//     is a JSON integer or number;
//   - "object", "array": the text when it is a JSON object or array.
//
// With several types, null is tried first, then string (which takes the
// text as it is), then the others in the order above. A value that is
// none of its types stays a string: the arguments are what the model
// wrote, not a guess.
func SplitToolCalls(syn ToolSyntax, tools []json.RawMessage, text string) (content string, calls []FunctionCall) {
	t := NewToolSplitter(syn, tools)
	a, c1 := t.Feed(text)
	b, c2 := t.Flush()
	return a + b, append(c1, c2...)
}
