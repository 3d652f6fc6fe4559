package server

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tarfa-ai/tarfa/convert"
	oai "github.com/tarfa-ai/tarfa/openai"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/tokenizer"
	"github.com/tarfa-ai/tarfa/validation/synth"
)

// weatherTool is the tool the tests offer.
var weatherTool = openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
	Name: "get_weather", Description: openai.String("Weather in a city"),
	Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
})

// toolScript is what the noise model is made to say: some text, then two
// calls, the first split across tokens and the marker too.
var toolScript = []string{"Let me", " check.\n\n<tool", "_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
	"\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"}

// TestChatToolCalls: a response whose text holds tool-call blocks comes
// back, whole and streamed, through openai-go as message.tool_calls with
// the blocks taken out of the content and finish_reason "tool_calls"; the
// attested tokens are the model's, as for any response.
func TestChatToolCalls(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	if st := f.srv.state.Load(); st.tools != (oai.ToolSyntax{Open: "<tool_call>", Close: "</tool_call>", Format: oai.ToolJSON}) {
		t.Fatalf("the test model's template: tool syntax %+v", st.tools)
	}
	f.srv.script = toolScript
	c := f.client()
	params := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
		Tools: []openai.ChatCompletionToolUnionParam{weatherTool}, MaxTokens: openai.Int(6), Temperature: openai.Float(0)}
	var resp *http.Response
	whole, err := c.Chat.Completions.New(context.Background(), params, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	check := func(how string, m openai.ChatCompletionMessage, reason string) {
		t.Helper()
		if m.Content != "Let me check." || reason != "tool_calls" || len(m.ToolCalls) != 2 {
			t.Fatalf("%s: content %q finish %q, %d tool calls %+v", how, m.Content, reason, len(m.ToolCalls), m.ToolCalls)
		}
		for i, city := range []string{"Paris", "Oslo"} {
			tc := m.ToolCalls[i]
			var args map[string]string
			if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil || args["city"] != city || tc.Function.Name != "get_weather" ||
				tc.Type != "function" || !strings.HasPrefix(tc.ID, "call_") {
				t.Errorf("%s: call %d %+v (%v), want get_weather in %s", how, i, tc, err, city)
			}
		}
		if m.ToolCalls[0].ID == m.ToolCalls[1].ID {
			t.Errorf("%s: two calls with id %s", how, m.ToolCalls[0].ID)
		}
	}
	check("whole", whole.Choices[0].Message, whole.Choices[0].FinishReason)

	// The tokens, and the chain attested, are the model's own: the same
	// as those of the request with the model's own text.
	tf := tarfaOf(t, whole.JSON.ExtraFields["tarfa"].Raw())
	f.srv.script = nil
	plain, err := c.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if tp := tarfaOf(t, plain.JSON.ExtraFields["tarfa"].Raw()); resp.Header.Get(HeaderLogitsChain) != tf.LogitsChain || tf.LogitsChain != tp.LogitsChain ||
		tf.Routing != tp.Routing || whole.Usage.CompletionTokens != plain.Usage.CompletionTokens || whole.Usage.PromptTokens != plain.Usage.PromptTokens {
		t.Errorf("attestation: scripted %+v %+v, the model's text %+v %+v", tf, whole.Usage, tp, plain.Usage)
	}
	if len(plain.Choices[0].Message.ToolCalls) != 0 {
		t.Errorf("the noise model's text made tool calls: %+v", plain.Choices[0].Message)
	}
	f.srv.script = toolScript

	// tool_choice "none": the blocks stay text.
	none := params
	none.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
	if got, err := c.Chat.Completions.New(context.Background(), none); err != nil || got.Choices[0].Message.Content != strings.Join(toolScript, "") ||
		len(got.Choices[0].Message.ToolCalls) != 0 || got.Choices[0].FinishReason == "tool_calls" {
		t.Errorf(`tool_choice "none": %+v %v`, got, err)
	}

	st := c.Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	var deltas int
	for st.Next() {
		ch := st.Current()
		acc.AddChunk(ch)
		for _, cc := range ch.Choices {
			if strings.Contains(cc.Delta.Content, "<tool") || strings.Contains(cc.Delta.Content, "get_weather") {
				t.Errorf("a content delta with the call's text: %q", cc.Delta.Content)
			}
			for _, d := range cc.Delta.ToolCalls {
				if int(d.Index) != deltas || d.ID == "" || d.Function.Name != "get_weather" {
					t.Errorf("tool call delta %d: %+v", deltas, d)
				}
				deltas++
			}
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas != 2 {
		t.Errorf("%d tool call deltas, want 2", deltas)
	}
	check("streamed", acc.Choices[0].Message, acc.Choices[0].FinishReason)
	if acc.Choices[0].Message.ToolCalls[0].Function.Arguments != whole.Choices[0].Message.ToolCalls[0].Function.Arguments {
		t.Errorf("streamed arguments %q, whole %q", acc.Choices[0].Message.ToolCalls[0].Function.Arguments, whole.Choices[0].Message.ToolCalls[0].Function.Arguments)
	}

	// The calls and their results go back to the model through the
	// template.
	call := whole.Choices[0].Message.ToolCalls[0]
	history := params
	history.Messages = append(history.Messages, whole.Choices[0].Message.ToParam(), openai.ToolMessage(`{"sky": "clear"}`, call.ID))
	next, ids, text, err := sendHistory(t, c, f, history)
	if err != nil || int64(len(ids)) != next.Usage.PromptTokens ||
		!strings.Contains(text, "<|im_start|>assistant\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>") ||
		!strings.Contains(text, "<|im_start|>user\n<tool_response>\n{\"sky\": \"clear\"}\n</tool_response><|im_end|>\n<|im_start|>assistant\n") {
		t.Errorf("history rendered (%d tokens, the server's prompt %d, %v):\n%s", len(ids), next.Usage.PromptTokens, err, text)
	}
}

var (
	qwen35Once sync.Once
	qwen35Dir  string
	qwen35Err  error
)

// qwen35Model is the embedded default model's recipe with the Qwen3.5
// chat template (the fixture of validation/testdata/qwen35-template) as its
// chat_template.jinja, converted and verified like any model, built once
// for the package.
func qwen35Model(t *testing.T) string {
	t.Helper()
	testModel(t) // the package's temporary directory
	qwen35Once.Do(func() {
		ctx := context.Background()
		var tpl []byte
		if tpl, qwen35Err = os.ReadFile("../validation/testdata/qwen35-template/chat_template.jinja"); qwen35Err != nil {
			return
		}
		o, err := synth.DefaultOptions()
		if err != nil {
			qwen35Err = err
			return
		}
		o.Extra[tokenizer.ChatTemplateFile] = tpl
		hf := filepath.Join(modelTmp, "qwen35-hf")
		if qwen35Err = synth.WriteContext(ctx, hf, o, synth.WriteOptions{}); qwen35Err != nil {
			return
		}
		qwen35Dir = filepath.Join(modelTmp, "qwen35-jnf")
		_, qwen35Err = convert.Convert(ctx, hf, qwen35Dir, convert.Options{LastLayer: -1, Verify: true})
	})
	if qwen35Err != nil {
		t.Fatal(qwen35Err)
	}
	return qwen35Dir
}

// xmlWeatherTool declares a string, an integer and a boolean parameter.
var xmlWeatherTool = openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
	Name: "get_weather", Description: openai.String("Weather in a city"),
	Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}, "metric": map[string]any{"type": "boolean"}}},
})

// xmlToolScript is what the noise model is made to say in the XML form:
// some text, then two calls, the markers and values split across tokens.
var xmlToolScript = []string{"Let me", " check.\n\n<tool", "_call>\n<function=get_", "weather>\n<parameter=city>\nPar", "is\n</parameter>\n<parameter=days>\n3\n</para",
	"meter>\n<parameter=metric>\nTrue\n</parameter>\n</function>\n</tool_call>", "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"}

// TestChatToolCallsXML: with a model whose template writes calls in the
// XML-parameter form (Qwen3.5's), a response that holds such blocks comes
// back, whole and streamed, through openai-go as message.tool_calls whose
// arguments have the types the request's tool declares; content streams
// before the calls, and no marker reaches a content delta. The calls and
// their results go back through the template in the same form.
func TestChatToolCallsXML(t *testing.T) {
	f := newFixtureDir(t, qwen35Model(t), Options{}, runner.SchedOptions{})
	if st := f.srv.state.Load(); st.tools != (oai.ToolSyntax{Open: "<tool_call>", Close: "</tool_call>", Format: oai.ToolXML}) {
		t.Fatalf("the Qwen3.5 template: tool syntax %+v", st.tools)
	}
	f.srv.script = xmlToolScript
	c := f.client()
	params := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
		Tools: []openai.ChatCompletionToolUnionParam{xmlWeatherTool}, MaxTokens: openai.Int(8), Temperature: openai.Float(0)}
	whole, err := c.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	wantArgs := []string{`{"city":"Paris","days":3,"metric":true}`, `{"city":"Oslo"}`}
	check := func(how string, m openai.ChatCompletionMessage, reason string) {
		t.Helper()
		if m.Content != "Let me check." || reason != "tool_calls" || len(m.ToolCalls) != 2 {
			t.Fatalf("%s: content %q finish %q, %d tool calls %+v", how, m.Content, reason, len(m.ToolCalls), m.ToolCalls)
		}
		for i, want := range wantArgs {
			tc := m.ToolCalls[i]
			if tc.Function.Arguments != want || tc.Function.Name != "get_weather" || tc.Type != "function" || !strings.HasPrefix(tc.ID, "call_") {
				t.Errorf("%s: call %d %+v, want get_weather %s", how, i, tc, want)
			}
		}
	}
	check("whole", whole.Choices[0].Message, whole.Choices[0].FinishReason)

	// tool_choice "none": the blocks stay text.
	none := params
	none.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
	if got, err := c.Chat.Completions.New(context.Background(), none); err != nil || got.Choices[0].Message.Content != strings.Join(xmlToolScript, "") ||
		len(got.Choices[0].Message.ToolCalls) != 0 || got.Choices[0].FinishReason == "tool_calls" {
		t.Errorf(`tool_choice "none": %+v %v`, got, err)
	}

	st := c.Chat.Completions.NewStreaming(context.Background(), params)
	acc := openai.ChatCompletionAccumulator{}
	var deltas int
	var before strings.Builder // content sent before the first call
	for st.Next() {
		ch := st.Current()
		acc.AddChunk(ch)
		for _, cc := range ch.Choices {
			for _, marker := range []string{"<", ">", "function", "parameter", "get_weather", "Paris", "Oslo"} {
				if strings.Contains(cc.Delta.Content, marker) {
					t.Errorf("a content delta with the call's text %q: %q", marker, cc.Delta.Content)
				}
			}
			if deltas == 0 {
				// A chunk's content comes before its calls: under load the
				// stream may send " check." and the first call in one chunk.
				before.WriteString(cc.Delta.Content)
			}
			for _, d := range cc.Delta.ToolCalls {
				if int(d.Index) != deltas || d.ID == "" || d.Function.Name != "get_weather" || d.Function.Arguments != wantArgs[min(deltas, 1)] {
					t.Errorf("tool call delta %d: %+v", deltas, d)
				}
				deltas++
			}
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas != 2 || before.String() != "Let me check." {
		t.Errorf("%d tool call deltas after the content %q, want 2 after %q", deltas, before.String(), "Let me check.")
	}
	check("streamed", acc.Choices[0].Message, acc.Choices[0].FinishReason)

	// A block that is not closed stays text, whole and streamed.
	f.srv.script = xmlToolScript[:4]
	unclosed := strings.Join(xmlToolScript[:4], "")
	got, err := c.Chat.Completions.New(context.Background(), params)
	if err != nil || got.Choices[0].Message.Content != unclosed || len(got.Choices[0].Message.ToolCalls) != 0 || got.Choices[0].FinishReason == "tool_calls" {
		t.Errorf("an unclosed block: %+v %v", got, err)
	}
	acc = openai.ChatCompletionAccumulator{}
	for st = c.Chat.Completions.NewStreaming(context.Background(), params); st.Next(); {
		acc.AddChunk(st.Current())
	}
	if st.Err() != nil || acc.Choices[0].Message.Content != unclosed || len(acc.Choices[0].Message.ToolCalls) != 0 {
		t.Errorf("an unclosed block, streamed: %+v %v", acc.Choices[0].Message, st.Err())
	}
	f.srv.script = xmlToolScript

	// The calls and their results go back to the model through the
	// template, in its form.
	history := params
	history.Messages = append(history.Messages, whole.Choices[0].Message.ToParam(),
		openai.ToolMessage(`{"sky": "clear"}`, whole.Choices[0].Message.ToolCalls[0].ID), openai.ToolMessage("rain", whole.Choices[0].Message.ToolCalls[1].ID))
	next, ids, text, err := sendHistory(t, c, f, history)
	want := "<|im_start|>assistant\n<think>\n\n</think>\n\nLet me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n" +
		"<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n</function>\n</tool_call>\n" +
		"<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\n{\"sky\": \"clear\"}\n</tool_response>\n<tool_response>\nrain\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"
	if err != nil || int64(len(ids)) != next.Usage.PromptTokens || !strings.HasSuffix(text, want) {
		t.Errorf("history rendered (%d tokens, the server's prompt %d, %v):\n%s\nwant it to end in\n%s", len(ids), next.Usage.PromptTokens, err, text, want)
	}
}

// sendHistory sends a conversation to the server and renders the same
// conversation through the model's template as the server parses it: the
// response, and the prompt's ids and text to compare with it.
func sendHistory(t *testing.T, c openai.Client, f *fixture, history openai.ChatCompletionNewParams) (*openai.ChatCompletion, []int, string, error) {
	t.Helper()
	next, err := c.Chat.Completions.New(context.Background(), history)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(history)
	if err != nil {
		t.Fatal(err)
	}
	p, e := oai.ParseChat(body)
	if e != nil {
		t.Fatal(e)
	}
	ids, text, err := f.r.EncodeChatTools(p.Messages, p.Tools)
	return next, ids, text, err
}
