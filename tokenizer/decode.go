package tokenizer

import "unicode/utf8"

// StreamDecoder turns ids into text one id at a time, as a model produces
// them. A character whose UTF-8 bytes are split across tokens is returned
// once its last byte has arrived, never as U+FFFD halves. Bytes that cannot
// become valid UTF-8 are replaced by U+FFFD exactly as Decode replaces them,
// so the concatenation of all Next results and Flush equals Decode of all
// the ids.
//
// A StreamDecoder is not safe for concurrent use.
type StreamDecoder struct {
	t *Tokenizer
	// SkipSpecial leaves out added tokens marked special, as
	// DecodeSkipSpecial does.
	SkipSpecial bool
	pending     []byte // a valid but incomplete UTF-8 prefix (at most 3 bytes)
	out         []byte
}

// NewStreamDecoder returns a decoder with nothing pending.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t}
}

// Next adds one id and returns the text that is now complete (possibly "").
// An id that no token has is an *IDError and leaves the decoder unchanged.
func (d *StreamDecoder) Next(id int) (string, error) {
	if err := d.t.checkID(id); err != nil {
		return "", err
	}
	if d.SkipSpecial && d.t.kind[id] == kindSpecial {
		return "", nil
	}
	d.pending = append(d.pending, d.t.decBuf[d.t.decOff[id]:d.t.decOff[id+1]]...)
	d.out = d.out[:0]
	i := 0
	for i < len(d.pending) {
		b := d.pending[i]
		if b < utf8.RuneSelf {
			d.out = append(d.out, b)
			i++
			continue
		}
		n, complete := utf8Prefix(d.pending[i:])
		if complete {
			d.out = append(d.out, d.pending[i:i+n]...)
			i += n
			continue
		}
		if i+n == len(d.pending) && n > 0 {
			break // a valid start of a character: wait for more bytes
		}
		d.out = append(d.out, replacement...)
		i += max(n, 1)
	}
	d.pending = append(d.pending[:0], d.pending[i:]...)
	return string(d.out), nil
}

// Pending reports whether bytes of an unfinished character are held back.
func (d *StreamDecoder) Pending() bool { return len(d.pending) > 0 }

// Flush ends the stream: an unfinished character is returned as U+FFFD (as
// Decode would), and the decoder is ready for a new stream.
func (d *StreamDecoder) Flush() string {
	if len(d.pending) == 0 {
		return ""
	}
	d.pending = d.pending[:0]
	return string(replacement)
}

var replacement = []byte(string(utf8.RuneError))

// utf8Prefix measures the UTF-8 sequence at the start of b (len(b) > 0): n is
// the length of its longest prefix that is a valid start of a character, and
// complete says whether those n bytes are a whole character. n == 0 means the
// first byte can never start a character.
func utf8Prefix(b []byte) (n int, complete bool) {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // range allowed for the second byte
	switch {
	case c < 0x80:
		return 1, true
	case c >= 0xC2 && c <= 0xDF:
		need = 2
	case c == 0xE0:
		need, lo = 3, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 3
	case c == 0xED:
		need, hi = 3, 0x9F
	case c == 0xF0:
		need, lo = 4, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 4
	case c == 0xF4:
		need, hi = 4, 0x8F
	default:
		return 0, false
	}
	n = 1
	for n < need && n < len(b) {
		x := b[n]
		if n == 1 && (x < lo || x > hi) || n > 1 && (x < 0x80 || x > 0xBF) {
			return n, false
		}
		n++
	}
	return n, n == need
}

// lossyUTF8 appends b to dst with each maximal invalid subsequence replaced
// by U+FFFD: the Unicode "best practice" used by Rust's
// String::from_utf8_lossy and Python's decode("utf-8", "replace").
func lossyUTF8(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		n, complete := utf8Prefix(b[i:])
		if complete {
			dst = append(dst, b[i:i+n]...)
			i += n
			continue
		}
		dst = append(dst, replacement...)
		i += max(n, 1)
	}
	return dst
}

// validUTF8String is strings.ToValidUTF8 with the replacement rule of
// lossyUTF8 (one U+FFFD per maximal invalid subsequence, not per run).
func validUTF8String(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string(lossyUTF8(nil, []byte(s)))
}
