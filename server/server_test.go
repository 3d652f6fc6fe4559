package server

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/validation/synth"
	"github.com/tarfa-ai/tarfa/verify"
)

const model = "tarfa-test"

var (
	modelOnce sync.Once
	modelDir  string
	modelErr  error
	modelTmp  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if modelTmp != "" {
		os.RemoveAll(modelTmp)
	}
	os.Exit(code)
}

// testModel is the embedded default model, built once for the package.
func testModel(t *testing.T) string {
	t.Helper()
	modelOnce.Do(func() {
		if modelTmp, modelErr = os.MkdirTemp("", "tarfa-server-test-"); modelErr != nil {
			return
		}
		modelDir, _, modelErr = synth.EnsureDefault(context.Background(), modelTmp)
	})
	if modelErr != nil {
		t.Fatal(modelErr)
	}
	return modelDir
}

// fixture is a running server on loopback with its runner and scheduler.
type fixture struct {
	r     *runner.Runner
	sched *runner.Scheduler
	srv   *Server
	hs    *httptest.Server
	pub   ed25519.PublicKey
}

func newFixture(t *testing.T, opt Options, sopt runner.SchedOptions) *fixture {
	t.Helper()
	return newFixtureDir(t, testModel(t), opt, sopt)
}

// newFixtureDir is newFixture serving the model in dir.
func newFixtureDir(t *testing.T, dir string, opt Options, sopt runner.SchedOptions) *fixture {
	t.Helper()
	r, err := runner.Open(context.Background(), dir, runner.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := runner.NewScheduler(r, sopt)
	if err != nil {
		t.Fatal(err)
	}
	if opt.ModelName == "" {
		opt.ModelName = model
	}
	f := &fixture{r: r, sched: sched}
	if opt.Signer == nil {
		pub, priv, err := attest.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		opt.Signer, f.pub = priv, pub
	}
	if f.srv, err = New(opt); err != nil {
		t.Fatal(err)
	}
	f.srv.Attach(r, sched, runner.AttestOptions{Host: runner.HostFacts(), Build: attest.RunBuild{Tarfa: "test", Backend: "cpu", Threads: 2}})
	f.hs = httptest.NewServer(f.srv.Handler())
	t.Cleanup(func() {
		f.hs.Close()
		sched.Close()
		r.Close()
	})
	return f
}

func (f *fixture) client(opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(f.hs.URL + "/v1/"), option.WithAPIKey("unused"),
		option.WithMaxRetries(0)}, opts...)...)
}

func (f *fixture) post(t *testing.T, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.hs.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// solo is the reference: the same request alone, straight through the
// engine in a fresh session.
type soloRef struct {
	tokens   []int
	text     string
	logprobs []float32
	top      [][]runner.TokenLogprob
	chain    string
	routing  string
}

func (f *fixture) solo(t *testing.T, ids []int, g engine.GenOptions, top int) soloRef {
	t.Helper()
	sess, l := f.r.NewSession()
	defer sess.Close()
	var ref soloRef
	res, err := engine.Generate(context.Background(), sess, ids, g, func(tok int, logits []float32) error {
		lp, tl := runner.Logprobs(logits, tok, top)
		ref.logprobs, ref.top = append(ref.logprobs, lp), append(ref.top, tl)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s := l.Summary()
	ref.tokens, ref.chain, ref.routing = res.Tokens, s.LogitsChain, s.RoutingDigest
	ref.text, _ = f.r.Tok.DecodeSkipSpecial(res.Tokens)
	return ref
}

func (f *fixture) chatIDs(t *testing.T, user string) []int {
	t.Helper()
	msg, _ := json.Marshal(map[string]string{"role": "user", "content": user})
	ids, _, err := f.r.EncodeChatTools([]json.RawMessage{msg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func tarfaOf(t *testing.T, raw string) Tarfa {
	t.Helper()
	var tf Tarfa
	if err := json.Unmarshal([]byte(raw), &tf); err != nil || tf.Attestation == "" {
		t.Fatalf("tarfa member %q: %v", raw, err)
	}
	return tf
}

// TestChat: a non-streamed chat completion through openai-go: the text,
// usage, finish reason, logprobs and the attestation headers and member
// are those of the same request run alone.
func TestChat(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	c := f.client()
	var resp *http.Response
	got, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello there")},
		MaxTokens: openai.Int(7), Temperature: openai.Float(0.8), Seed: openai.Int(42), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(3),
	}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	want := f.solo(t, f.chatIDs(t, "Hello there"), engine.GenOptions{MaxTokens: 7, Temperature: 0.8, Seed: 42, Stop: f.r.DefaultStops()}, 3)
	ch := got.Choices[0]
	if ch.Message.Content != want.text || ch.Message.Role != "assistant" {
		t.Errorf("content %q, alone %q", ch.Message.Content, want.text)
	}
	wantReason := "length"
	if len(want.tokens) < 7 {
		wantReason = "stop"
	}
	if ch.FinishReason != wantReason || got.Usage.CompletionTokens != int64(len(want.tokens)) || got.Usage.PromptTokens != int64(len(f.chatIDs(t, "Hello there"))) ||
		got.Usage.TotalTokens != got.Usage.PromptTokens+got.Usage.CompletionTokens {
		t.Errorf("finish %q usage %+v, want %q and %d completion tokens", ch.FinishReason, got.Usage, wantReason, len(want.tokens))
	}
	if len(ch.Logprobs.Content) != len(want.tokens) {
		t.Fatalf("%d logprobs for %d tokens", len(ch.Logprobs.Content), len(want.tokens))
	}
	for i, lp := range ch.Logprobs.Content {
		if lp.Logprob != float64(want.logprobs[i]) || len(lp.TopLogprobs) != 3 {
			t.Errorf("token %d: logprob %v (%d top), alone %v", i, lp.Logprob, len(lp.TopLogprobs), want.logprobs[i])
		}
		for j, a := range lp.TopLogprobs {
			if a.Logprob != float64(want.top[i][j].Logprob) || a.Token != tokenText(f.r.Tok, want.top[i][j].ID) {
				t.Errorf("token %d top %d: %q %v, alone %+v", i, j, a.Token, a.Logprob, want.top[i][j])
			}
		}
	}
	tf := tarfaOf(t, got.JSON.ExtraFields["tarfa"].Raw())
	h := resp.Header
	if h.Get(HeaderMode) != "exact" || h.Get(HeaderManifestRoot) != f.r.Checkpoint.Root().String() || h.Get(HeaderAttestation) != got.ID ||
		h.Get(HeaderLogitsChain) != want.chain || h.Get(HeaderRouting) != want.routing || h.Get(HeaderExpertsVerified) == "" {
		t.Errorf("headers %v; want chain %s routing %s", h, want.chain, want.routing)
	}
	if tf.LogitsChain != want.chain || tf.Routing != want.routing || tf.Attestation != got.ID || !tf.Signed || tf.Seed != 42 ||
		fmt.Sprint(tf.ExpertsVerified) != h.Get(HeaderExpertsVerified) || tf.ExpertsVerified == 0 {
		t.Errorf("tarfa member %+v", tf)
	}
}

// TestChatStreamUsage: a streamed chat completion with include_usage
// accumulates to the non-streamed response; the last chunks carry the
// tarfa member and the usage chunk has no choices.
func TestChatStreamUsage(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	c := f.client()
	params := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("Tell me")},
		MaxCompletionTokens: openai.Int(9), Temperature: openai.Float(1.1), TopP: openai.Float(0.9), Seed: openai.Int(7),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	var resp *http.Response
	st := c.Chat.Completions.NewStreaming(context.Background(), params, option.WithResponseInto(&resp))
	acc := openai.ChatCompletionAccumulator{}
	var chunks []openai.ChatCompletionChunk
	for st.Next() {
		acc.AddChunk(st.Current())
		chunks = append(chunks, st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get(HeaderAttestation) == "" || resp.Header.Get(HeaderMode) != "exact" {
		t.Errorf("stream headers %v", resp.Header)
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	whole, err := c.Chat.Completions.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != whole.Choices[0].Message.Content || acc.Choices[0].FinishReason != whole.Choices[0].FinishReason {
		t.Errorf("streamed %q (%s), whole %q (%s)", acc.Choices[0].Message.Content, acc.Choices[0].FinishReason, whole.Choices[0].Message.Content, whole.Choices[0].FinishReason)
	}
	last := chunks[len(chunks)-1]
	if len(last.Choices) != 0 || last.Usage.CompletionTokens != whole.Usage.CompletionTokens || last.Usage.PromptTokens != whole.Usage.PromptTokens {
		t.Errorf("usage chunk %+v, want no choices and usage %+v", last, whole.Usage)
	}
	fin := chunks[len(chunks)-2]
	if len(fin.Choices) != 1 || fin.Choices[0].FinishReason == "" {
		t.Fatalf("finish chunk %+v", fin)
	}
	for i, ch := range chunks[:len(chunks)-2] {
		if _, ok := ch.JSON.ExtraFields["tarfa"]; ok {
			t.Errorf("chunk %d before the end has a tarfa member", i)
		}
	}
	ts, tw := tarfaOf(t, last.JSON.ExtraFields["tarfa"].Raw()), tarfaOf(t, whole.JSON.ExtraFields["tarfa"].Raw())
	if tf := tarfaOf(t, fin.JSON.ExtraFields["tarfa"].Raw()); tf != ts {
		t.Errorf("finish chunk tarfa %+v, usage chunk %+v", tf, ts)
	}
	if ts.LogitsChain != tw.LogitsChain || ts.Routing != tw.Routing || ts.Attestation != resp.Header.Get(HeaderAttestation) {
		t.Errorf("streamed tarfa %+v, whole %+v", ts, tw)
	}
}

// TestCompletions: text and token-id prompts, echo, legacy logprobs.
func TestCompletions(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	c := f.client()
	got, err := c.Completions.New(context.Background(), openai.CompletionNewParams{Model: model,
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("The expert")}, MaxTokens: openai.Int(6),
		Temperature: openai.Float(0), Logprobs: openai.Int(2), Echo: openai.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := f.r.EncodeText("The expert")
	want := f.solo(t, ids, engine.GenOptions{MaxTokens: 6, Stop: f.r.DefaultStops()}, 2)
	ch := got.Choices[0]
	if ch.Text != "The expert"+want.text || got.Object != "text_completion" {
		t.Errorf("text %q, want %q", ch.Text, "The expert"+want.text)
	}
	if len(ch.Logprobs.Tokens) != len(want.tokens) || ch.Logprobs.TextOffset[0] != int64(len("The expert")) {
		t.Fatalf("logprobs %+v", ch.Logprobs)
	}
	for i := range want.tokens {
		if ch.Logprobs.TokenLogprobs[i] != float64(want.logprobs[i]) || len(ch.Logprobs.TopLogprobs[i]) == 0 {
			t.Errorf("token %d: %v, alone %v", i, ch.Logprobs.TokenLogprobs[i], want.logprobs[i])
		}
	}
	// Token ids as the prompt, streamed.
	tok := []int64{}
	for _, id := range ids {
		tok = append(tok, int64(id))
	}
	st := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{Model: model,
		Prompt: openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: tok}, MaxTokens: openai.Int(6), Temperature: openai.Float(0),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	var text string
	var usage openai.CompletionUsage
	for st.Next() {
		ch := st.Current()
		for _, c := range ch.Choices {
			text += c.Text
		}
		if ch.Usage.TotalTokens > 0 {
			usage = ch.Usage
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if text != want.text || usage.CompletionTokens != int64(len(want.tokens)) || usage.PromptTokens != int64(len(ids)) {
		t.Errorf("streamed %q usage %+v, want %q", text, usage, want.text)
	}
}

// TestModels lists the model and looks it up.
func TestModels(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	c := f.client()
	page, err := c.Models.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Data) != 1 || page.Data[0].ID != model || page.Data[0].OwnedBy != "tarfa" {
		t.Errorf("models %+v", page.Data)
	}
	if m, err := c.Models.Get(context.Background(), model); err != nil || m.ID != model {
		t.Errorf("get %v %v", m, err)
	}
	var ae *openai.Error
	if _, err := c.Models.Get(context.Background(), "gpt-4"); !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Code != "model_not_found" {
		t.Errorf("unknown model: %v", err)
	}
}

// TestStop: a stop string cuts the text before it and ends generation
// there (finish_reason stop), streamed and not.
func TestStop(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	ids, _ := f.r.EncodeText("Once upon")
	want := f.solo(t, ids, engine.GenOptions{MaxTokens: 24, Stop: f.r.DefaultStops()}, 0)
	// A stop string taken from the middle of the greedy text.
	var stop string
	for _, w := range strings.Fields(want.text)[2:] {
		if len(w) >= 2 && strings.Index(want.text, w) > 0 {
			stop = w
			break
		}
	}
	if stop == "" {
		t.Fatalf("no stop word in %q", want.text)
	}
	cut := want.text[:strings.Index(want.text, stop)]
	body := fmt.Sprintf(`{"model": %q, "prompt": "Once upon", "max_tokens": 24, "temperature": 0, "stop": [%q, "never-there"]}`, model, stop)
	resp, b := f.post(t, "/v1/completions", body)
	var got struct {
		Choices []struct {
			Text   string `json:"text"`
			Finish string `json:"finish_reason"`
		}
		Usage Usage
	}
	if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if got.Choices[0].Text != cut || got.Choices[0].Finish != "stop" || got.Usage.CompletionTokens >= len(want.tokens) {
		t.Errorf("with stop %q: %q (%s, %d tokens), want %q before %d tokens", stop, got.Choices[0].Text, got.Choices[0].Finish, got.Usage.CompletionTokens, cut, len(want.tokens))
	}
	cl := f.client()
	st := cl.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{Model: model,
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon")}, MaxTokens: openai.Int(24), Temperature: openai.Float(0),
		Stop: openai.CompletionNewParamsStopUnion{OfString: openai.String(stop)}})
	var text, finish string
	for st.Next() {
		for _, c := range st.Current().Choices {
			text += c.Text
			if c.FinishReason != "" {
				finish = string(c.FinishReason)
			}
		}
	}
	if st.Err() != nil || text != cut || finish != "stop" {
		t.Errorf("streamed with stop %q: %q (%s) %v, want %q", stop, text, finish, st.Err(), cut)
	}
}

// Usage mirrors openai.Usage for raw decoding.
type Usage = struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// TestErrors: the OpenAI error shape and status codes, through openai-go
// and raw HTTP.
func TestErrors(t *testing.T) {
	f := newFixture(t, Options{MaxBody: 4096, APIKey: "sekrit"}, runner.SchedOptions{})
	auth := []string{"Authorization", "Bearer sekrit"}
	cases := []struct {
		name, path, body string
		hdr              []string
		status           int
		code, param      string
	}{
		{"no key", "/v1/chat/completions", `{}`, nil, 401, "invalid_api_key", ""},
		{"wrong key", "/v1/chat/completions", `{}`, []string{"Authorization", "Bearer nope"}, 401, "invalid_api_key", ""},
		{"bad JSON", "/v1/chat/completions", `{"model": `, auth, 400, "invalid_json", ""},
		{"empty body", "/v1/completions", ``, auth, 400, "invalid_json", ""},
		{"trailing data", "/v1/completions", `{"model":"tarfa-test","prompt":"a"} {}`, auth, 400, "invalid_json", ""},
		{"unknown member", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"frobnicate":1}`, auth, 400, "unknown_parameter", "frobnicate"},
		{"wrong type", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"max_tokens":"ten"}`, auth, 400, "invalid_type", "max_tokens"},
		{"temperature", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"temperature":3}`, auth, 400, "invalid_value", "temperature"},
		{"top_p", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"top_p":0}`, auth, 400, "invalid_value", "top_p"},
		{"n", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"n":2}`, auth, 400, "invalid_value", "n"},
		{"top_logprobs", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":21}`, auth, 400, "invalid_value", "top_logprobs"},
		{"penalty", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"presence_penalty":0.5}`, auth, 400, "invalid_value", "presence_penalty"},
		{"role", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"wizard","content":"hi"}]}`, auth, 400, "invalid_value", "messages[0]"},
		{"image", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, auth, 400, "invalid_value", "messages[0]"},
		{"no messages", "/v1/chat/completions", `{"model":"tarfa-test","messages":[]}`, auth, 400, "invalid_value", "messages"},
		{"no model", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, auth, 400, "missing_required_parameter", "model"},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`, auth, 404, "model_not_found", "model"},
		{"max_tokens 0", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, auth, 400, "invalid_value", "max_tokens"},
		{"max_tokens 0 completions", "/v1/completions", `{"model":"tarfa-test","prompt":"hi","max_tokens":0}`, auth, 400, "invalid_value", "max_tokens"},
		{"max_completion_tokens 0", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0}`, auth, 400, "invalid_value", "max_completion_tokens"},
		{"response_format json", "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}}`, auth, 400, "invalid_value", "response_format"},
		{"wrong method", "/v1/models", `{}`, auth, 405, "method_not_allowed", ""},
		{"too long", "/v1/completions", `{"model":"tarfa-test","prompt":"hi","max_tokens":100000000}`, auth, 400, "context_length_exceeded", "max_tokens"},
		{"bad token id", "/v1/completions", `{"model":"tarfa-test","prompt":[1, 99999999]}`, auth, 400, "invalid_value", ""},
		{"prompt batch", "/v1/completions", `{"model":"tarfa-test","prompt":["a","b"]}`, auth, 400, "invalid_value", "prompt"},
		{"body too large", "/v1/completions", `{"model":"tarfa-test","prompt":"` + strings.Repeat("x", 5000) + `"}`, auth, 413, "request_too_large", ""},
		{"no endpoint", "/v1/embeddings", `{}`, auth, 404, "unknown_url", ""},
	}
	for _, c := range cases {
		resp, b := f.post(t, c.path, c.body, c.hdr...)
		var e struct {
			Error struct {
				Message, Type string
				Param, Code   *string
			}
		}
		if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != c.status || e.Error.Message == "" || e.Error.Type == "" {
			t.Errorf("%s: %d %s, want %d", c.name, resp.StatusCode, b, c.status)
			continue
		}
		if e.Error.Code == nil || *e.Error.Code != c.code || (c.param != "") != (e.Error.Param != nil) || (e.Error.Param != nil && *e.Error.Param != c.param) {
			t.Errorf("%s: code %v param %v (%s), want %q %q", c.name, e.Error.Code, e.Error.Param, e.Error.Message, c.code, c.param)
		}
	}
	// Through openai-go: a typed error with the status and parameter.
	cl := f.client(option.WithAPIKey("sekrit"))
	_, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}, Temperature: openai.Float(2.5)})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Param != "temperature" || !strings.Contains(ae.Message, "temperature") {
		t.Errorf("openai-go error %v", err)
	}
	// /health needs no key; /metrics does.
	if resp, err := http.Get(f.hs.URL + "/health"); err != nil || resp.StatusCode != 200 {
		t.Errorf("health: %v %v", resp, err)
	}
	if resp, err := http.Get(f.hs.URL + "/metrics"); err != nil || resp.StatusCode != 401 {
		t.Errorf("metrics without a key: %v %v", resp, err)
	}
}

// TestNotReadyAndShutdown: 503 before Attach and after Shutdown.
func TestNotReadyAndShutdown(t *testing.T) {
	s, err := New(Options{ModelName: model})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	for _, p := range []string{"/health", "/v1/models"} {
		if resp, err := http.Get(hs.URL + p); err != nil || resp.StatusCode != 503 {
			t.Errorf("%s before Attach: %v %v", p, resp, err)
		}
	}
	f := newFixture(t, Options{}, runner.SchedOptions{})
	if err := f.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, b := f.post(t, "/v1/completions", `{"model":"tarfa-test","prompt":"a"}`)
	if resp.StatusCode != 503 || !strings.Contains(string(b), "shutting_down") {
		t.Errorf("after Shutdown: %d %s", resp.StatusCode, b)
	}
	if resp, err := http.Get(f.hs.URL + "/health"); err != nil || resp.StatusCode != 503 {
		t.Errorf("health after Shutdown: %v %v", resp, err)
	}
}

// TestQueueFull: with the one place in the batch taken and the one place
// in the queue too, a request gets 429.
func TestQueueFull(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{MaxBatch: 1, MaxQueue: 1})
	// The first request holds the scheduler at its first token (StopAfter
	// runs on the scheduler's goroutine) until block is closed.
	block := make(chan struct{})
	first, err := f.sched.Submit(context.Background(), runner.Request{Prompt: []int{1, 2}, Gen: engine.GenOptions{MaxTokens: 2},
		StopAfter: func([]int) bool { <-block; return false }})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); f.sched.Stats().Active == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never admitted")
		}
	}
	second, err := f.sched.Submit(context.Background(), runner.Request{Prompt: []int{3}, Gen: engine.GenOptions{MaxTokens: 2}})
	if err != nil {
		t.Fatal(err)
	}
	c := f.client()
	_, err = c.Completions.New(context.Background(), openai.CompletionNewParams{Model: model, Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("b")}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 429 || ae.Code != "queue_full" || ae.Response.Header.Get("Retry-After") == "" {
		t.Errorf("request with the queue full: %v, want 429 queue_full", err)
	}
	close(block)
	for _, st := range []*runner.Stream{first, second} {
		if _, err := st.Result(context.Background()); err != nil {
			t.Error(err)
		}
	}
	waitIdle(t, f.sched)
}

func waitIdle(t *testing.T, s *runner.Scheduler) runner.SchedStats {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st := s.Stats()
		if st.Active == 0 && st.Queued == 0 && st.StateReserved == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler did not become idle: %+v", st)
		}
	}
}

// TestCancelStream: a client that goes away mid-stream ends its
// generation: the scheduler drops it (counted as cancelled), far before
// max_tokens, and its reservation is released.
func TestCancelStream(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{StateBudget: 1 << 30})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ids, _ := f.r.EncodeText("Go on")
	n := f.r.MaxNewTokens(len(ids))
	cl := f.client()
	st := cl.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: model,
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Go on")}, MaxTokens: openai.Int(int64(n))})
	got := 0
	for st.Next() {
		if got++; got == 3 {
			cancel()
		}
	}
	s := waitIdle(t, f.sched)
	if s.Cancelled != 1 || s.Generated >= int64(n) {
		t.Errorf("after the client left: %+v (max_tokens %d)", s, n)
	}
}

// TestAttestation: with a key, GET /v1/attestations/{id} returns a DSSE
// report of that response that verifies offline against the manifest and
// replays bit for bit; concurrent responses each get their own.
func TestAttestation(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	man, _, err := verify.LoadManifest(testModel(t))
	if err != nil {
		t.Fatal(err)
	}
	type out struct {
		id, chain string
		gen       int
	}
	outs := make([]out, 4)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":"tarfa-test","messages":[{"role":"user","content":"question %d"}],"max_tokens":%d,"temperature":0.7,"seed":%d,"stop":["zz"]}`, i, 5+i, i)
			resp, b := f.post(t, "/v1/chat/completions", body)
			var c struct {
				Usage Usage
			}
			json.Unmarshal(b, &c)
			outs[i] = out{resp.Header.Get(HeaderAttestation), resp.Header.Get(HeaderLogitsChain), c.Usage.CompletionTokens}
		})
	}
	wg.Wait()
	for i, o := range outs {
		resp, err := http.Get(f.hs.URL + "/v1/attestations/" + o.id)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET attestation %s: %v %v", o.id, resp, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		env, err := attest.ParseEnvelope(b)
		if err != nil {
			t.Fatal(err)
		}
		res, err := attest.VerifyRun(env, []ed25519.PublicKey{f.pub}, man)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		p := res.Predicate
		if len(p.Prompts) != 1 || p.Prompts[0].LogitsChain != o.chain || p.Prompts[0].Source != o.id || len(p.Prompts[0].Generated) != o.gen {
			t.Errorf("response %d: report prompts %+v, header chain %s", i, p.Prompts, o.chain)
		}
		rep, err := f.r.ReplayRun(context.Background(), &p, runner.ReplayOptions{})
		if err != nil || len(rep.Prompts) != 1 || !rep.Exact() {
			t.Errorf("response %d replay: %+v %v", i, rep, err)
		}
		// Another key does not verify it.
		other, _, _ := attest.GenerateKey()
		if _, err := attest.VerifyRun(env, []ed25519.PublicKey{other}, man); err == nil {
			t.Errorf("response %d verifies with another key", i)
		}
	}
	if resp, err := http.Get(f.hs.URL + "/v1/attestations/chatcmpl-nope"); err != nil || resp.StatusCode != 404 {
		t.Errorf("unknown attestation: %v %v", resp, err)
	}
}

// TestConcurrentMatchesSolo: N concurrent requests (N = 2, 4, 8; greedy
// and sampled, streamed and not) get the tokens, logprobs and logits chain
// of the same requests sent one at a time.
func TestConcurrentMatchesSolo(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{MaxBatch: 8, PrefillChunk: 8})
	type answer struct {
		text, chain string
		lps         []float64
	}
	ask := func(i int) answer {
		params := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("word ", i+1) + fmt.Sprint(i))},
			MaxTokens: openai.Int(int64(6 + i%3)), Logprobs: openai.Bool(true), TopLogprobs: openai.Int(2), Seed: openai.Int(int64(i))}
		if i%2 == 0 {
			params.Temperature = openai.Float(0)
		}
		var a answer
		if i%3 == 0 {
			cl := f.client()
			st := cl.Chat.Completions.NewStreaming(context.Background(), params)
			for st.Next() {
				ch := st.Current()
				for _, c := range ch.Choices {
					a.text += c.Delta.Content
					for _, lp := range c.Logprobs.Content {
						a.lps = append(a.lps, lp.Logprob)
					}
				}
				if raw, ok := ch.JSON.ExtraFields["tarfa"]; ok {
					a.chain = tarfaOf(t, raw.Raw()).LogitsChain
				}
			}
			if err := st.Err(); err != nil {
				t.Error(err)
			}
			return a
		}
		cl := f.client()
		got, err := cl.Chat.Completions.New(context.Background(), params)
		if err != nil {
			t.Error(err)
			return a
		}
		a.text, a.chain = got.Choices[0].Message.Content, tarfaOf(t, got.JSON.ExtraFields["tarfa"].Raw()).LogitsChain
		for _, lp := range got.Choices[0].Logprobs.Content {
			a.lps = append(a.lps, lp.Logprob)
		}
		return a
	}
	solo := make([]answer, 8)
	for i := range solo {
		solo[i] = ask(i)
	}
	for _, n := range []int{2, 4, 8} {
		before := f.sched.Stats()
		got := make([]answer, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { got[i] = ask(i) })
		}
		wg.Wait()
		after := f.sched.Stats()
		if after.Rows-before.Rows <= after.Steps-before.Steps {
			t.Errorf("N=%d: %d rows in %d steps: never batched", n, after.Rows-before.Rows, after.Steps-before.Steps)
		}
		for i := range n {
			if got[i].text != solo[i].text || got[i].chain != solo[i].chain || !slices.Equal(got[i].lps, solo[i].lps) || got[i].chain == "" {
				t.Errorf("N=%d request %d: %q chain %s, alone %q chain %s", n, i, got[i].text, got[i].chain, solo[i].text, solo[i].chain)
			}
		}
	}
}

// TestLoad: 64 concurrent streaming clients on loopback, a third of them
// disconnecting at random points; every completed stream equals its solo
// run, the scheduler ends idle with nothing reserved, and no goroutine is
// left behind.
func TestLoad(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{MaxBatch: 16, MaxQueue: 64, StateBudget: 1 << 30})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()
	const clients = 64
	body := func(i int) string {
		return fmt.Sprintf(`{"model":"tarfa-test","prompt":"client %d says","max_tokens":%d,"temperature":0.9,"seed":%d,"stream":true}`, i%8, 12+i%8, i%8)
	}
	stream := func(ctx context.Context, i, stopAfter int) (string, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", f.hs.URL+"/v1/completions", strings.NewReader(body(i)))
		resp, err := hc.Do(req)
		if err != nil {
			return "", "", err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			return "", "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		var text, chain string
		events := 0
		dec := newSSE(resp.Body)
		for {
			data, err := dec.next()
			if err != nil {
				return text, chain, err
			}
			if data == "[DONE]" {
				return text, chain, nil
			}
			var c struct {
				Choices []struct{ Text string }
				Tarfa   *Tarfa
			}
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				return text, chain, fmt.Errorf("%q: %v", data, err)
			}
			for _, ch := range c.Choices {
				text += ch.Text
			}
			if c.Tarfa != nil {
				chain = c.Tarfa.LogitsChain
			}
			if events++; events == stopAfter {
				return text, chain, errors.New("disconnected")
			}
		}
	}
	solo := map[int][2]string{}
	for i := range 8 {
		text, chain, err := stream(context.Background(), i, 0)
		if err != nil {
			t.Fatal(err)
		}
		solo[i] = [2]string{text, chain}
	}
	hc.CloseIdleConnections()
	base := runtime.NumGoroutine()
	settle := func() int {
		n := runtime.NumGoroutine()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			runtime.GC()
			if n = runtime.NumGoroutine(); n <= base {
				break
			}
		}
		return n
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	completed, cut := 0, 0
	for i := range clients {
		wg.Go(func() {
			stopAfter := 0
			if i%3 == 1 {
				stopAfter = 1 + i%5
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			text, chain, err := stream(ctx, i, stopAfter)
			mu.Lock()
			defer mu.Unlock()
			if stopAfter > 0 {
				cut++
				return
			}
			completed++
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			if w := solo[i%8]; text != w[0] || chain != w[1] {
				t.Errorf("client %d: %q chain %s, alone %q chain %s", i, text, chain, w[0], w[1])
			}
		})
	}
	wg.Wait()
	hc.CloseIdleConnections()
	st := waitIdle(t, f.sched)
	if completed+cut != clients || st.Cancelled == 0 {
		t.Errorf("%d completed, %d cut, scheduler %+v", completed, cut, st)
	}
	if n := settle(); n > base {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after the load, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

// sse reads server-sent events' data lines.
type sse struct {
	r   io.Reader
	buf bytes.Buffer
	tmp []byte
}

func newSSE(r io.Reader) *sse { return &sse{r: r, tmp: make([]byte, 4096)} }

func (s *sse) next() (string, error) {
	for {
		if i := bytes.Index(s.buf.Bytes(), []byte("\n\n")); i >= 0 {
			ev := string(s.buf.Next(i + 2))
			ev = strings.TrimSpace(ev)
			if !strings.HasPrefix(ev, "data: ") {
				return "", fmt.Errorf("event %q", ev)
			}
			return strings.TrimPrefix(ev, "data: "), nil
		}
		n, err := s.r.Read(s.tmp)
		s.buf.Write(s.tmp[:n])
		if err != nil {
			if n == 0 {
				return "", err
			}
		}
	}
}

// TestToolsAndMetrics: tools go through the chat template (the prompt
// grows by their schema), and /metrics exposes the server's figures in
// the Prometheus text format.
func TestToolsAndMetrics(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	plain := `{"model":"tarfa-test","messages":[{"role":"user","content":"weather?"}],"max_tokens":2}`
	tools := `{"model":"tarfa-test","messages":[{"role":"user","content":"weather?"}],"max_tokens":2,"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`
	var usage [2]int
	for i, body := range []string{plain, tools} {
		resp, b := f.post(t, "/v1/chat/completions", body)
		var c struct{ Usage Usage }
		if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		usage[i] = c.Usage.PromptTokens
	}
	msg, _ := json.Marshal(map[string]string{"role": "user", "content": "weather?"})
	_, text, err := f.r.EncodeChatTools([]json.RawMessage{msg}, []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"get_weather","description":"Weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`)})
	if err != nil || !strings.Contains(text, "get_weather") || usage[1] <= usage[0] {
		t.Errorf("tools: prompt tokens %d with, %d without; rendered %q %v", usage[1], usage[0], text, err)
	}
	if resp, b := f.post(t, "/v1/chat/completions", strings.Replace(tools, `"type":"function"`, `"type":"retrieval"`, 1)); resp.StatusCode != 400 || !strings.Contains(string(b), "tools[0]") {
		t.Errorf("a tool of another type: %d %s", resp.StatusCode, b)
	}
	resp, err := http.Get(f.hs.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := string(b)
	for _, want := range []string{"tarfa_generated_tokens_total 4", "tarfa_queue_depth 0", "tarfa_active_sequences 0",
		`tarfa_requests_total{code="200",endpoint="/v1/chat/completions"} 2`, `tarfa_requests_total{code="400",endpoint="/v1/chat/completions"} 1`,
		"tarfa_verified_bytes_total ", "tarfa_expert_uses_total{tier=", "tarfa_time_to_first_token_seconds_count 2", "tarfa_scrub_failures_total 0",
		"tarfa_batch_steps_total "} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("/metrics Content-Type %q", resp.Header.Get("Content-Type"))
	}
}
