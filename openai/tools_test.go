package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tarfa-ai/tarfa/tokenizer"
)

func template(t *testing.T, src string) *tokenizer.ChatTemplate {
	t.Helper()
	tpl, err := tokenizer.LoadChatTemplateFS(fstest.MapFS{tokenizer.ChatTemplateFile: {Data: []byte(src)}})
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

func TestDeriveToolSyntax(t *testing.T) {
	qwen3, err := tokenizer.LoadChatTemplate("../validation/testdata/qwen3-tokenizer")
	if err != nil {
		t.Fatal(err)
	}
	loop := `{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}` +
		`{%- for c in m.tool_calls %}%s{%- endfor %}{%- endfor %}`
	for _, tc := range []struct {
		name string
		tpl  *tokenizer.ChatTemplate
		want ToolSyntax
		ok   bool
	}{
		{"qwen3 fixture", qwen3, ToolSyntax{"<tool_call>", "</tool_call>", ToolJSON}, true},
		{"another tag", template(t, strings.Replace(loop, "%s",
			`<function_call> {"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}} </function_call>`, 1)),
			ToolSyntax{"<function_call>", "</function_call>", ToolJSON}, true},
		{"no markers", template(t, strings.Replace(loop, "%s",
			`{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}`, 1)), ToolSyntax{}, false},
		{"a list after a bracket tag", template(t, strings.Replace(loop, "%s",
			`[TOOL_CALLS][{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}]`, 1)), ToolSyntax{}, false},
		{"unclosed tag", template(t, strings.Replace(loop, "%s",
			`<tool_call>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}<|end|>`, 1)), ToolSyntax{}, false},
		{"xml parameters", template(t, strings.Replace(loop, "%s",
			`<tool_call><function={{ c.function.name }}></function></tool_call>`, 1)), ToolSyntax{}, false},
		{"not a tag", template(t, strings.Replace(loop, "%s",
			`<call{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</call>`, 1)), ToolSyntax{}, false},
		{"not a tag name", template(t, strings.Replace(loop, "%s",
			`<call 1>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</call 1>`, 1)), ToolSyntax{}, false},
		{"a tag too long for a marker", template(t, strings.Replace(loop, "%s",
			`<`+strings.Repeat("t", maxMarker)+`>{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</`+strings.Repeat("t", maxMarker)+`>`, 1)), ToolSyntax{}, false},
		{"a string argument left out", template(t, strings.Replace(loop, "%s",
			`<tool_call>{"name": "{{ c.function.name }}", "arguments": {"tarfa_probe_arg": {{ c.function.arguments.tarfa_probe_arg }}}}</tool_call>`, 1)), ToolSyntax{}, false},
		{"name only", template(t, strings.Replace(loop, "%s",
			`<tool_call>{"name": "{{ c.function.name }}"}</tool_call>`, 1)), ToolSyntax{}, false},
		{"calls not rendered", template(t, `{%- for m in messages %}{{ m.content }}{%- endfor %}`), ToolSyntax{}, false},
	} {
		got, ok := DeriveToolSyntax(tc.tpl.RenderJSON)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

var qwenSyntax = ToolSyntax{"<tool_call>", "</tool_call>", ToolJSON}

func TestSplitToolCalls(t *testing.T) {
	call := func(name, args string) FunctionCall { return FunctionCall{Name: name, Arguments: args} }
	for _, tc := range []struct {
		text, content string
		calls         []FunctionCall
	}{
		{"plain text", "plain text", nil},
		{"Let me look.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
			"Let me look.", []FunctionCall{call("get_weather", `{"city":"Paris"}`)}},
		{"<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\"}\n</tool_call>",
			"", []FunctionCall{call("a", `{}`), call("b", `{}`)}},
		{"x <tool_call>{\"name\": \"a\", \"arguments\": {\"n\": [1, 2]}}</tool_call> y", "xy", []FunctionCall{call("a", `{"n":[1,2]}`)}},
		// Malformed blocks stay text, whitespace and all.
		{"hi\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\n</tool_call>", "hi\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\n</tool_call>", nil},
		{"<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", nil},
		{"<tool_call>{\"name\": \"a\", \"arguments\": \"x\"}</tool_call>", "<tool_call>{\"name\": \"a\", \"arguments\": \"x\"}</tool_call>", nil},
		{"<tool_call>{\"name\": \"a\"} {}</tool_call>", "<tool_call>{\"name\": \"a\"} {}</tool_call>", nil},
		{"ok <tool_call>{\"name\": \"a\"}", "ok <tool_call>{\"name\": \"a\"}", nil},
		{"a <tool_ca", "a <tool_ca", nil},
	} {
		checkSplit(t, qwenSyntax, nil, tc.text, tc.content, tc.calls)
	}
	// Without a syntax, all is text.
	text := "<tool_call>{\"name\": \"a\"}</tool_call>"
	if content, calls := SplitToolCalls(ToolSyntax{}, nil, text); content != text || calls != nil {
		t.Errorf("zero syntax: %q %v", content, calls)
	}
}

// checkSplit checks that text splits into content and calls, whole and
// streamed in pieces of every size, with no content sent before it is
// final.
func checkSplit(t *testing.T, syn ToolSyntax, tools []json.RawMessage, text, content string, calls []FunctionCall) {
	t.Helper()
	if c, fc := SplitToolCalls(syn, tools, text); c != content || !reflect.DeepEqual(fc, calls) {
		t.Errorf("%q: content %q calls %v, want %q %v", text, c, fc, content, calls)
	}
	for size := 1; size <= len(text); size++ {
		s := NewToolSplitter(syn, tools)
		var got strings.Builder
		var gotCalls []FunctionCall
		for i := 0; i < len(text); i += size {
			c, fc := s.Feed(text[i:min(i+size, len(text))])
			got.WriteString(c)
			gotCalls = append(gotCalls, fc...)
			if !strings.HasPrefix(content, got.String()) {
				t.Fatalf("%q in pieces of %d: content so far %q is not a prefix of %q", text, size, got.String(), content)
			}
		}
		c, fc := s.Flush()
		got.WriteString(c)
		gotCalls = append(gotCalls, fc...)
		if got.String() != content || !reflect.DeepEqual(gotCalls, calls) {
			t.Errorf("%q in pieces of %d: content %q calls %v, want %q %v", text, size, got.String(), gotCalls, content, calls)
		}
	}
}

// TestToolSplitterHoldsBack: text that may start a block is not sent
// until it is known not to.
func TestToolSplitterHoldsBack(t *testing.T) {
	s := NewToolSplitter(qwenSyntax, nil)
	for _, step := range []struct{ in, out string }{
		{"Hello", "Hello"},
		{" <tool", ""},
		{"_", ""},
		{"box", " <tool_box"},
		{"\n\n", ""},
		{"<tool_call>{\"name\": \"f\"}", ""},
	} {
		if got, calls := s.Feed(step.in); got != step.out || calls != nil {
			t.Fatalf("Feed(%q) = %q %v, want %q", step.in, got, calls, step.out)
		}
	}
	if got, calls := s.Feed("</tool_call>\n"); got != "" || len(calls) != 1 || calls[0].Name != "f" {
		t.Fatalf("closing the block: %q %v", got, calls)
	}
}

// TestToolSplitterLongBlock: a block that never closes, fed a byte at a
// time, costs time in proportion to its length (1 MiB: well under a
// second; searching or copying it all again per byte would take minutes).
func TestToolSplitterLongBlock(t *testing.T) {
	s := NewToolSplitter(qwenSyntax, nil)
	start := time.Now()
	if c, _ := s.Feed("<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": \""); c != "" {
		t.Fatalf("content %q", c)
	}
	const n = 1 << 20
	for i := range n {
		if i%4096 == 0 && time.Since(start) > 10*time.Second {
			t.Fatalf("%v for the first %d bytes of a block", time.Since(start), i)
		}
		if c, calls := s.Feed("</tool_cal"[:1+len(s.buf)%9]); c != "" || calls != nil {
			t.Fatalf("content %q calls %v inside the block", c, calls)
		}
	}
	c, _ := s.Flush()
	if !strings.HasPrefix(c, "<tool_call>") || len(c) < n {
		t.Errorf("the unclosed block: %d bytes of content", len(c))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("%v for a block of %d bytes", d, len(c))
	}
}

// TestToolSplitterLongWhitespace: a long run of whitespace, held back
// as it may only separate content from a block, fed a token at a time,
// costs time in proportion to its length (300 KiB: well under a second;
// searching or trimming it all again per token takes minutes).
func TestToolSplitterLongWhitespace(t *testing.T) {
	s := NewToolSplitter(qwenSyntax, nil)
	start := time.Now()
	if c, _ := s.Feed("text"); c != "text" {
		t.Fatalf("content %q", c)
	}
	ws := []string{" ", "\n", "\t", "\u3000", "    "}
	const n = 1 << 17
	for i := range n {
		if i%1024 == 0 && time.Since(start) > 10*time.Second {
			t.Fatalf("%v for the first %d pieces of whitespace", time.Since(start), i)
		}
		if c, calls := s.Feed(ws[i%len(ws)]); c != "" || calls != nil {
			t.Fatalf("content %.40q calls %v in whitespace", c, calls)
		}
	}
	c, calls := s.Feed(`<tool_call>{"name": "f"}</tool_call>`)
	if c != "" || len(calls) != 1 || calls[0].Name != "f" {
		t.Errorf("the block after the whitespace: %d bytes of content %.40q, calls %v", len(c), c, calls)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("%v for %d pieces of whitespace", d, n)
	}
}

func TestParseChatToolHistory(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"sunny"}]}`
	p, e := ParseChat([]byte(body))
	if e != nil {
		t.Fatal(e)
	}
	var m struct {
		ToolCalls []struct {
			Function struct {
				Arguments map[string]string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(p.Messages[1], &m); err != nil || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Arguments["city"] != "Paris" {
		t.Errorf("assistant tool_calls for the template: %s (%v)", p.Messages[1], err)
	}
	qwen3, err := tokenizer.LoadChatTemplate("../validation/testdata/qwen3-tokenizer")
	if err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(map[string]any{"messages": p.Messages, "add_generation_prompt": true})
	text, err := qwen3.RenderJSON(in)
	want := "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
	if err != nil || !strings.HasSuffix(text, want) {
		t.Errorf("rendered history:\n%s\nwant it to end in\n%s (%v)", text, want, err)
	}
	for _, tc := range []struct{ repl, want string }{
		{`"arguments":"{\"city\": \"Paris\"}"`, "tool_calls[0].function.arguments: want a string"},
		{`"arguments":"not json"`, `tool_calls[0].function.arguments: "not json" is not a JSON object`},
		{`"arguments":"[1]"`, `tool_calls[0].function.arguments: "[1]" is not a JSON object`},
		{`"type":"function"`, "tool_calls[0]: want"},
		{`"tool_calls":[`, "tool_calls: want an array"},
	} {
		bad := body
		switch tc.repl {
		case `"arguments":"{\"city\": \"Paris\"}"`:
			bad = strings.Replace(body, tc.repl, `"arguments":{"city":"Paris"}`, 1)
		case `"type":"function"`:
			bad = strings.Replace(body, tc.repl, `"type":"retrieval"`, 1)
		case `"tool_calls":[`:
			bad = strings.Replace(body, tc.repl, `"tool_calls":{"x":[`, 1)
			bad = strings.Replace(bad, `}]},{"role":"tool"`, `}]}},{"role":"tool"`, 1)
		default:
			bad = strings.Replace(body, `"arguments":"{\"city\": \"Paris\"}"`, tc.repl, 1)
		}
		if _, e := ParseChat([]byte(bad)); e == nil || e.Status != 400 || !strings.Contains(e.Message, "messages[1]") || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %v, want a 400 naming messages[1] and %q", bad, e, tc.want)
		}
	}
	user := strings.Replace(body, `{"role":"user","content":"weather?"}`, `{"role":"user","content":"weather?","tool_calls":[]}`, 1)
	if _, e := ParseChat([]byte(user)); e == nil || !strings.Contains(e.Message, "messages[0]: tool_calls: only an assistant") {
		t.Errorf("tool_calls on a user message: %v", e)
	}
	if p, e := ParseChat([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"none"}`)); e != nil || !p.NoTools {
		t.Errorf(`tool_choice "none": %+v %v`, p, e)
	}
}

// FuzzToolSplitter: any text, fed in two pieces, splits as it does whole,
// and every byte is content or part of a parsed call.
func FuzzToolSplitter(f *testing.F) {
	f.Add("a\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call> b", 7)
	f.Add("<tool_call><tool_call>{\"name\":\"g\"}</tool_call></tool_call>", 3)
	f.Add("<tool_ca", 1)
	f.Fuzz(func(t *testing.T, text string, at int) {
		checkFuzzSplit(t, qwenSyntax, nil, text, at, func(fc FunctionCall) bool { return json.Valid([]byte(fc.Arguments)) })
	})
}

// checkFuzzSplit checks that text fed to a splitter in two pieces, at at
// (folded into range), splits as it does whole, that without calls all of
// it is content, and that every call has a name and arguments ok accepts.
func checkFuzzSplit(t *testing.T, syn ToolSyntax, tools []json.RawMessage, text string, at int, ok func(FunctionCall) bool) {
	t.Helper()
	content, calls := SplitToolCalls(syn, tools, text)
	if at < 0 {
		at = -at
	}
	at %= len(text) + 1
	s := NewToolSplitter(syn, tools)
	a, c1 := s.Feed(text[:at])
	b, c2 := s.Feed(text[at:])
	c, c3 := s.Flush()
	if a+b+c != content || !reflect.DeepEqual(append(append(c1, c2...), c3...), calls) {
		t.Errorf("%q split at %d: %q %v, whole %q %v", text, at, a+b+c, append(append(c1, c2...), c3...), content, calls)
	}
	if len(calls) == 0 && content != text {
		t.Errorf("%q: no calls, content %q", text, content)
	}
	for _, fc := range calls {
		if fc.Name == "" || !ok(fc) {
			t.Errorf("%q: call %+v", text, fc)
		}
	}
}
