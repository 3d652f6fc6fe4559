package tokenizer

import "unicode/utf8"

// The GPT-2 byte-level alphabet: every byte is spelled as one printable rune so
// that BPE vocabularies are plain strings. Printable Latin-1 bytes map to
// themselves; the other 68 bytes map to U+0100 onwards, in byte order.
var (
	byteToRune [256]rune
	runeToByte = map[rune]byte{}
	// byteOrder lists the bytes in the order GPT-2 (and Qwen) give them
	// vocabulary ids 0..255: printable ranges first, then the rest.
	byteOrder [256]byte
)

func init() {
	n := 0
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	for b := 0; b < 256; b++ {
		if printable(b) {
			byteToRune[b] = rune(b)
			byteOrder[n] = byte(b)
			n++
		}
	}
	extra := 0
	for b := 0; b < 256; b++ {
		if !printable(b) {
			byteToRune[b] = rune(256 + extra)
			extra++
			byteOrder[n] = byte(b)
			n++
		}
	}
	for b, r := range byteToRune {
		runeToByte[r] = byte(b)
	}
}

// byteLevelString spells raw bytes in the byte-level alphabet.
func byteLevelString(raw []byte) string {
	buf := make([]byte, 0, 2*len(raw))
	for _, b := range raw {
		buf = utf8.AppendRune(buf, byteToRune[b])
	}
	return string(buf)
}

// byteLevelDecode maps a vocabulary string back to raw bytes as the Hugging
// Face ByteLevel decoder does: if every rune belongs to the byte-level alphabet
// the token stands for those bytes; otherwise (an added token such as
// "<|im_start|>" written with other runes) it stands for its own UTF-8 bytes.
func byteLevelDecode(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return []byte(tok)
		}
		out = append(out, b)
	}
	return out
}
