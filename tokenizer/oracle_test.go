package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// qwenDir holds the real Qwen3 tokenizer files (see its PROVENANCE.md).
var qwenDir = filepath.Join("..", "validation", "testdata", "qwen3-tokenizer")

var qwenOnce = sync.OnceValues(func() (*Tokenizer, error) { return Load(qwenDir) })

func loadQwen(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := qwenOnce()
	if err != nil {
		t.Fatalf("Load(%s): %v", qwenDir, err)
	}
	return tok
}

type oracleFile struct {
	Strings []struct {
		Text    string `json:"text"`
		IDs     []int  `json:"ids"`
		Decoded string `json:"decoded"`
	} `json:"strings"`
	Chat []struct {
		Messages            json.RawMessage            `json:"messages"`
		AddGenerationPrompt bool                       `json:"add_generation_prompt"`
		Kwargs              map[string]json.RawMessage `json:"kwargs"`
		Rendered            string                     `json:"rendered"`
		IDs                 []int                      `json:"ids"`
	} `json:"chat"`
}

func readOracle(t *testing.T, name string) *oracleFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(qwenDir, name))
	if err != nil {
		t.Fatal(err)
	}
	var o oracleFile
	if err := json.Unmarshal(data, &o); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(o.Strings) == 0 {
		t.Fatalf("%s: no strings", name)
	}
	return &o
}

func TestOracleStrings(t *testing.T) {
	tok := loadQwen(t)
	o := readOracle(t, "oracle_dev.json")
	pass := 0
	for i, s := range o.Strings {
		got := tok.Encode(s.Text)
		if !slices.Equal(got, s.IDs) {
			t.Errorf("strings[%d] Encode(%q)\n got  %v\n want %v", i, s.Text, got, s.IDs)
			continue
		}
		dec, err := tok.Decode(s.IDs)
		if err != nil || dec != s.Decoded {
			t.Errorf("strings[%d] Decode = %q, %v; want %q", i, dec, err, s.Decoded)
			continue
		}
		pass++
	}
	t.Logf("%d of %d strings identical", pass, len(o.Strings))
}

func TestOracleChat(t *testing.T) {
	tok := loadQwen(t)
	tmpl, err := tok.ChatTemplate()
	if err != nil {
		t.Fatal(err)
	}
	o := readOracle(t, "oracle_dev.json")
	if len(o.Chat) == 0 {
		t.Fatal("no chat cases")
	}
	pass := 0
	for i, c := range o.Chat {
		in, err := json.Marshal(map[string]any{
			"messages":              c.Messages,
			"add_generation_prompt": c.AddGenerationPrompt,
			"kwargs":                c.Kwargs,
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := tmpl.RenderJSON(in)
		if err != nil {
			t.Errorf("chat[%d]: %v", i, err)
			continue
		}
		if got != c.Rendered {
			t.Errorf("chat[%d] rendering\n got  %q\n want %q", i, got, c.Rendered)
			continue
		}
		if ids := tok.Encode(got); !slices.Equal(ids, c.IDs) {
			t.Errorf("chat[%d] ids\n got  %v\n want %v", i, ids, c.IDs)
			continue
		}
		pass++
	}
	t.Logf("%d of %d renderings identical (text and ids)", pass, len(o.Chat))
}
