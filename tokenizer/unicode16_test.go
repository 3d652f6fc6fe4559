package tokenizer

import (
	"testing"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// TestUnicode16Tables checks the generated tables against Go's Unicode 15.0
// ones: they may only grow, by code points assigned in 15.1 and 16.0.
func TestUnicode16Tables(t *testing.T) {
	added := map[string]int{}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		for _, c := range []struct {
			name     string
			new, old bool
		}{
			{"letter", unicode.Is(letter16, r), unicode.IsLetter(r)},
			{"number", unicode.Is(number16, r), unicode.IsNumber(r)},
			{"space", unicode.Is(whiteSpace16, r), unicode.IsSpace(r)},
		} {
			if c.old && !c.new {
				t.Fatalf("U+%04X is a %s in Go's Unicode %s tables but not in Unicode 16.0", r, c.name, unicode.Version)
			}
			if c.new && !c.old {
				added[c.name]++
			}
		}
	}
	if added["space"] != 0 {
		t.Errorf("White_Space changed: %d code points", added["space"])
	}
	for _, r := range []rune{0x2EBF0, 0x105C0, 0x1E5D0, 0x11BC0, 0x16D43} {
		if classOf(r)&clsL == 0 {
			t.Errorf("U+%04X (assigned in Unicode 15.1/16.0) is not a letter", r)
		}
	}
	t.Logf("Unicode 16.0 adds %d letters and %d numbers to Go's %s tables", added["letter"], added["number"], unicode.Version)
}

// TestNormalizerUnicode9 pins the Unicode 9.0 normalisation of Hugging Face
// tokenizers (hf_goldens.json has the same cases from tokenizers itself).
func TestNormalizerUnicode9(t *testing.T) {
	if assigned9 == nil {
		t.Fatal("x/text has no Unicode 9.0.0 assigned table")
	}
	nfc := hfNormalizer(norm.NFC)
	for _, c := range []struct{ in, want string }{
		{"e\u0301", "\u00e9"},
		{"a\u08d4\u0316", "a\u0316\u08d4"},                     // 9.0 mark: reordered
		{"a\u1df6\u0316", "a\u1df6\u0316"},                     // 10.0 mark: a barrier
		{"\U00011935\U00011930", "\U00011935\U00011930"},       // 13.0 composition: not made
		{"e\u0301\U00011935e\u0301", "\u00e9\U00011935\u00e9"}, // both sides still normalised
		{"\u212b", "\u00c5"},
	} {
		if got := nfc(c.in); got != c.want {
			t.Errorf("NFC(%+q) = %+q; want %+q", c.in, got, c.want)
		}
	}
}
