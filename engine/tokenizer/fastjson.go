package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// A minimal reader for the two big members of tokenizer.json, model.vocab
// ({"token": id, ...}) and model.merges ([["a", "b"], ...] or ["a b", ...]).
// encoding/json spends most of a 150k-entry load in reflection and
// validation; this reads the same grammar directly and falls back to
// encoding/json for strings with escapes.
type jsonReader struct {
	b   []byte
	pos int
}

func (r *jsonReader) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", r.pos, fmt.Sprintf(format, args...))
}

func (r *jsonReader) skipSpace() {
	for r.pos < len(r.b) {
		switch r.b[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// expect consumes c (after whitespace) or fails.
func (r *jsonReader) expect(c byte) error {
	r.skipSpace()
	if r.pos >= len(r.b) || r.b[r.pos] != c {
		return r.errorf("want %q", c)
	}
	r.pos++
	return nil
}

// peek returns the next non-space byte without consuming it (0 at the end).
func (r *jsonReader) peek() byte {
	r.skipSpace()
	if r.pos >= len(r.b) {
		return 0
	}
	return r.b[r.pos]
}

func (r *jsonReader) str() (string, error) {
	if err := r.expect('"'); err != nil {
		return "", err
	}
	start := r.pos
	escaped := false
	for r.pos < len(r.b) {
		switch c := r.b[r.pos]; {
		case c == '\\':
			escaped = true
			r.pos += 2
			continue
		case c == '"':
			r.pos++
			if !escaped {
				return string(r.b[start : r.pos-1]), nil
			}
			var s string
			if err := json.Unmarshal(r.b[start-1:r.pos], &s); err != nil {
				return "", r.errorf("bad string: %v", err)
			}
			return s, nil
		case c < 0x20:
			return "", r.errorf("control character in string")
		}
		r.pos++
	}
	return "", r.errorf("unterminated string")
}

func (r *jsonReader) integer() (int64, error) {
	r.skipSpace()
	start := r.pos
	if r.pos < len(r.b) && r.b[r.pos] == '-' {
		r.pos++
	}
	for r.pos < len(r.b) && r.b[r.pos] >= '0' && r.b[r.pos] <= '9' {
		r.pos++
	}
	n, err := strconv.ParseInt(string(r.b[start:r.pos]), 10, 64)
	if err != nil {
		return 0, r.errorf("want an integer")
	}
	return n, nil
}

func (r *jsonReader) end() error {
	r.skipSpace()
	if r.pos != len(r.b) {
		return r.errorf("data after the value")
	}
	return nil
}

// parseVocab reads model.vocab.
func parseVocab(raw []byte) (map[string]int32, error) {
	r := &jsonReader{b: raw}
	if err := r.expect('{'); err != nil {
		return nil, fmt.Errorf("model.vocab: %w", err)
	}
	vocab := make(map[string]int32, len(raw)/16)
	for r.peek() != '}' {
		if len(vocab) > 0 {
			if err := r.expect(','); err != nil {
				return nil, fmt.Errorf("model.vocab: %w", err)
			}
		}
		tok, err := r.str()
		if err != nil {
			return nil, fmt.Errorf("model.vocab: %w", err)
		}
		if err := r.expect(':'); err != nil {
			return nil, fmt.Errorf("model.vocab: %w", err)
		}
		id, err := r.integer()
		if err != nil {
			return nil, fmt.Errorf("model.vocab[%q]: %w", tok, err)
		}
		if id < 0 || id > maxVocabID {
			return nil, fmt.Errorf("model.vocab[%q]: id %d out of range [0, %d]", tok, id, maxVocabID)
		}
		if _, dup := vocab[tok]; dup {
			return nil, fmt.Errorf("model.vocab: %q appears twice", tok)
		}
		vocab[tok] = int32(id)
	}
	r.pos++
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("model.vocab: %w", err)
	}
	return vocab, nil
}

// parseMerges reads model.merges in either format; null or absent is none.
func parseMerges(raw []byte) ([][2]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	r := &jsonReader{b: raw}
	if err := r.expect('['); err != nil {
		return nil, fmt.Errorf("model.merges: %w", err)
	}
	pairs := make([][2]string, 0, len(raw)/20)
	for r.peek() != ']' {
		if len(pairs) > 0 {
			if err := r.expect(','); err != nil {
				return nil, fmt.Errorf("model.merges: %w", err)
			}
		}
		var p [2]string
		var err error
		switch r.peek() {
		case '[': // tokenizers >= 0.20: ["a", "b"]
			r.pos++
			if p[0], err = r.str(); err == nil {
				if err = r.expect(','); err == nil {
					if p[1], err = r.str(); err == nil {
						err = r.expect(']')
					}
				}
			}
		case '"': // older files: "a b"
			var line string
			if line, err = r.str(); err == nil {
				var ok bool
				if p[0], p[1], ok = bytesCut(line); !ok {
					err = errors.New("want two tokens separated by one space")
				}
			}
		default:
			err = r.errorf("want [\"a\", \"b\"] or \"a b\"")
		}
		if err != nil {
			return nil, fmt.Errorf("model.merges[%d]: %w", len(pairs), err)
		}
		pairs = append(pairs, p)
	}
	r.pos++
	if err := r.end(); err != nil {
		return nil, fmt.Errorf("model.merges: %w", err)
	}
	return pairs, nil
}
