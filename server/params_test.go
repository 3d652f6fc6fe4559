package server

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/verify"
)

// report fetches and verifies the signed report of response id.
func (f *fixture) report(t *testing.T, id string) *attest.RunPredicate {
	t.Helper()
	resp, err := http.Get(f.hs.URL + "/v1/attestations/" + id)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/attestations/%s: %d %s", id, resp.StatusCode, b)
	}
	env, err := attest.ParseEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	man, _, err := verify.LoadManifest(testModel(t))
	if err != nil {
		t.Fatal(err)
	}
	res, err := attest.VerifyRun(env, []ed25519.PublicKey{f.pub}, man)
	if err != nil {
		t.Fatal(err)
	}
	return &res.Predicate
}

// TestTopK: top_k over HTTP samples as the engine does with the same
// settings (bit for bit: tokens and logits chain), differently from the
// same request without it; the signed report records it, so that its
// replay is exact.
func TestTopK(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	ids := f.chatIDs(t, "Pick a word")
	g := engine.GenOptions{MaxTokens: 12, Temperature: 2, Seed: 11, Stop: f.r.DefaultStops()}
	plain := f.solo(t, ids, g, 0)
	g.TopK = 2
	want := f.solo(t, ids, g, 0)
	if slices.Equal(plain.tokens, want.tokens) {
		t.Fatalf("top_k 2 samples %v, as without it: the test cannot tell whether top_k is used", want.tokens)
	}
	resp, b := f.post(t, "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"Pick a word"}],"max_tokens":12,"temperature":2,"seed":11,"top_k":2}`)
	var c struct {
		Choices []struct{ Message struct{ Content string } }
		Usage   Usage
	}
	if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if c.Choices[0].Message.Content != want.text || c.Usage.CompletionTokens != len(want.tokens) || resp.Header.Get(HeaderLogitsChain) != want.chain {
		t.Errorf("top_k 2: %q (%d tokens, chain %s), the engine with TopK 2: %q (%d, chain %s)", c.Choices[0].Message.Content, c.Usage.CompletionTokens,
			resp.Header.Get(HeaderLogitsChain), want.text, len(want.tokens), want.chain)
	}
	id := resp.Header.Get(HeaderAttestation)
	p := f.report(t, id)
	pr := p.Prompts[0]
	if pr.Source != id || pr.Sampling.TopK != 2 || pr.Sampling.Seed != 11 || pr.Sampling.Temperature != 2 || !slices.Equal(pr.Generated, want.tokens) {
		t.Errorf("report prompt: source %q sampling %+v generated %v; want source %s, top_k 2, %v", pr.Source, pr.Sampling, pr.Generated, id, want.tokens)
	}
	rep, err := f.r.ReplayRun(context.Background(), p, runner.ReplayOptions{})
	if err != nil || len(rep.Prompts) != 1 || !rep.Exact() {
		t.Errorf("replay of the top_k report: %+v %v", rep, err)
	}
	// Greedy: top_k changes nothing (as top_p).
	resp, b = f.post(t, "/v1/completions", `{"model":"tarfa-test","prompt":"Go","max_tokens":4,"temperature":0,"top_k":1}`)
	if resp.StatusCode != 200 {
		t.Errorf("greedy with top_k: %d %s", resp.StatusCode, b)
	}
}

// TestNoopParams: the defaults frameworks send (openai-go's
// response_format text, store false, metadata, service_tier auto) are
// accepted and change nothing; values that would change the response are
// refused naming the parameter.
func TestNoopParams(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	c := f.client()
	base := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hi")},
		MaxTokens: openai.Int(5), Temperature: openai.Float(0)}
	plain, err := c.Chat.Completions.New(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	with := base
	with.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfText: &shared.ResponseFormatTextParam{}}
	with.Store = openai.Bool(false)
	with.Metadata = shared.Metadata{"job": "nightly"}
	with.ServiceTier = openai.ChatCompletionNewParamsServiceTierAuto
	with.ReasoningEffort = shared.ReasoningEffortMedium
	got, err := c.Chat.Completions.New(context.Background(), with)
	if err != nil {
		t.Fatalf("openai-go's neutral values: %v", err)
	}
	if got.Choices[0].Message.Content != plain.Choices[0].Message.Content {
		t.Errorf("with the neutral values %q, without %q", got.Choices[0].Message.Content, plain.Choices[0].Message.Content)
	}
	for _, extra := range []struct{ member, param string }{
		{`"response_format":{"type":"json_object"}`, "response_format"},
		{`"store":true`, "store"},
		{`"service_tier":"flex"`, "service_tier"},
		{`"reasoning_effort":"high"`, "reasoning_effort"},
		{`"top_k":-5`, "top_k"},
	} {
		resp, b := f.post(t, "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"Hi"}],`+extra.member+`}`)
		if resp.StatusCode != 400 || !strings.Contains(string(b), `"param":"`+extra.param+`"`) {
			t.Errorf("%s: %d %s, want a 400 naming %s", extra.member, resp.StatusCode, b, extra.param)
		}
	}
}

// TestWrongMethod: a known path with another method is 405 with Allow
// (an OpenAI error); an unknown path stays 404.
func TestWrongMethod(t *testing.T) {
	f := newFixture(t, Options{APIKey: "k"}, runner.SchedOptions{})
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"GET", "/v1/chat/completions", 405, "POST"},
		{"PUT", "/v1/completions", 405, "POST"},
		{"POST", "/v1/models", 405, "GET, HEAD"},
		{"DELETE", "/v1/models/tarfa-test", 405, "GET, HEAD"},
		{"POST", "/health", 405, "GET, HEAD"},
		{"POST", "/v1/attestations/x", 405, "GET, HEAD"},
		{"GET", "/v1/embeddings", 404, ""},
		{"POST", "/v1/chat/completion", 404, ""},
	} {
		req, _ := http.NewRequest(c.method, f.hs.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct{ Message, Code string }
		}
		json.Unmarshal(b, &e)
		if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow || e.Error.Message == "" {
			t.Errorf("%s %s: %d Allow %q %s, want %d Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), b, c.status, c.allow)
		}
	}
}

// TestAttestationTrim: the server keeps the last MaxAttestations signed
// reports: the oldest is dropped, the later ones stay.
func TestAttestationTrim(t *testing.T) {
	f := newFixture(t, Options{MaxAttestations: 2}, runner.SchedOptions{})
	var ids []string
	for i := range 3 {
		resp, b := f.post(t, "/v1/completions", fmt.Sprintf(`{"model":"tarfa-test","prompt":"n %d","max_tokens":2}`, i))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		ids = append(ids, resp.Header.Get(HeaderAttestation))
	}
	for i, id := range ids {
		resp, err := http.Get(f.hs.URL + "/v1/attestations/" + id)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := 200
		if i == 0 {
			want = 404
		}
		if resp.StatusCode != want || (want == 404 && !strings.Contains(string(b), "keeps the last 2")) {
			t.Errorf("report %d of 3 with a limit of 2: %d %s, want %d", i, resp.StatusCode, b, want)
		}
	}
	if n := len(f.srv.att); n != 2 || len(f.srv.attList) != 2 {
		t.Errorf("%d reports kept (%d listed), want 2", n, len(f.srv.attList))
	}
}

// TestExpertsVerifiedDistinct: X-Tarfa-Experts-Verified and the tarfa
// member count the distinct routed experts of the response (as its own
// ledger and signed report list them), not its routing entries.
func TestExpertsVerifiedDistinct(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	ids := f.chatIDs(t, "Count the experts")
	sess, l := f.r.NewSession()
	if _, err := engine.Generate(context.Background(), sess, ids, engine.GenOptions{MaxTokens: 8, Stop: f.r.DefaultStops()}, nil); err != nil {
		t.Fatal(err)
	}
	s := l.Summary()
	sess.Close()
	distinct := map[[2]int]bool{}
	for _, e := range s.Experts {
		distinct[[2]int{e.Layer, e.Expert}] = true
	}
	if int64(len(distinct)) == s.RoutingEntries || len(distinct) == 0 {
		t.Fatalf("%d distinct experts, %d routing entries: the test cannot tell them apart", len(distinct), s.RoutingEntries)
	}
	resp, b := f.post(t, "/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"Count the experts"}],"max_tokens":8,"temperature":0}`)
	var c struct{ Tarfa Tarfa }
	if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	h, _ := strconv.Atoi(resp.Header.Get(HeaderExpertsVerified))
	p := f.report(t, resp.Header.Get(HeaderAttestation))
	if h != len(distinct) || c.Tarfa.ExpertsVerified != len(distinct) || p.Prompts[0].ExpertsUsed != len(distinct) || c.Tarfa.RoutingEntries != s.RoutingEntries {
		t.Errorf("experts verified: header %d, member %d, report %d; want the %d distinct experts (of %d routing entries, member %d)",
			h, c.Tarfa.ExpertsVerified, p.Prompts[0].ExpertsUsed, len(distinct), s.RoutingEntries, c.Tarfa.RoutingEntries)
	}
}

// TestBytesHashed: the tarfa member's bytes_hashed (streamed and not) is
// what the response's own signed report says was hashed for it while it
// ran; bytes_verified, its old name, says the same.
func TestBytesHashed(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	for i := range 3 {
		body := `{"model":"tarfa-test","prompt":"bytes","max_tokens":3,"temperature":0}`
		var raw string
		if i == 1 {
			evs := f.events(t, "/v1/completions", strings.TrimSuffix(body, "}")+`,"stream":true}`)
			raw = evs[len(evs)-1]
		} else {
			resp, b := f.post(t, "/v1/completions", body)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			raw = string(b)
		}
		var c struct {
			Tarfa map[string]any
		}
		if err := json.Unmarshal([]byte(raw), &c); err != nil {
			t.Fatal(err)
		}
		hashed, ok := c.Tarfa["bytes_hashed"].(float64)
		if !ok || c.Tarfa["bytes_verified"] != hashed {
			t.Fatalf("response %d: tarfa member %v, want bytes_hashed (and bytes_verified equal to it)", i, c.Tarfa)
		}
		p := f.report(t, c.Tarfa["attestation"].(string))
		if want := p.Prompts[0].Hashed["blake3"]; int64(hashed) != want {
			t.Errorf("response %d: bytes_hashed %v, its report %d", i, hashed, want)
		}
	}
}
