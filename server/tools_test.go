package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tarfa-ai/tarfa/engine/runner"
	oai "github.com/tarfa-ai/tarfa/openai"
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
	if err != nil || int64(len(ids)) != next.Usage.PromptTokens ||
		!strings.Contains(text, "<|im_start|>assistant\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>") ||
		!strings.Contains(text, "<|im_start|>user\n<tool_response>\n{\"sky\": \"clear\"}\n</tool_response><|im_end|>\n<|im_start|>assistant\n") {
		t.Errorf("history rendered (%d tokens, the server's prompt %d, %v):\n%s", len(ids), next.Usage.PromptTokens, err, text)
	}
}
