package openai

import (
	"net/http"
	"testing"
)

// FuzzParseRequest: request bodies are untrusted. Parsing never panics,
// and every body is either parameters that satisfy the limits or a 400
// naming what is wrong.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0.7,"seed":1,"stop":["a"],"logprobs":true,"top_logprobs":2}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto"}`,
		`{"model":"m","prompt":"hello","logprobs":3,"echo":true}`,
		`{"model":"m","prompt":[1,2,3]}`,
		`{"model":"m","prompt":[[1,2]]}`,
		`{"model":"m","prompt":["a","b"]}`,
		`{"model":"m","stop":"x","n":1,"max_completion_tokens":3,"messages":[{"role":"developer","content":null}]}`,
		`{"model": `, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, parse := range []func([]byte) (*Params, *Error){ParseChat, ParseCompletion} {
			p, e := parse(body)
			if (p == nil) == (e == nil) {
				t.Fatalf("params %v and error %v", p, e)
			}
			if e != nil {
				if e.Status != http.StatusBadRequest || e.Message == "" {
					t.Fatalf("error %+v", e)
				}
				continue
			}
			if p.Model == "" || p.MaxTokens < 0 || len(p.Stop) > MaxStop || p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs ||
				!(p.Temperature >= 0 && p.Temperature <= 2) || !(p.TopP > 0 && p.TopP <= 1) {
				t.Fatalf("params out of range: %+v", p)
			}
			if p.Messages == nil && p.Prompt == nil && p.PromptTokens == nil {
				t.Fatalf("no prompt: %+v", p)
			}
			for _, s := range p.Stop {
				if s == "" || len(s) > MaxStopLen {
					t.Fatalf("stop %q", s)
				}
			}
		}
	})
}
