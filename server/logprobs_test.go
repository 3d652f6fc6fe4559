package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/openai"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/tokenizer"
)

// splitText is encoded by the Qwen3 tokenizer into tokens of which six
// are single bytes or pieces of a character (龘, 🫠 and 𝔘 are each split).
const splitText = "龘 is 🫠 and 𝔘"

func intsToBytes(t *testing.T, v []int) []byte {
	t.Helper()
	b := make([]byte, len(v))
	for i, x := range v {
		if x < 0 || x > 255 {
			t.Fatalf("bytes %v: %d is not a byte", v, x)
		}
		b[i] = byte(x)
	}
	return b
}

// TestLogprobBytesQwen3: with the real Qwen3 tokenizer, a token that is
// a piece of a character has its raw bytes as "bytes" (the text stays
// U+FFFD), so that the tokens' bytes concatenated are the tokenizer's
// decode of the whole sequence (TestTextOffsetQwen3 has their
// text_offset).
func TestLogprobBytesQwen3(t *testing.T) {
	tok, err := tokenizer.Load("../validation/testdata/qwen3-tokenizer")
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(splitText)
	whole, err := tok.Decode(ids)
	if err != nil || whole != splitText {
		t.Fatalf("decode %q %v", whole, err)
	}
	var toks []runner.Token
	split := 0
	for i, id := range ids {
		b, _ := tok.Bytes(id)
		if !utf8.Valid(b) {
			split++
		}
		toks = append(toks, runner.Token{ID: id, Logprob: -float32(i), Top: []runner.TokenLogprob{{ID: id, Logprob: -float32(i)}}})
	}
	if split < 2 {
		t.Fatalf("%q encodes to %d tokens that are pieces of a character: the test needs some", splitText, split)
	}
	var cat, catTop []byte
	for i, e := range chatLogprobs(tok, toks) {
		b, _ := tok.Bytes(ids[i])
		got := intsToBytes(t, e.Bytes)
		if !bytes.Equal(got, b) || !slices.Equal(e.TopLogprobs[0].Bytes, e.Bytes) {
			t.Errorf("token %d (%d): bytes %x (top %v), want %x", i, ids[i], got, e.TopLogprobs[0].Bytes, b)
		}
		if !utf8.Valid(b) && !strings.Contains(e.Token, "\uFFFD") {
			t.Errorf("token %d: text %q, want U+FFFD for the piece of a character", i, e.Token)
		}
		cat = append(cat, got...)
		catTop = append(catTop, intsToBytes(t, e.TopLogprobs[0].Bytes)...)
	}
	if string(cat) != whole || string(catTop) != whole {
		t.Errorf("bytes concatenated %q (top %q), decode %q", cat, catTop, whole)
	}
}

// logprobChat is the part of a chat response or chunk these tests read.
type logprobChat struct {
	Choices []struct {
		Message  struct{ Content string }
		Delta    struct{ Content string }
		Logprobs *struct {
			Content []openai.TokenLogprob
		}
	}
}

// logprobCompletion is the part of a completions response or chunk these
// tests read.
type logprobCompletion struct {
	Choices []struct {
		Text     string
		Logprobs *openai.CompletionLogprobs
	}
}

// events posts body and returns the data of a stream's events (without
// [DONE]).
func (f *fixture) events(t *testing.T, path, body string) []string {
	t.Helper()
	resp, err := http.Post(f.hs.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d", path, resp.StatusCode)
	}
	var out []string
	dec := newSSE(resp.Body)
	for range 10000 {
		data, err := dec.next()
		if err != nil {
			t.Fatalf("%s: %v after %d events", path, err, len(out))
		}
		if data == "[DONE]" {
			return out
		}
		out = append(out, data)
	}
	t.Fatalf("%s: no [DONE]", path)
	return nil
}

// TestLogprobBytesServed: the embedded model answers "Hello" greedily
// with a character split across two byte tokens (the review's 154 and
// 111, U+07B3); chat and completions, whole and streamed, give each
// token's raw bytes, whose concatenation is the tokenizer's decode of
// the generated tokens, and text_offset is the length of the text final
// before each token (wantOffsets).
func TestLogprobBytesServed(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	tok := f.r.Tok
	ids := f.chatIDs(t, "Hello")
	check := func(name string, got [][]int, gen []int) {
		t.Helper()
		var cat []byte
		split := 0
		for i, b := range got {
			raw, _ := tok.Bytes(gen[i])
			bb := intsToBytes(t, b)
			if !bytes.Equal(bb, raw) {
				t.Errorf("%s: token %d (%d): bytes %x, want %x", name, i, gen[i], bb, raw)
			}
			if !utf8.Valid(bb) {
				split++
			}
			cat = append(cat, bb...)
		}
		want, _ := tok.Decode(gen)
		if string(cat) != want || split == 0 {
			t.Errorf("%s: bytes concatenated %q (%d pieces of characters), decode %q", name, cat, split, want)
		}
	}
	// The generated ids, from the engine alone.
	want := f.solo(t, ids, engine.GenOptions{MaxTokens: 6, Stop: f.r.DefaultStops()}, 0)
	body := `{"model":"tarfa-test","messages":[{"role":"user","content":"Hello"}],"max_tokens":6,"temperature":0,"logprobs":true,"top_logprobs":2%s}`
	resp, b := f.post(t, "/v1/chat/completions", fmt.Sprintf(body, ""))
	var c logprobChat
	if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var got [][]int
	for _, lp := range c.Choices[0].Logprobs.Content {
		got = append(got, lp.Bytes)
	}
	check("chat", got, want.tokens)
	if c.Choices[0].Message.Content != want.text {
		t.Errorf("chat content %q, want %q", c.Choices[0].Message.Content, want.text)
	}
	got = nil
	for _, ev := range f.events(t, "/v1/chat/completions", fmt.Sprintf(body, `,"stream":true`)) {
		var c logprobChat
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			if ch.Logprobs != nil {
				for _, lp := range ch.Logprobs.Content {
					got = append(got, lp.Bytes)
				}
			}
		}
	}
	check("chat stream", got, want.tokens)

	// The same prompt as token ids to /v1/completions: the same tokens.
	prompt, _ := json.Marshal(ids)
	cbody := fmt.Sprintf(`{"model":"tarfa-test","prompt":%s,"max_tokens":6,"temperature":0,"logprobs":2%%s}`, prompt)
	offsets := func(name string, lp *openai.CompletionLogprobs, text string) {
		t.Helper()
		if w := wantOffsets(tok, want.tokens); !slices.Equal(lp.TextOffset, w) || text != want.text {
			t.Errorf("%s: text %q, text_offset %v; want %q, %v", name, text, lp.TextOffset, want.text, w)
		}
	}
	resp, b = f.post(t, "/v1/completions", fmt.Sprintf(cbody, ""))
	var cc logprobCompletion
	if err := json.Unmarshal(b, &cc); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	offsets("completions", cc.Choices[0].Logprobs, cc.Choices[0].Text)
	all := &openai.CompletionLogprobs{}
	var text string
	for _, ev := range f.events(t, "/v1/completions", fmt.Sprintf(cbody, `,"stream":true`)) {
		var c logprobCompletion
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			text += ch.Text
			if ch.Logprobs != nil {
				all.TextOffset = append(all.TextOffset, ch.Logprobs.TextOffset...)
			}
		}
	}
	offsets("completions stream", all, text)
}
