package tokenizer

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// fuzzSeeds are adversarial inputs shared by the fuzz targets (the committed
// corpus under testdata/fuzz has more): besides the pattern's corner cases,
// long words (BPE's heap path), long runs of space, and text made of the
// added tokens' prefixes (the matcher's trie walks and gives up).
var fuzzSeeds = []string{
	"", " ", "Hello, world!", "a\u3000\u3000b", "x  \n\n  y", "I'M you'LL 's", "'ſt", "\r\n\r\n",
	"<|im_start|>user\nhi<|im_end|>", "<|im_start", "é e\u0301 \u212b", "😀👍🏽🇫🇷 👨‍👩‍👧", "\xff\xfe", "\xe2\x82",
	"价格是 42 元。", "\t\tcode()  // comment\n", "\u00a0\u00a0x", "a\u0085b\u2028c",
	strings.Repeat("abracadabra", 20), strings.Repeat(" ", 200) + "x", strings.Repeat("<|im_", 40) + "end|>",
	strings.Repeat("<|", 60) + "<think></think" + strings.Repeat("\xff\xe2\x82", 20),
}

// qwenRegexp2 is the Qwen pattern in regexp2's default (.NET, Unicode \s)
// mode: an independent backtracking engine for the hand-written scanner.
var qwenRegexp2 = func() *regexp2.Regexp {
	re := regexp2.MustCompile(QwenPattern)
	re.MatchTimeout = 2 * time.Second
	return re
}()

func splitScanner(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := qwenNext(s, i)
		out = append(out, s[i:j])
		i = j
	}
	return out
}

func splitRegexp2(t testing.TB, s string) []string {
	var out []string
	m, err := qwenRegexp2.FindStringMatch(s)
	for ; m != nil && err == nil; m, err = qwenRegexp2.FindNextMatch(m) {
		out = append(out, m.String())
	}
	if err != nil {
		t.Fatalf("regexp2 on %q: %v", s, err)
	}
	return out
}

// FuzzQwenSplit compares the scanner with regexp2 on the Qwen pattern and
// checks that the pieces tile the input.
func FuzzQwenSplit(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				panic(fmt.Sprintf("FuzzQwenSplit hangs on %q", s))
			}
		}()
		if !utf8.ValidString(s) {
			s = validUTF8String(s)
		}
		got := splitScanner(s)
		if strings.Join(got, "") != s {
			t.Fatalf("pieces %q do not tile %q", got, s)
		}
		// .NET folds case without U+017F -> s, Oniguruma (Hugging Face) with;
		// that one difference is covered by TestQwenSplitLongS.
		if strings.ContainsRune(s, 'ſ') {
			return
		}
		// regexp2 classifies with Go's Unicode 15.0 tables, the scanner with
		// Oniguruma's 16.0 ones; runes that differ are covered by
		// TestUnicode16Tables and TestQwenSplitUnicode16.
		if strings.ContainsFunc(s, newerThanGo) {
			return
		}
		if want := splitRegexp2(t, s); !slices.Equal(got, want) {
			t.Fatalf("split(%q)\n scanner %q\n regexp2 %q", s, got, want)
		}
	})
}

// newerThanGo reports whether r is a letter or number in Unicode 16.0 but not
// in Go's own tables.
func newerThanGo(r rune) bool {
	return unicode.Is(letter16, r) && !unicode.IsLetter(r) ||
		unicode.Is(number16, r) && !unicode.IsNumber(r)
}

func TestQwenSplitUnicode16(t *testing.T) {
	// U+13468 (Egyptian Hieroglyphs Extended-A, Unicode 16.0) is a letter,
	// so it joins the word; Go's 15.0 tables would split it off.
	if got, want := splitScanner(" A\U00013468"), []string{" A\U00013468"}; !slices.Equal(got, want) {
		t.Fatalf("split = %q; want %q", got, want)
	}
	if !newerThanGo(0x13468) || newerThanGo('A') {
		t.Fatal("newerThanGo misclassifies U+13468 or 'A'")
	}
}

func TestQwenSplitLongS(t *testing.T) {
	// Oniguruma's case-insensitive 's also matches U+017F.
	if got, want := splitScanner("'ſt x"), []string{"'ſ", "t", " x"}; !slices.Equal(got, want) {
		t.Fatalf("split = %q; want %q", got, want)
	}
}

func TestQwenSplitCases(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"Hello, world!", []string{"Hello", ",", " world", "!"}},
		{"a\u3000\u3000b", []string{"a", "\u3000", "\u3000b"}},
		{"a   b", []string{"a", "  ", " b"}},
		{"x \n\n y", []string{"x", " \n\n", " y"}},
		{"end  ", []string{"end", "  "}},
		{"I'VE 's", []string{"I", "'VE", " '", "s"}},
		{"12ab", []string{"1", "2", "ab"}},
		{" !!\n\nx", []string{" !!\n\n", "x"}},
		{"\t!", []string{"\t", "!"}},
	} {
		if got := splitScanner(c.in); !slices.Equal(got, c.want) {
			t.Errorf("split(%q) = %q; want %q", c.in, got, c.want)
		}
		if got := splitRegexp2(t, c.in); !slices.Equal(got, c.want) {
			t.Errorf("regexp2 split(%q) = %q; want %q (the test's expectation is wrong)", c.in, got, c.want)
		}
	}
}

// expectedRoundTrip is what Decode(Encode(s)) must give: added tokens kept,
// the text between them NFC-normalised piece by piece (Qwen has no
// normalised added tokens), invalid UTF-8 replaced first.
func expectedRoundTrip(tok *Tokenizer, s string) string {
	s = validUTF8String(s)
	var sb strings.Builder
	tok.rawMatcher.split(s, func(piece string, a *AddedToken) {
		if a != nil {
			sb.WriteString(a.Content)
			return
		}
		sb.WriteString(tok.normalize(piece))
	})
	return sb.String()
}

// FuzzEncodeDecode checks on the real Qwen3 tokenizer that decode(encode(s))
// gives s back (normalised), that every id is valid, that the word cache
// changes nothing and that streaming decode equals Decode.
func FuzzEncodeDecode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	tok := loadQwen(f)
	noCache := *tok
	noCache.cache = nil
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s)
		if again := noCache.Encode(s); !slices.Equal(ids, again) {
			t.Fatalf("Encode(%q) with cache %v, without %v", s, ids, again)
		}
		got, err := tok.Decode(ids)
		if err != nil {
			t.Fatal(err)
		}
		if want := expectedRoundTrip(tok, s); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q; want %q (ids %v)", s, got, want, ids)
		}
		if utf8.ValidString(s) && norm.NFC.IsNormalString(s) && tok.normalize(s) == s && got != s {
			t.Fatalf("NFC input %q came back as %q", s, got)
		}
		d := tok.NewStreamDecoder()
		var sb strings.Builder
		for _, id := range ids {
			part, err := d.Next(id)
			if err != nil {
				t.Fatal(err)
			}
			if strings.ContainsRune(part, utf8.RuneError) && !strings.ContainsRune(got, utf8.RuneError) {
				t.Fatalf("stream emitted U+FFFD for valid text %q", got)
			}
			sb.WriteString(part)
		}
		sb.WriteString(d.Flush())
		if sb.String() != got {
			t.Fatalf("streamed %q; Decode %q", sb.String(), got)
		}
	})
}

// FuzzStreamDecoder feeds arbitrary byte-token sequences (any bytes, split
// anywhere, with special tokens between) and checks the stream against
// Decode and the Unicode replacement rules.
func FuzzStreamDecoder(f *testing.F) {
	f.Add([]byte("\xe2\x82\xac"), uint8(1))
	f.Add([]byte("\xf0\x9f\x98\x80abc\xed\xa0\x80"), uint8(3))
	f.Add([]byte("\xc0\x80\xf4\x90\x80\x80"), uint8(0))
	f.Add([]byte(strings.Repeat("\xf0\x9f\x98\x80\xe2\x82", 50)), uint8(7))
	tok := loadQwen(f)
	imEnd, _ := tok.TokenID("<|im_end|>")
	f.Fuzz(func(t *testing.T, raw []byte, specialEvery uint8) {
		var ids []int
		for i, b := range raw {
			ids = append(ids, int(tok.byteID[b]))
			if specialEvery > 0 && i%int(specialEvery) == 0 {
				ids = append(ids, imEnd)
			}
		}
		for _, skip := range []bool{false, true} {
			want, err := tok.decode(ids, skip)
			if err != nil {
				t.Fatal(err)
			}
			d := tok.NewStreamDecoder()
			d.SkipSpecial = skip
			var sb strings.Builder
			for _, id := range ids {
				s, err := d.Next(id)
				if err != nil {
					t.Fatal(err)
				}
				if !utf8.ValidString(s) {
					t.Fatalf("Next returned invalid UTF-8 %q", s)
				}
				sb.WriteString(s)
			}
			sb.WriteString(d.Flush())
			if sb.String() != want {
				t.Fatalf("skip %v: streamed %q; Decode %q", skip, sb.String(), want)
			}
		}
		if utf8.Valid(raw) {
			if got, _ := tok.DecodeSkipSpecial(ids); got != string(raw) {
				t.Fatalf("valid bytes %q decoded as %q", raw, got)
			}
		}
	})
}

func TestStreamDecoderHoldsSplitCharacters(t *testing.T) {
	tok := loadQwen(t)
	d := tok.NewStreamDecoder()
	euro := []byte("€") // three bytes, three tokens
	for i, b := range euro {
		s, err := d.Next(int(tok.byteID[b]))
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 && (s != "" || !d.Pending()) {
			t.Fatalf("after byte %d: emitted %q, pending %v; want nothing emitted yet", i, s, d.Pending())
		}
		if i == 2 && s != "€" {
			t.Fatalf("after the last byte: %q; want €", s)
		}
	}
	if _, err := d.Next(-1); err == nil || !strings.Contains(err.Error(), "id -1 out of range") {
		t.Fatalf("Next(-1) error = %v", err)
	}
	if _, err := d.Next(tok.VocabSize()); err == nil {
		t.Fatal("Next(VocabSize()) succeeded")
	}
	if _, err := tok.Decode([]int{1, 2, 1 << 40}); err == nil || !strings.Contains(err.Error(), "out of range [0, 151669)") {
		t.Fatalf("Decode error = %v", err)
	}
	// An unfinished character at the end of the stream is one U+FFFD.
	d.Next(int(tok.byteID[0xE2]))
	if s := d.Flush(); s != "\uFFFD" {
		t.Fatalf("Flush = %q", s)
	}
}

// TestBPESmallMatchesHeap checks the quadratic path against the heap path.
func TestBPESmallMatchesHeap(t *testing.T) {
	tok := loadQwen(t)
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("aeinorst lh\n!.e")
	for range 3000 {
		n := 2 + rng.IntN(smallWord-1)
		syms := make([]int32, n)
		for i := range syms {
			syms[i] = tok.byteID[alphabet[rng.IntN(len(alphabet))]]
		}
		a := tok.bpe(slices.Clone(syms))
		b := tok.bpeHeap(slices.Clone(syms))
		if !slices.Equal(a, b) {
			t.Fatalf("bpe %v, bpeHeap %v for %v", a, b, syms)
		}
	}
	long := strings.Repeat("abracadabra", 1000) // one 11 kB word: the heap path
	if got, _ := tok.Decode(tok.Encode(long)); got != long {
		t.Fatal("long input does not round-trip")
	}
}

// TestConcurrentEncode runs Encode and Decode from several goroutines on one
// Tokenizer (run with -race) and checks every result against a serial one.
func TestConcurrentEncode(t *testing.T) {
	tok := loadQwen(t)
	texts := append([]string{}, fuzzSeeds...)
	for i := range 200 {
		texts = append(texts, fmt.Sprintf("word%d and the %d-th sentence, again %d", i, i, i%7))
	}
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = encodeNoCache(tok, s)
	}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := range texts {
				j := (i + g*37) % len(texts)
				if got := tok.Encode(texts[j]); !slices.Equal(got, want[j]) {
					errs <- fmt.Errorf("goroutine %d: Encode(%q) = %v; want %v", g, texts[j], got, want[j])
					return
				}
				if _, err := tok.Decode(want[j]); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// encodeNoCache encodes with a private, cache-less copy of tok.
func encodeNoCache(tok *Tokenizer, s string) []int {
	c := *tok
	c.cache = nil
	return c.Encode(s)
}

// FuzzParse feeds mutated tokenizer.json / tokenizer_config.json bytes to
// Parse: errors are expected, panics are bugs, whatever loads must encode to
// ids that decode, has no more ids than its file can describe, and is
// refused when the model's vocabulary is one smaller. The seeds include
// every boundCase, committed under testdata/fuzz/FuzzParse
// (TestFuzzParseCorpusHasBoundCases).
func FuzzParse(f *testing.F) {
	tj, cj, err := SyntheticFiles(300)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tj, cj)
	f.Add(tj, []byte(`{"chat_template": "{{ messages }}", "eos_token": {"content": "<|im_end|>"}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a\u0041": 1}, "merges": ["a b"]}}`), []byte(nil))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 2147483646}, "merges": []}}`), []byte(nil))
	f.Add([]byte(`{"added_tokens": [{"id": 1000000000000000, "content": "x"}], "model": {"type": "BPE", "vocab": {"a": 0}, "merges": null}}`), []byte(nil))
	f.Fuzz(func(t *testing.T, tj, cj []byte) {
		if len(tj)+len(cj) > 1<<20 {
			return // keep each run short
		}
		tok, err := Parse(tj, cj)
		if err != nil {
			return
		}
		if n := tok.VocabSize(); n > len(tj)+maxUnusedIDs {
			t.Fatalf("%d bytes of tokenizer.json load as %d ids", len(tj), n)
		}
		if _, err := (LoadOptions{ModelVocab: tok.VocabSize() - 1}).Parse(tj, cj); err == nil {
			t.Fatalf("loads with ModelVocab %d although its largest id is %d", tok.VocabSize()-1, tok.VocabSize()-1)
		}
		for _, s := range []string{"Hello, world! 123", "<|im_start|>x\u00e9\u3000 y"} {
			if _, err := tok.Decode(tok.Encode(s)); err != nil {
				t.Fatalf("Encode(%q) gave ids that do not decode: %v", s, err)
			}
		}
	})
}

var updateCorpus = flag.Bool("update-corpus", false, "write the bound cases into testdata/fuzz/FuzzParse")

// TestFuzzParseCorpusHasBoundCases checks that every boundCase that fits
// FuzzParse's input size is a committed seed. -update-corpus writes them.
func TestFuzzParseCorpusHasBoundCases(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	n := 0
	for _, c := range boundCases(t) {
		if len(c.tj) > 1<<20 {
			continue // beyond FuzzParse's inputs; TestLoadBoundsIDs has it
		}
		n++
		path := filepath.Join(dir, "bound-"+strings.NewReplacer(" ", "-", "*", "x").Replace(c.name))
		data := []byte("go test fuzz v1\n[]byte(" + strconv.Quote(string(c.tj)) + ")\n[]byte(\"\")\n")
		if *updateCorpus {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s is missing or stale (%v); run go test -run TestFuzzParseCorpusHasBoundCases -update-corpus", path, err)
		}
	}
	if n < 10 {
		t.Fatalf("only %d bound cases are seeds", n)
	}
}
