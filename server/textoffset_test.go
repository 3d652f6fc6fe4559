package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/tokenizer"
)

// byteToken is the id of the token that is the one byte b.
func byteToken(t *testing.T, tok *tokenizer.Tokenizer, b byte) int {
	t.Helper()
	for id := range tok.VocabSize() {
		if raw, err := tok.Bytes(id); err == nil && len(raw) == 1 && raw[0] == b {
			return id
		}
	}
	t.Fatalf("no token is the byte %#x", b)
	return 0
}

// wantOffsets is the text_offset of each of ids as docs/serve.md defines
// it: the bytes of the text that is final before the token, i.e. the
// tokenizer's decode of the tokens before it, less the U+FFFD that decode
// ends in when their bytes end in a character not yet complete.
func wantOffsets(tok *tokenizer.Tokenizer, ids []int) []int {
	out := make([]int, len(ids))
	var raw []byte
	for i, id := range ids {
		d, _ := tok.DecodeSkipSpecial(ids[:i])
		out[i] = len(d)
		for k := max(0, len(raw)-3); k < len(raw); k++ {
			if !utf8.FullRune(raw[k:]) { // a valid start of a character, cut short
				out[i] -= len("\uFFFD")
				break
			}
		}
		if !tok.IsSpecial(id) {
			b, _ := tok.Bytes(id)
			raw = append(raw, b...)
		}
	}
	return out
}

// served is what a response (whole or streamed) gave.
type served struct {
	text    string
	pieces  []string // streamed: the text of each event
	offsets []int
	bytes   [][]int
}

// completion posts a /v1/completions request for prompt ids, max_tokens n,
// sampling (JSON members) and logprobs, whole or streamed.
func (f *fixture) completion(t *testing.T, prompt []int, n int, sampling string, stream bool) served {
	t.Helper()
	p, _ := json.Marshal(prompt)
	body := fmt.Sprintf(`{"model":"tarfa-test","prompt":%s,"max_tokens":%d,%s,"logprobs":1,"stream":%v}`, p, n, sampling, stream)
	var evs []string
	if stream {
		evs = f.events(t, "/v1/completions", body)
	} else {
		resp, b := f.post(t, "/v1/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		evs = []string{string(b)}
	}
	var s served
	for _, ev := range evs {
		var c logprobCompletion
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			s.text += ch.Text
			s.pieces = append(s.pieces, ch.Text)
			if lp := ch.Logprobs; lp != nil {
				s.offsets = append(s.offsets, lp.TextOffset...)
			}
		}
	}
	return s
}

// chatText posts a chat request for user, whole and streamed, and returns
// the streamed content deltas concatenated, the whole response's content
// and how many tokens it has logprobs for.
func (f *fixture) chatText(t *testing.T, user string, n int) (streamed, whole string, tokens int) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"tarfa-test","messages":[{"role":"user","content":%q}],"max_tokens":%d,"temperature":0,"logprobs":true%%s}`, user, n)
	resp, b := f.post(t, "/v1/chat/completions", fmt.Sprintf(body, ""))
	var c logprobChat
	if err := json.Unmarshal(b, &c); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	whole = c.Choices[0].Message.Content
	tokens = len(c.Choices[0].Logprobs.Content)
	for _, ev := range f.events(t, "/v1/chat/completions", fmt.Sprintf(body, `,"stream":true`)) {
		var c logprobChat
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			streamed += ch.Delta.Content
		}
	}
	return streamed, whole, tokens
}

// checkServed: the whole and the streamed completions of the scripted ids
// have the tokenizer's decode of them as text, and every text_offset is
// wantOffsets' (so, where a character is split across tokens or a byte is
// replaced, the offset in the text actually sent, not in the raw bytes).
func checkServed(t *testing.T, f *fixture, name string, ids []int) {
	t.Helper()
	tok := f.r.Tok
	f.srv.idScript = ids
	defer func() { f.srv.idScript = nil }()
	want, _ := tok.DecodeSkipSpecial(ids)
	offs := wantOffsets(tok, ids)
	prompt := []int{1, 2, 3}
	for _, stream := range []bool{false, true} {
		s := f.completion(t, prompt, len(ids), `"temperature":0`, stream)
		what := fmt.Sprintf("%s (stream %v)", name, stream)
		if s.text != want {
			t.Errorf("%s: text %q (pieces %q), want %q", what, s.text, s.pieces, want)
		}
		if !slices.Equal(s.offsets, offs) {
			t.Errorf("%s: text_offset %v, want %v", what, s.offsets, offs)
		}
		for i, o := range s.offsets {
			if o > len(s.text) {
				t.Errorf("%s: text_offset[%d] %d is past the text's %d bytes", what, i, o, len(s.text))
			}
		}
		for i, p := range s.pieces {
			if strings.Contains(p, "\uFFFD") && !strings.Contains(want, "\uFFFD") {
				t.Errorf("%s: event %d sends %q, a piece of a character as U+FFFD", what, i, p)
			}
		}
	}
}

// TestTextOffsetQwen3: served with the real Qwen3 tokenizer, completions
// whose tokens split characters (龘, 🫠, 𝔘), end in the middle of one, hold
// a lone byte that is no UTF-8 (0x80, 0xFF) or a lead byte followed by
// ASCII have the same text whole and streamed (a character split across
// tokens is sent once complete; what cannot become one is U+FFFD, at the
// end of the stream for a character cut short), and each token's
// text_offset is where the text final before it ends, in both.
func TestTextOffsetQwen3(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	qwen, err := tokenizer.Load("../validation/testdata/qwen3-tokenizer")
	if err != nil {
		t.Fatal(err)
	}
	f.r.Tok = qwen // the prompt goes as ids; only the text is read with it
	ids := qwen.Encode(splitText)
	split := 0
	for _, id := range ids {
		if b, _ := qwen.Bytes(id); !utf8.Valid(b) {
			split++
		}
	}
	if split < 4 {
		t.Fatalf("%q encodes to %d pieces of characters: the test needs them", splitText, split)
	}
	a, b := qwen.Encode("a")[0], qwen.Encode(" b")[0]
	checkServed(t, f, "split characters", ids)
	checkServed(t, f, "ends mid-character", ids[:len(ids)-1])
	checkServed(t, f, "lone bytes", []int{a, byteToken(t, qwen, 0x80), b, byteToken(t, qwen, 0xFF), byteToken(t, qwen, 0xFF), a})
	checkServed(t, f, "lead byte then ASCII", []int{a, byteToken(t, qwen, 0xE4), byteToken(t, qwen, 0xBD), b, byteToken(t, qwen, 0xE4)})
}

// TestTextOffsetScripted: the same on the default model's own byte-level
// tokenizer, one byte token at a time (你 = e4 bd a0, 😀 = f0 9f 98 80),
// and chat: its streamed deltas concatenated are the whole response's
// content, a character split across tokens arriving whole.
func TestTextOffsetScripted(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{})
	tok := f.r.Tok
	by := func(s string) []int {
		var ids []int
		for i := range len(s) {
			ids = append(ids, byteToken(t, tok, s[i]))
		}
		return ids
	}
	split := by("a你b😀.")
	checkServed(t, f, "split characters", split)
	checkServed(t, f, "ends mid-character", split[:len(split)-2])
	checkServed(t, f, "lone byte", by("x\x80y\xbf"))
	checkServed(t, f, "cut character then ASCII", by("\xf0\x9f!"))

	for _, ids := range [][]int{split, split[:len(split)-2], by("x\x80y")} {
		f.srv.idScript = ids
		streamed, whole, n := f.chatText(t, "Hello", len(ids))
		want, _ := tok.DecodeSkipSpecial(ids[:min(n, len(ids))])
		if streamed != whole || whole != want || n == 0 {
			t.Errorf("chat (%d tokens): streamed %q, whole %q, want %q", n, streamed, whole, want)
		}
	}
	f.srv.idScript = nil
}
