package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
	"golang.org/x/text/unicode/rangetable"
)

// Hugging Face tokenizers normalises with Unicode 9.0 data (its crate
// unicode-normalization-alignments): verified by canonical reordering, which
// it applies to combining marks of Unicode 9.0 and not of 10.0 and later, and
// by the Dives Akuru composition of Unicode 13.0, which it does not make.
// x/text has Unicode 15.0 data, so a code point assigned after 9.0 is given
// Unicode 9.0's view of an unassigned code point: no decomposition, combining
// class 0, composes with nothing. Such a code point is a barrier that
// normalisation does not cross, so the text between barriers is normalised
// on its own and the barriers are kept as they are.
var assigned9 = rangetable.Assigned("9.0.0")

// assigned9BMP is assigned9 for the BMP as a bitmap (8 kB).
var assigned9BMP = func() *[1 << 10]uint64 {
	var bm [1 << 10]uint64
	for r := rune(0); r < 1<<16; r++ {
		if assigned9 != nil && unicode.Is(assigned9, r) {
			bm[r>>6] |= 1 << (r & 63)
		}
	}
	return &bm
}()

func isAssigned9(r rune) bool {
	if r < 1<<16 {
		return assigned9BMP[r>>6]&(1<<(r&63)) != 0
	}
	return unicode.Is(assigned9, r)
}

// hfNormalizer returns form's String with Unicode 9.0 behaviour.
func hfNormalizer(form norm.Form) func(string) string {
	return func(s string) string {
		start := 0
		var sb strings.Builder
		for i := 0; i < len(s); {
			if s[i] < utf8.RuneSelf {
				i++
				continue
			}
			r, w := utf8.DecodeRuneInString(s[i:])
			if !isAssigned9(r) {
				sb.WriteString(form.String(s[start:i]))
				sb.WriteString(s[i : i+w])
				start = i + w
			}
			i += w
		}
		if start == 0 {
			return form.String(s)
		}
		sb.WriteString(form.String(s[start:]))
		return sb.String()
	}
}
