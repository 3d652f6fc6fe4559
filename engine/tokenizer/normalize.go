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

// hfNormalizer returns form's String with Unicode 9.0 behaviour.
func hfNormalizer(form norm.Form) func(string) string {
	return func(s string) string {
		start := 0
		var sb strings.Builder
		for i := 0; i < len(s); {
			r, w := utf8.DecodeRuneInString(s[i:])
			if r >= 0x80 && !unicode.Is(assigned9, r) {
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
