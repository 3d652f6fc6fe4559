package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tarfa-ai/tarfa/jnf"
)

// editTokenizer returns SyntheticFiles(300)'s tokenizer.json changed by f.
func editTokenizer(t testing.TB, f func(m map[string]any)) []byte {
	t.Helper()
	base, _, err := SyntheticFiles(300)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(base, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func modelOf(m map[string]any) map[string]any { return m["model"].(map[string]any) }

// addedToken is an added_tokens entry.
func addedToken(id int, content string) map[string]any {
	return map[string]any{"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
}

// boundCase is a tokenizer.json that asks for more than its size: each of
// these used to panic (make with a length from the file) or exhaust memory,
// or is one Hugging Face refuses.
type boundCase struct {
	name string
	tj   []byte
	want string // in the error
}

func boundCases(t testing.TB) []boundCase {
	// The synthetic tokenizer has model ids 0..294 and added tokens 295..299.
	withVocab := func(tok string, id int) func(map[string]any) {
		return func(m map[string]any) {
			m["added_tokens"] = []any{}
			modelOf(m)["vocab"].(map[string]any)[tok] = id
		}
	}
	return []boundCase{
		{"added id 1e15", editTokenizer(t, func(m map[string]any) {
			m["added_tokens"] = append(m["added_tokens"].([]any), addedToken(1_000_000_000_000_000, "<big>"))
		}), `added_tokens[5] "<big>": id 1000000000000000, but Hugging Face tokenizers would assign id 300`},
		{"added id 2e9", editTokenizer(t, func(m map[string]any) {
			m["added_tokens"] = append(m["added_tokens"].([]any), addedToken(2_000_000_000, "<big>"))
		}), "id 2000000000, but Hugging Face tokenizers would assign id 300"},
		{"added id negative", editTokenizer(t, func(m map[string]any) {
			m["added_tokens"] = append(m["added_tokens"].([]any), addedToken(-1, "<neg>"))
		}), "id -1, but Hugging Face tokenizers would assign id 300"},
		{"vocab id 2**31-2", editTokenizer(t, withVocab("zz", 1<<31-2)),
			`model.vocab["zz"]: id 2147483646, but there are only 296 tokens: at most 1024 ids may be unused`},
		{"vocab id 2e9", editTokenizer(t, withVocab("zz", 2_000_000_000)), "id 2000000000, but there are only 296 tokens"},
		{"vocab id just past the slack", editTokenizer(t, withVocab("zz", 296+1024)), "id 1320, but there are only 296 tokens"},
		{"vocab id beyond int32", editTokenizer(t, withVocab("zz", 1<<31)), `model.vocab["zz"]: id 2147483648 out of range`},
		{"added id on a vocab id", editTokenizer(t, func(m map[string]any) {
			// A hole at 295: Hugging Face gives the first new added token
			// id len(vocab) = 296, which "zz" already has.
			modelOf(m)["vocab"].(map[string]any)["zz"] = 296
			m["added_tokens"] = []any{addedToken(296, "<x>")}
		}), `added_tokens[0] "<x>": id 296, which model.vocab gives to "zz"`},
		{"merges null", editTokenizer(t, func(m map[string]any) { modelOf(m)["merges"] = nil }),
			"model.merges is null (Hugging Face tokenizers refuses it"},
		{"merges missing", editTokenizer(t, func(m map[string]any) { delete(modelOf(m), "merges") }),
			"model.merges is missing (Hugging Face tokenizers refuses a BPE model without it)"},
		{"vocab null", editTokenizer(t, func(m map[string]any) { modelOf(m)["vocab"] = nil }), "model.vocab is null"},
		{"vocab missing", editTokenizer(t, func(m map[string]any) { delete(modelOf(m), "vocab") }), "model.vocab is missing"},
		{"added token too long", editTokenizer(t, func(m map[string]any) {
			m["added_tokens"] = append(m["added_tokens"].([]any), addedToken(300, strings.Repeat("x", maxAddedTokenLen+1)))
		}), "1025 bytes, more than the 1024 accepted"},
		{"added tokens too big", editTokenizer(t, func(m map[string]any) {
			for i := range maxAddedBytes / maxAddedTokenLen {
				m["added_tokens"] = append(m["added_tokens"].([]any), addedToken(300+i, fmt.Sprintf("%01024d", i)))
			}
		}), "bytes of content, more than the 1048576 accepted"},
	}
}

// TestLoadBoundsIDs checks that no id in a tokenizer.json can make the load
// allocate more than the file's own size calls for.
func TestLoadBoundsIDs(t *testing.T) {
	for _, c := range boundCases(t) {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.tj, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse error = %v; want one containing %q", err, c.want)
			}
		})
	}

	// Within the slack a vocabulary may have holes (tokenizers accepts
	// them); the ids in between are no token's.
	tj := editTokenizer(t, func(m map[string]any) {
		m["added_tokens"] = []any{}
		modelOf(m)["vocab"].(map[string]any)["zz"] = 296 + 1023
	})
	tok, err := Parse(tj, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != 296+1024 {
		t.Fatalf("VocabSize = %d", tok.VocabSize())
	}
	if _, err := tok.Token(500); err == nil {
		t.Fatal("id 500 (a hole) has a token")
	}
	if id, ok := tok.TokenID("zz"); !ok || id != 1319 {
		t.Fatalf(`TokenID("zz") = %d, %v`, id, ok)
	}
}

// TestLoadOptionsModelVocab checks that the model's vocabulary bounds the
// ids when the caller knows it.
func TestLoadOptionsModelVocab(t *testing.T) {
	tj, cj, err := SyntheticFiles(300)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (LoadOptions{ModelVocab: 300}).Parse(tj, cj); err != nil {
		t.Fatalf("ModelVocab 300: %v", err)
	}
	_, err = LoadOptions{ModelVocab: 299}.Parse(tj, cj)
	if want := `added_tokens[4] "</think>": id 299 is beyond the model's vocabulary of 299`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("ModelVocab 299: %v; want %q", err, want)
	}
	noAdded := editTokenizer(t, func(m map[string]any) { m["added_tokens"] = []any{} })
	_, err = LoadOptions{ModelVocab: 200}.Parse(noAdded, nil)
	if want := "id 294 is beyond the model's vocabulary of 200"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("ModelVocab 200: %v; want %q", err, want)
	}
	dir := t.TempDir()
	writeFiles(t, dir, tj, cj)
	if _, err := (LoadOptions{ModelVocab: 299}).Load(dir); err == nil {
		t.Fatal("Load with ModelVocab 299 succeeded")
	}
	if _, err := (LoadOptions{ModelVocab: 299}).LoadFS(os.DirFS(dir)); err == nil {
		t.Fatal("LoadFS with ModelVocab 299 succeeded")
	}
}

func writeFiles(t *testing.T, dir string, tj, cj []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, TokenizerFile), tj, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, TokenizerConfigFile), cj, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLoadFileLimits checks that Load, LoadFS and LoadChatTemplate read
// only regular files, of at most jnf.MaxAuxFileSize bytes.
func TestLoadFileLimits(t *testing.T) {
	tj, cj, err := SyntheticFiles(300)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{TokenizerFile, TokenizerConfigFile, ChatTemplateFile} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tj, cj)
			// A sparse file: its size is over the limit, nothing is written.
			path := filepath.Join(dir, name)
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			const size = jnf.MaxAuxFileSize + 1000
			if err := f.Truncate(size); err != nil {
				t.Fatal(err)
			}
			f.Close()
			// Refused by its size, before a byte is read.
			tooBig := func(err error) bool {
				var le *jnf.LimitError
				return errors.As(err, &le) && le.Size == size && le.Max == jnf.MaxAuxFileSize
			}
			if _, err := Load(dir); !tooBig(err) {
				t.Errorf("Load: %v; want a *jnf.LimitError for %d bytes", err, size)
			}
			if _, err := LoadFS(os.DirFS(dir)); !tooBig(err) {
				t.Errorf("LoadFS: %v; want a *jnf.LimitError for %d bytes", err, size)
			}
			if name != TokenizerFile {
				if _, err := LoadChatTemplate(dir); !tooBig(err) {
					t.Errorf("LoadChatTemplate: %v; want a *jnf.LimitError for %d bytes", err, size)
				}
				if _, err := LoadChatTemplateFS(os.DirFS(dir)); !tooBig(err) {
					t.Errorf("LoadChatTemplateFS: %v; want a *jnf.LimitError for %d bytes", err, size)
				}
			}

			// A named pipe is refused without blocking on its open.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 2)
			go func() { _, err := Load(dir); done <- err }()
			go func() { _, err := LoadFS(os.DirFS(dir)); done <- err }()
			for range 2 {
				select {
				case err := <-done:
					var nr *jnf.NotRegularError
					if !errors.As(err, &nr) {
						t.Errorf("a FIFO %s: %v; want a *jnf.NotRegularError", name, err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("loading a FIFO %s blocks", name)
				}
			}
		})
	}

	// An fs.FS whose file is longer than its Stat says is cut off at the
	// limit while it is read.
	fsys := growingFS{fstest.MapFS{TokenizerFile: {Data: tj}}}
	var le *jnf.LimitError
	if _, err := LoadFS(fsys); !errors.As(err, &le) || le.Size != jnf.MaxAuxFileSize+1 {
		t.Fatalf("LoadFS of a growing file: %v; want a *jnf.LimitError after %d bytes", err, jnf.MaxAuxFileSize+1)
	}
}

// growingFS serves files that go on past their stated size.
type growingFS struct{ fstest.MapFS }

func (g growingFS) Open(name string) (fs.File, error) {
	f, err := g.MapFS.Open(name)
	if err != nil {
		return nil, err
	}
	return growingFile{f}, nil
}

type growingFile struct{ fs.File }

func (f growingFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	if err == io.EOF {
		for i := range p {
			p[i] = ' '
		}
		return len(p), nil
	}
	return n, err
}

// TestManyAddedTokensMatchFast checks that matching costs the length of the
// longest token, not the number of tokens: 20,000 added tokens that all
// start with "<", and a megabyte of "<" to encode (the old matcher tried
// every token at every position: 2·10¹⁰ prefix tests).
func TestManyAddedTokensMatchFast(t *testing.T) {
	tj := editTokenizer(t, func(m map[string]any) {
		added := m["added_tokens"].([]any)
		for i := range 20_000 {
			added = append(added, addedToken(300+i, fmt.Sprintf("<%d>", i)))
		}
		m["added_tokens"] = added
	})
	start := time.Now()
	tok, err := Parse(tj, nil)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("<", 1<<20) + "<123><19999>"
	ids := tok.Encode(text)
	if n := len(ids); n < 2 || ids[n-2] != 423 || ids[n-1] != 20299 {
		t.Fatalf("the added tokens at the end are %v", ids[max(0, len(ids)-3):])
	}
	if elapsed := time.Since(start); elapsed > 20*time.Second {
		t.Fatalf("load and encode took %v", elapsed)
	}
}
