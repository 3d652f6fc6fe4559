package openai

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/tokenizer"
)

// qwen35Dir holds the Qwen3.5 chat template (see its PROVENANCE.md).
const qwen35Dir = "../validation/testdata/qwen35-template"

var xmlSyntax = ToolSyntax{"<tool_call>", "</tool_call>", ToolXML}

// xmlTools are the tools of the XML tests: a parameter of each type.
var xmlTools = []json.RawMessage{json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
	"city": {"type": "string"}, "days": {"type": "integer"}, "ratio": {"type": "number"}, "metric": {"type": "boolean"},
	"opts": {"type": "object"}, "tags": {"type": "array"}, "note": {"type": ["string", "null"]},
	"limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]}, "any": {}}}}}`),
	json.RawMessage(`{"type": "function", "function": {"name": "get_weather", "parameters": {"properties": {"city": {"type": "integer"}}}}}`),
	json.RawMessage(`{"type": "function", "function": {"name": "noop"}}`)}

func TestDeriveToolSyntaxXML(t *testing.T) {
	qwen35, err := tokenizer.LoadChatTemplate(qwen35Dir)
	if err != nil {
		t.Fatal(err)
	}
	loop := `{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}` +
		`{%- for c in m.tool_calls %}%s{%- endfor %}{%- endfor %}`
	// A template of loop with call in it, \n read as a line break.
	calls := func(call string) *tokenizer.ChatTemplate {
		return template(t, strings.Replace(loop, "%s", strings.ReplaceAll(call, `\n`, `{{ "\n" }}`), 1))
	}
	param := func(value string) string {
		return `<tool_call>\n<function={{ c.function.name }}>\n{% for k, v in c.function.arguments|items %}` +
			`<parameter={{ k }}>` + value + `</parameter>\n{% endfor %}</function>\n</tool_call>`
	}
	for _, tc := range []struct {
		name string
		tpl  *tokenizer.ChatTemplate
		want ToolSyntax
		ok   bool
	}{
		{"qwen3.5", qwen35, xmlSyntax, true},
		{"items", calls(param(`\n{{ v }}\n`)), xmlSyntax, true},
		{"another tag, no line breaks between tags, values in reverse", calls(`<call><function={{ c.function.name }}>` +
			`{% for k, v in c.function.arguments|items|reverse %}<parameter={{ k }}>\n{{ v }}\n</parameter>{% endfor %}</function></call>`),
			ToolSyntax{"<call>", "</call>", ToolXML}, true},
		// Strings JSON-quoted: a value would not read back as written.
		{"strings as JSON", calls(param(`\n{{ v | tojson }}\n`)), ToolSyntax{}, false},
		// Without the line breaks around values: they read back as well.
		{"values without line breaks", calls(param(`{{ v }}`)), xmlSyntax, true},
		// Two line breaks after a value: it would not read back as written.
		{"a blank line after values", calls(param(`\n{{ v }}\n\n`)), ToolSyntax{}, false},
		{"an argument left out", calls(`<tool_call>\n<function={{ c.function.name }}>\n<parameter=tarfa_probe_arg>\n1\n</parameter>\n</function>\n</tool_call>`),
			ToolSyntax{}, false},
		{"no tags around it", calls(strings.TrimSuffix(strings.TrimPrefix(param(`\n{{ v }}\n`), `<tool_call>\n`), `\n</tool_call>`)), ToolSyntax{}, false},
		{"unclosed function", calls(strings.Replace(param(`\n{{ v }}\n`), `</function>`, ``, 1)), ToolSyntax{}, false},
	} {
		got, ok := DeriveToolSyntax(tc.tpl.RenderJSON)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %+v %v, want %+v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSplitToolCallsXML(t *testing.T) {
	call := func(name, args string) FunctionCall { return FunctionCall{Name: name, Arguments: args} }
	block := func(fn string, params ...string) string {
		var b strings.Builder
		b.WriteString("<tool_call>\n<function=" + fn + ">\n")
		for i := 0; i+1 < len(params); i += 2 {
			b.WriteString("<parameter=" + params[i] + ">\n" + params[i+1] + "\n</parameter>\n")
		}
		b.WriteString("</function>\n</tool_call>")
		return b.String()
	}
	weather := func(k, v string) string { return block("get_weather", k, v) }
	for _, tc := range []struct {
		text, content string
		calls         []FunctionCall
	}{
		{"plain text", "plain text", nil},
		// The form of the brief, text before it.
		{"Let me look.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
			"Let me look.", []FunctionCall{call("get_weather", `{"city":"Paris","days":3}`)}},
		{weather("city", "Paris") + "\n" + weather("city", "Oslo") + "\n\nDone.",
			"Done.", []FunctionCall{call("get_weather", `{"city":"Paris"}`), call("get_weather", `{"city":"Oslo"}`)}},
		{block("noop"), "", []FunctionCall{call("noop", `{}`)}},
		// Exactly one newline is the format's at each end.
		{weather("city", "\nline one\nline two\n"), "", []FunctionCall{call("get_weather", `{"city":"\nline one\nline two\n"}`)}},
		{weather("city", ""), "", []FunctionCall{call("get_weather", `{"city":""}`)}},
		{"<tool_call><function=get_weather><parameter=city>Paris</parameter></function></tool_call>", "",
			[]FunctionCall{call("get_weather", `{"city":"Paris"}`)}},
		// A value may hold the tags as text; HTML is not escaped.
		{weather("city", "a</parameter> b <parameter=x>\n</function>c"), "",
			[]FunctionCall{call("get_weather", `{"city":"a</parameter> b <parameter=x>\n</function>c"}`)}},
		{weather("city", `<b>"&"</b>`), "", []FunctionCall{call("get_weather", `{"city":"<b>\"&\"</b>"}`)}},
		// Each value by its declared type.
		{block("get_weather", "days", "3", "ratio", "2.5e3", "metric", "True", "opts", `{"a": [1, 2]}`, "tags", `[ "x" ]`, "note", "None", "limit", "null", "any", "7"), "",
			[]FunctionCall{call("get_weather", `{"days":3,"ratio":2.5e3,"metric":true,"opts":{"a":[1,2]},"tags":["x"],"note":null,"limit":null,"any":"7"}`)}},
		{block("get_weather", "days", " 12 ", "metric", "false", "limit", "5", "note", "text"), "",
			[]FunctionCall{call("get_weather", `{"days":12,"metric":false,"limit":5,"note":"text"}`)}},
		// Values that are not their type stay strings, as written.
		{block("get_weather", "days", "3.5", "ratio", "1e", "metric", "yes", "opts", "[1]", "tags", "{}", "limit", "many", "city", "3"), "",
			[]FunctionCall{call("get_weather", `{"days":"3.5","ratio":"1e","metric":"yes","opts":"[1]","tags":"{}","limit":"many","city":"3"}`)}},
		{block("get_weather", "days", "007", "ratio", "NaN", "opts", "{bad}"), "",
			[]FunctionCall{call("get_weather", `{"days":"007","ratio":"NaN","opts":"{bad}"}`)}},
		// null only where the schema allows it.
		{block("get_weather", "city", "None", "days", "null", "note", "NULL"), "",
			[]FunctionCall{call("get_weather", `{"city":"None","days":"null","note":null}`)}},
		// A parameter, or a tool, the request did not declare: strings.
		{block("get_weather", "wind", "3"), "", []FunctionCall{call("get_weather", `{"wind":"3"}`)}},
		{block("other", "n", "3", "flag", "true"), "", []FunctionCall{call("other", `{"n":"3","flag":"true"}`)}},
		// Malformed blocks stay text, whitespace and all.
		{"hi\n" + block("get_weather", "city", "a", "city", "b"), "hi\n" + block("get_weather", "city", "a", "city", "b"), nil},
		{"hi\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</tool_call>",
			"hi\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</tool_call>", nil},
		{"<tool_call>\n<function=f>\n<parameter=city>\nParis\n</function>\n</tool_call>", "<tool_call>\n<function=f>\n<parameter=city>\nParis\n</function>\n</tool_call>", nil},
		{"<tool_call>\n<function=f>\n</function>\nmore\n</tool_call>", "<tool_call>\n<function=f>\n</function>\nmore\n</tool_call>", nil},
		{"<tool_call>\n<function=f>\nnote\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>", "<tool_call>\n<function=f>\nnote\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>", nil},
		{"<tool_call>\nwhy\n<function=f>\n</function>\n</tool_call>", "<tool_call>\nwhy\n<function=f>\n</function>\n</tool_call>", nil},
		{"<tool_call>\n<function=>\n</function>\n</tool_call>", "<tool_call>\n<function=>\n</function>\n</tool_call>", nil},
		{"<tool_call>\n<function=a\nb>\n</function>\n</tool_call>", "<tool_call>\n<function=a\nb>\n</function>\n</tool_call>", nil},
		{"<tool_call>\n<function=f>\n<parameter=>\n1\n</parameter>\n</function>\n</tool_call>", "<tool_call>\n<function=f>\n<parameter=>\n1\n</parameter>\n</function>\n</tool_call>", nil},
		{"<tool_call>\n<function=f>\n</function>\n<function=g>\n</function>\n</tool_call>", "<tool_call>\n<function=f>\n</function>\n<function=g>\n</function>\n</tool_call>", nil},
		{"<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", nil},
		{"ok " + weather("city", "Paris")[:40], "ok " + weather("city", "Paris")[:40], nil},
		{"<tool_call>\n<function=" + strings.Repeat("f", xmlMaxNameLength) + ">\n</function>\n</tool_call>", "",
			[]FunctionCall{call(strings.Repeat("f", xmlMaxNameLength), `{}`)}},
		{"<tool_call>\n<function=" + strings.Repeat("f", xmlMaxNameLength+1) + ">\n</function>\n</tool_call>",
			"<tool_call>\n<function=" + strings.Repeat("f", xmlMaxNameLength+1) + ">\n</function>\n</tool_call>", nil},
	} {
		checkSplit(t, xmlSyntax, xmlTools, tc.text, tc.content, tc.calls)
	}
	// The JSON form's blocks are not calls in the XML form, nor the
	// other way round.
	jsonBlock := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	if content, calls := SplitToolCalls(qwenSyntax, xmlTools, weather("city", "Paris")); content != weather("city", "Paris") || calls != nil {
		t.Errorf("an XML block in the JSON form: %q %v", content, calls)
	}
	if content, calls := SplitToolCalls(xmlSyntax, xmlTools, jsonBlock); content != jsonBlock || calls != nil {
		t.Errorf("a JSON block in the XML form: %q %v", content, calls)
	}
	// A syntax of no known format parses nothing.
	for _, text := range []string{weather("city", "Paris"), jsonBlock} {
		if content, calls := SplitToolCalls(ToolSyntax{Open: "<tool_call>", Close: "</tool_call>"}, xmlTools, text); content != text || calls != nil {
			t.Errorf("no format: %q %v", content, calls)
		}
	}
}

// TestToolSplitterXMLHostile: long hostile outputs cost time in proportion
// to their length: a value full of </parameter> that does not end it
// (each followed by a run of whitespace), a call with very many
// parameters, and a block that never closes, fed a piece at a time. Each
// is a few MiB: well under a second; searching the value or the block
// again from its start at each step, or comparing each parameter with
// those before it, would take minutes.
func TestToolSplitterXMLHostile(t *testing.T) {
	const n = 1 << 16
	const params = 1 << 18
	var long strings.Builder
	long.WriteString("<tool_call>\n<function=get_weather>\n<parameter=city>\n")
	for range n {
		long.WriteString("</parameter>" + strings.Repeat(" ", 32) + "x")
	}
	long.WriteString("\n</parameter>\n</function>\n</tool_call>")
	var many strings.Builder
	many.WriteString("<tool_call>\n<function=f>\n")
	for i := range params {
		many.WriteString("<parameter=p" + strings.Repeat("q", i%7) + string(rune('a'+i%26)) + strconv.Itoa(i) + ">\n1\n</parameter>\n")
	}
	many.WriteString("</function>\n</tool_call>")
	for _, tc := range []struct {
		name, text string
		args       int // bytes of the one call's arguments
	}{
		{"a value full of </parameter>", long.String(), n*45 + len(`{"city":""}`)},
		{"many parameters", many.String(), -1},
	} {
		start := time.Now()
		content, calls := SplitToolCalls(xmlSyntax, xmlTools, tc.text)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: %v for %d bytes", tc.name, d, len(tc.text))
		}
		if content != "" || len(calls) != 1 || !json.Valid([]byte(calls[0].Arguments)) || (tc.args >= 0 && len(calls[0].Arguments) != tc.args) {
			t.Errorf("%s: content %.40q, %d calls", tc.name, content, len(calls))
		}
	}
	var args map[string]string
	if _, calls := SplitToolCalls(xmlSyntax, xmlTools, many.String()); len(calls) != 1 || json.Unmarshal([]byte(calls[0].Arguments), &args) != nil || len(args) != params {
		t.Errorf("many parameters: %d arguments, want %d", len(args), params)
	}

	s := NewToolSplitter(xmlSyntax, xmlTools)
	start := time.Now()
	if c, _ := s.Feed("<tool_call>\n<function=get_weather>\n<parameter=city>\n"); c != "" {
		t.Fatalf("content %q", c)
	}
	const m = 1 << 20
	for i := range m {
		if i%4096 == 0 && time.Since(start) > 10*time.Second {
			t.Fatalf("%v for the first %d bytes of a block", time.Since(start), i)
		}
		if c, calls := s.Feed("</parameter>\n</tool_cal"[:1+i%22]); c != "" || calls != nil {
			t.Fatalf("content %q calls %v inside the block", c, calls)
		}
	}
	if c, _ := s.Flush(); !strings.HasPrefix(c, "<tool_call>") || len(c) < m {
		t.Errorf("the unclosed block: %d bytes of content", len(c))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("%v for an unclosed block of %d pieces", d, m)
	}
}

// TestXMLToolHistory: an assistant turn's calls in the request render
// through the Qwen3.5 template in the XML form, tool results as its
// tool_response blocks, and the calls read back from that text as the
// arguments they were.
func TestXMLToolHistory(t *testing.T) {
	args := `{"city": "Paris", "days": 3, "metric": true, "opts": {"a": [1, "x"]}, "tags": ["a", "b"], "note": null, "any": "two\nlines"}`
	argsJSON, _ := json.Marshal(args)
	body := `{"model":"m","messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":"Let me look.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":` + string(argsJSON) + `}},` +
		`{"id":"call_2","type":"function","function":{"name":"noop","arguments":""}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"sunny"},{"role":"tool","tool_call_id":"call_2","content":"done"}],` +
		`"tools":[` + string(xmlTools[0]) + `,` + string(xmlTools[2]) + `]}`
	p, e := ParseChat([]byte(body))
	if e != nil {
		t.Fatal(e)
	}
	qwen35, err := tokenizer.LoadChatTemplate(qwen35Dir)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(map[string]any{"messages": p.Messages, "tools": p.Tools, "add_generation_prompt": true})
	text, err := qwen35.RenderJSON(in)
	calls := "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n" +
		"<parameter=metric>\nTrue\n</parameter>\n<parameter=opts>\n{\"a\": [1, \"x\"]}\n</parameter>\n<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n" +
		"<parameter=note>\nNone\n</parameter>\n<parameter=any>\ntwo\nlines\n</parameter>\n</function>\n</tool_call>\n" +
		"<tool_call>\n<function=noop>\n</function>\n</tool_call>"
	want := "<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nLet me look.\n\n" + calls + "<|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\ndone\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"
	if err != nil || !strings.HasSuffix(text, want) {
		t.Fatalf("rendered history:\n%s\nwant it to end in\n%s (%v)", text, want, err)
	}
	content, got := SplitToolCalls(xmlSyntax, p.Tools, "Let me look.\n\n"+calls)
	wantArgs := `{"city":"Paris","days":3,"metric":true,"opts":{"a":[1,"x"]},"tags":["a","b"],"note":null,"any":"two\nlines"}`
	if content != "Let me look." || !reflect.DeepEqual(got, []FunctionCall{{"get_weather", wantArgs}, {"noop", "{}"}}) {
		t.Errorf("the rendered calls read back: %q %v, want %s", content, got, wantArgs)
	}
	var a, b any
	json.Unmarshal([]byte(args), &a)
	json.Unmarshal([]byte(wantArgs), &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("round trip: %s became %s", args, wantArgs)
	}
}

// FuzzToolSplitterXML: any text, fed in two pieces, splits as it does
// whole; every byte is content or part of a parsed call, and every call
// has a name and a JSON object of arguments.
func FuzzToolSplitterXML(f *testing.F) {
	f.Add("a\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call> b", 7)
	f.Add("<tool_call><function=get_weather><parameter=opts>{\"a\": 1}</parameter><parameter=metric>True</parameter></function></tool_call>", 20)
	f.Add("<tool_call>\n<function=f>\n<parameter=x>\n</parameter></parameter>\n</function>\n</tool_call>", 3)
	f.Add("<tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n<parameter=x>\n2\n</parameter>\n</function>\n</tool_call>", 0)
	f.Add("<tool_call>\n<function=get_weather>\n<parameter=note>\nNone\n</parameter>\n<parameter=tags>\n[1,\n</parameter>\n</function>", 30)
	f.Fuzz(func(t *testing.T, text string, at int) {
		checkFuzzSplit(t, xmlSyntax, xmlTools, text, at, func(fc FunctionCall) bool {
			var args map[string]json.RawMessage
			return json.Unmarshal([]byte(fc.Arguments), &args) == nil
		})
	})
}
