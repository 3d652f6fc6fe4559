package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// benchText is mixed prose, code, CJK and whitespace, about 9 kB.
var benchText = strings.Repeat("The quick brown fox jumps over the lazy dog; it's 42°C in Zürich today!\n"+
	"func main() {\n\tfmt.Println(\"hello, world\") // 你好，世界\n}\n"+
	"日本語のテキストとカタカナ、한국어 문장입니다. emoji 😀👍🏽 and   spaces   \n\n", 40)

// BenchmarkLoad is the time to load the real Qwen3 tokenizer.json (11 MB,
// 151,643 entries, 151,387 merges) and its config.
func BenchmarkLoad(b *testing.B) {
	tj, err := os.ReadFile(filepath.Join(qwenDir, TokenizerFile))
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(qwenDir, TokenizerConfigFile))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(tj)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(tj, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode measures encode throughput with a warm word cache.
func BenchmarkEncode(b *testing.B) {
	tok := loadQwen(b)
	tok.Encode(benchText)
	b.SetBytes(int64(len(benchText)))
	b.ReportAllocs()
	for b.Loop() {
		tok.Encode(benchText)
	}
}

// BenchmarkEncodeEnglish measures plain English prose (the synthetic corpus).
func BenchmarkEncodeEnglish(b *testing.B) {
	tok := loadQwen(b)
	tok.Encode(syntheticCorpus)
	b.SetBytes(int64(len(syntheticCorpus)))
	for b.Loop() {
		tok.Encode(syntheticCorpus)
	}
}

// BenchmarkEncodeNoCache measures encode throughput with BPE on every word.
func BenchmarkEncodeNoCache(b *testing.B) {
	tok := *loadQwen(b)
	tok.cache = nil
	b.SetBytes(int64(len(benchText)))
	b.ReportAllocs()
	for b.Loop() {
		tok.Encode(benchText)
	}
}

// BenchmarkEncodeLongWord is the worst case: one 64 kB run of letters.
func BenchmarkEncodeLongWord(b *testing.B) {
	tok := loadQwen(b)
	word := strings.Repeat("abcdefghij", 6400)
	b.SetBytes(int64(len(word)))
	for b.Loop() {
		tok.Encode(word)
	}
}

func BenchmarkDecode(b *testing.B) {
	tok := loadQwen(b)
	ids := tok.Encode(benchText)
	b.SetBytes(int64(len(benchText)))
	for b.Loop() {
		if _, err := tok.Decode(ids); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStreamDecode(b *testing.B) {
	tok := loadQwen(b)
	ids := tok.Encode(benchText)
	b.SetBytes(int64(len(benchText)))
	for b.Loop() {
		d := tok.NewStreamDecoder()
		for _, id := range ids {
			if _, err := d.Next(id); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkRenderChat(b *testing.B) {
	tok := loadQwen(b)
	tmpl, err := tok.ChatTemplate()
	if err != nil {
		b.Fatal(err)
	}
	in := []byte(`{"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7"}, {"role": "user", "content": "Another?"}], "add_generation_prompt": true}`)
	for b.Loop() {
		if _, err := tmpl.RenderJSON(in); err != nil {
			b.Fatal(err)
		}
	}
}
