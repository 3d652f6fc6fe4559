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

// TestLogprobBytesServed: on the embedded default model (default-v2),
// "Hello" sampled at temperature 1 with seed 1 generates, in 32 tokens, a
// character split across byte tokens and bytes that are no UTF-8. Chat and
// completions, whole and streamed, give each token's raw bytes, the same
// text whole and streamed (the tokenizer's decode of the tokens), and text_offset as wantOffsets has it; so
// again when max_tokens cuts the reply right after the split character's
// first byte, and the response ends mid-character (one U+FFFD at the end).
func TestLogprobBytesServed(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	tok := f.r.Tok
	ids := f.chatIDs(t, "Hello")
	g := engine.GenOptions{MaxTokens: 32, Temperature: 1, Seed: 1, Stop: f.r.DefaultStops()}
	ref := f.solo(t, ids, g, 0)
	lead, invalid := -1, 0
	for i, id := range ref.tokens {
		b, _ := tok.Bytes(id)
		if len(b) == 0 || utf8.Valid(b) {
			continue
		}
		if i+1 < len(ref.tokens) && lead < 0 {
			next, _ := tok.Bytes(ref.tokens[i+1])
			if r, n := utf8.DecodeRune(append(append([]byte{}, b...), next...)); r != utf8.RuneError && n > len(b) {
				lead = i
				continue
			}
		}
		invalid++
	}
	if lead < 0 || invalid == 0 {
		t.Fatalf("the reply %q (%v) has no character split across tokens (%d) or no bytes that are no UTF-8 (%d): the test needs both", ref.text, ref.tokens, lead, invalid)
	}
	check := func(name string, got [][]int, want soloRef) {
		t.Helper()
		if len(got) != len(want.tokens) {
			t.Errorf("%s: logprobs for %d tokens, want %d", name, len(got), len(want.tokens))
			return
		}
		for i, b := range got {
			raw, _ := tok.Bytes(want.tokens[i])
			if bb := intsToBytes(t, b); !bytes.Equal(bb, raw) {
				t.Errorf("%s: token %d (%d): bytes %x, want %x", name, i, want.tokens[i], bb, raw)
			}
		}
	}
	for _, n := range []int{len(ref.tokens), lead + 1} {
		g.MaxTokens = n
		want := f.solo(t, ids, g, 0)
		if !slices.Equal(want.tokens, ref.tokens[:n]) {
			t.Fatalf("%d tokens: %v, not the first of %v", n, want.tokens, ref.tokens)
		}
		if n == lead+1 && !strings.HasSuffix(want.text, "\uFFFD") {
			t.Fatalf("cut after the split character's first byte: %q", want.text)
		}
		body := fmt.Sprintf(`{"model":"tarfa-test","messages":[{"role":"user","content":"Hello"}],"max_tokens":%d,"temperature":1,"seed":1,"logprobs":true,"top_logprobs":2%%s}`, n)
		resp, b := f.post(t, "/v1/chat/completions", fmt.Sprintf(body, ""))
		var c logprobChat
		if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		var got [][]int
		for _, lp := range c.Choices[0].Logprobs.Content {
			got = append(got, lp.Bytes)
		}
		check(fmt.Sprintf("chat %d", n), got, want)
		if c.Choices[0].Message.Content != want.text {
			t.Errorf("chat %d: content %q, want %q", n, c.Choices[0].Message.Content, want.text)
		}
		got = nil
		var text string
		for _, ev := range f.events(t, "/v1/chat/completions", fmt.Sprintf(body, `,"stream":true`)) {
			var c logprobChat
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatal(err)
			}
			for _, ch := range c.Choices {
				text += ch.Delta.Content
				if ch.Logprobs != nil {
					for _, lp := range ch.Logprobs.Content {
						got = append(got, lp.Bytes)
					}
				}
			}
		}
		check(fmt.Sprintf("chat stream %d", n), got, want)
		if text != want.text {
			t.Errorf("chat stream %d: deltas concatenated %q, want %q", n, text, want.text)
		}

		// The same prompt as token ids to /v1/completions: the same tokens.
		offs := wantOffsets(tok, want.tokens)
		for _, stream := range []bool{false, true} {
			s := f.completion(t, ids, n, `"temperature":1,"seed":1`, stream)
			if s.text != want.text || !slices.Equal(s.offsets, offs) {
				t.Errorf("completions %d (stream %v): text %q, text_offset %v; want %q, %v", n, stream, s.text, s.offsets, want.text, offs)
			}
		}
	}
}
