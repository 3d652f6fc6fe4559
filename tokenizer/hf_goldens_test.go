package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// hfGoldens is hf_goldens.json, written by gen_hf_goldens.py with
// transformers 5.17.0 / tokenizers 0.23.2 (see PROVENANCE.md).
type hfGoldens struct {
	QwenStrings []goldenString `json:"qwen_strings"`
	QwenDecode  []struct {
		IDs             []int  `json:"ids"`
		Text            string `json:"text"`
		TextSkipSpecial string `json:"text_skip_special"`
	} `json:"qwen_decode"`
	Synthetic map[string]struct {
		VocabSize int `json:"vocab_size"`
		Added     []struct {
			Content string `json:"content"`
			ID      int    `json:"id"`
		} `json:"added"`
		Strings []goldenString `json:"strings"`
	} `json:"synthetic"`
	QwenChat []map[string]json.RawMessage `json:"qwen_chat"`
}

type goldenString struct {
	Text    string `json:"text"`
	IDs     []int  `json:"ids"`
	Decoded string `json:"decoded"`
}

func readHFGoldens(t *testing.T) *hfGoldens {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(qwenDir, "hf_goldens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g hfGoldens
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

func checkStrings(t *testing.T, name string, tok *Tokenizer, cases []goldenString) {
	t.Helper()
	if len(cases) == 0 {
		t.Fatalf("%s: no cases", name)
	}
	pass := 0
	for i, c := range cases {
		got := tok.Encode(c.Text)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("%s[%d] Encode(%q)\n got  %v\n want %v", name, i, c.Text, got, c.IDs)
			continue
		}
		dec, err := tok.Decode(c.IDs)
		if err != nil || dec != c.Decoded {
			t.Errorf("%s[%d] Decode(%v) = %q, %v; want %q", name, i, c.IDs, dec, err, c.Decoded)
			continue
		}
		pass++
	}
	t.Logf("%s: %d of %d strings identical (ids and decoded text)", name, pass, len(cases))
}

func TestHFGoldensQwenStrings(t *testing.T) {
	checkStrings(t, "qwen_strings", loadQwen(t), readHFGoldens(t).QwenStrings)
}

func TestHFGoldensDecode(t *testing.T) {
	tok := loadQwen(t)
	g := readHFGoldens(t)
	for i, c := range g.QwenDecode {
		if got, err := tok.Decode(c.IDs); err != nil || got != c.Text {
			t.Errorf("qwen_decode[%d] Decode(%v) = %q, %v; want %q", i, c.IDs, got, err, c.Text)
		}
		if got, err := tok.DecodeSkipSpecial(c.IDs); err != nil || got != c.TextSkipSpecial {
			t.Errorf("qwen_decode[%d] DecodeSkipSpecial(%v) = %q, %v; want %q", i, c.IDs, got, err, c.TextSkipSpecial)
		}
		for _, skip := range []bool{false, true} {
			d := tok.NewStreamDecoder()
			d.SkipSpecial = skip
			var sb strings.Builder
			for _, id := range c.IDs {
				s, err := d.Next(id)
				if err != nil {
					t.Fatal(err)
				}
				sb.WriteString(s)
			}
			sb.WriteString(d.Flush())
			want := c.Text
			if skip {
				want = c.TextSkipSpecial
			}
			if sb.String() != want {
				t.Errorf("qwen_decode[%d] streamed (skip %v) = %q; want %q", i, skip, sb.String(), want)
			}
		}
	}
}

func TestHFGoldensSynthetic(t *testing.T) {
	g := readHFGoldens(t)
	for _, name := range []string{"synth-300", "synth-512", "synth-1024", "synth-2500"} {
		s, ok := g.Synthetic[name]
		if !ok {
			t.Fatalf("no %s in hf_goldens.json", name)
		}
		v, _ := strconv.Atoi(strings.TrimPrefix(name, "synth-"))
		tj, cj, err := SyntheticFiles(v)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := Parse(tj, cj)
		if err != nil {
			t.Fatal(err)
		}
		if tok.VocabSize() != s.VocabSize {
			t.Errorf("%s: VocabSize %d; Hugging Face %d", name, tok.VocabSize(), s.VocabSize)
		}
		// The goldens were made from SyntheticFiles' output at the time; if
		// it changes on purpose, regenerate them (see PROVENANCE.md).
		checkStrings(t, name, tok, s.Strings)
	}
}

// TestHFGoldensAddedTokenFlags checks lstrip, rstrip, single_word,
// normalized and special added tokens, overlapping and nested ones, and
// added tokens whose content is already a vocabulary entry.
func TestHFGoldensAddedTokenFlags(t *testing.T) {
	g := readHFGoldens(t)
	s := g.Synthetic["flags"]
	data, err := os.ReadFile(filepath.Join(qwenDir, "flags-tokenizer", TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range s.Added {
		if id, ok := tok.TokenID(a.Content); !ok || id != a.ID {
			t.Errorf("added token %q: id %d (%v); Hugging Face %d", a.Content, id, ok, a.ID)
		}
	}
	checkStrings(t, "flags", tok, s.Strings)
}

// TestHFGoldensLongS uses a tokenizer with the merge "ſ"+"t": Hugging Face
// does not apply it to "'ſt", so (?i:'s) matched the long s there.
func TestHFGoldensLongS(t *testing.T) {
	g := readHFGoldens(t)
	data, err := os.ReadFile(filepath.Join(qwenDir, "longs-tokenizer", TokenizerFile))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Parse(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkStrings(t, "longs", tok, g.Synthetic["longs"].Strings)
}

func TestHFGoldensChat(t *testing.T) {
	tok := loadQwen(t)
	tmpl, err := tok.ChatTemplate()
	if err != nil {
		t.Fatal(err)
	}
	g := readHFGoldens(t)
	pass, fail := 0, 0
	for i, c := range g.QwenChat {
		in := map[string]json.RawMessage{}
		for k, v := range c {
			switch k {
			case "rendered", "ids", "error", "plain_jinja2_agrees":
			default:
				in[k] = v
			}
		}
		data, _ := json.Marshal(in)
		got, err := tmpl.RenderJSON(data)
		name := fmt.Sprintf("qwen_chat[%d]", i)
		if _, hfErr := c["error"]; hfErr {
			if err == nil {
				t.Errorf("%s: rendered %q; Hugging Face raised %s", name, got, c["error"])
			} else {
				fail++
			}
			continue
		}
		var want string
		var wantIDs []int
		if err := json.Unmarshal(c["rendered"], &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(c["ids"], &wantIDs); err != nil {
			t.Fatal(err)
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got != want {
			t.Errorf("%s rendering\n got  %q\n want %q", name, got, want)
			continue
		}
		if ids := tok.Encode(got); !slices.Equal(ids, wantIDs) {
			t.Errorf("%s ids\n got  %v\n want %v", name, ids, wantIDs)
			continue
		}
		pass++
	}
	t.Logf("qwen_chat: %d renderings identical, %d Hugging Face errors reproduced, of %d", pass, fail, len(g.QwenChat))
}
