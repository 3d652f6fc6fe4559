package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// QwenPattern is the Split regex of the Qwen2, Qwen2.5 and Qwen3 tokenizers.
// It is the only pre-tokenizer pattern this package runs; qwenNext is a
// hand-written matcher for it, because Go's regexp has no lookahead.
const QwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Character classes of the pattern, with Oniguruma 6.9.10's Unicode 16.0
// tables (Hugging Face tokenizers 0.23 uses them; Go 1.26's unicode package
// is Unicode 15.0, whose \p{L} lacks e.g. CJK Extension I and Todhri). \s is
// Unicode White_Space: U+00A0 and U+3000 count.
const (
	clsL = 1 << iota // \p{L}
	clsN             // \p{N}
	clsS             // \s
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		asciiClass[r] = slowClass(r)
	}
}

func slowClass(r rune) uint8 {
	var c uint8
	if unicode.Is(letter16, r) {
		c |= clsL
	}
	if unicode.Is(number16, r) {
		c |= clsN
	}
	if unicode.Is(whiteSpace16, r) {
		c |= clsS
	}
	return c
}

// bmpClass caches slowClass for the BMP; it is built on first use (about a
// millisecond) rather than at init.
var bmpClass = sync.OnceValue(func() *[1 << 16]uint8 {
	var t [1 << 16]uint8
	for r := range rune(1 << 16) {
		t[r] = slowClass(r)
	}
	return &t
})

func classOf(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	if r < 1<<16 {
		return bmpClass()[r]
	}
	return slowClass(r)
}

// runeAt decodes the rune at s[i]; s is valid UTF-8 and i < len(s).
func runeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// qwenNext returns the end of the QwenPattern match that starts at s[i],
// trying the alternatives in order as a backtracking engine does. Every rune
// matches some alternative, so the result is always > i; the matches of
// successive calls therefore tile s (Split with behaviour Isolated).
func qwenNext(s string, i int) int {
	r0, w0 := runeAt(s, i)
	c0 := classOf(r0)

	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r0 == '\'' && i+1 < len(s) {
		if n := contraction(s[i+1:]); n > 0 {
			return i + 1 + n
		}
	}

	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c0&clsL != 0 {
		return letterRun(s, i+w0)
	}
	if r0 != '\r' && r0 != '\n' && c0&clsN == 0 && i+w0 < len(s) {
		if r1, w1 := runeAt(s, i+w0); classOf(r1)&clsL != 0 {
			return letterRun(s, i+w0+w1)
		}
	}

	// \p{N}
	if c0&clsN != 0 {
		return i + w0
	}

	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if r0 == ' ' {
		j++
	}
	if j < len(s) {
		if r, w := runeAt(s, j); classOf(r) == 0 {
			k := j + w
			for k < len(s) {
				r, w := runeAt(s, k)
				if classOf(r) != 0 {
					break
				}
				k += w
			}
			for k < len(s) && (s[k] == '\r' || s[k] == '\n') {
				k++
			}
			return k
		}
	}

	if c0&clsS == 0 {
		// Unreachable: a rune is a letter, a number, a space or none of them.
		return i + w0
	}
	// The whitespace run s[i:end], and where its last \r or \n is.
	end, lastNL := i, -1
	for end < len(s) {
		r, w := runeAt(s, end)
		if classOf(r)&clsS == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = end
		}
		end += w
	}
	// \s*[\r\n]+ : \s* backtracks to the last newline of the run.
	if lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S) : at the end of the text, or one rune short of the next
	// non-space so that the space can join the following word.
	if end == len(s) {
		return end
	}
	if _, wl := utf8.DecodeLastRuneInString(s[i:end]); end-wl > i {
		return end - wl
	}
	// \s+
	return end
}

// contraction matches s (the text after an apostrophe) against
// s|t|re|ve|m|ll|d case-insensitively and returns the matched length in
// bytes, or 0. Oniguruma folds U+017F (long s) to "s", so it matches too.
func contraction(s string) int {
	lower := func(b byte) byte { return b | 0x20 }
	switch lower(s[0]) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if len(s) > 1 && lower(s[1]) == 'e' {
			return 2
		}
	case 'l':
		if len(s) > 1 && lower(s[1]) == 'l' {
			return 2
		}
	}
	if len(s) >= 2 && s[0] == 0xC5 && s[1] == 0xBF { // U+017F ſ
		return 2
	}
	return 0
}

func letterRun(s string, k int) int {
	for k < len(s) {
		r, w := runeAt(s, k)
		if classOf(r)&clsL == 0 {
			break
		}
		k += w
	}
	return k
}
