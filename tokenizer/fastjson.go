package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// A minimal reader for the two big members of tokenizer.json, model.vocab
// ({"token": id, ...}) and model.merges ([["a", "b"], ...] or ["a b", ...]).
// encoding/json spends most of a 150k-entry load in reflection and
// validation; this reads the same grammar directly and falls back to
// encoding/json for strings with escapes.
type jsonReader struct {
	b       []byte
	pos     int
	scratch []byte
}

func (r *jsonReader) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", r.pos, fmt.Sprintf(format, args...))
}

func (r *jsonReader) skipSpace() {
	for r.pos < len(r.b) && r.b[r.pos] <= ' ' && (r.b[r.pos] == ' ' || r.b[r.pos] == '\n' || r.b[r.pos] == '\t' || r.b[r.pos] == '\r') {
		r.pos++
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

// rawStr reads a string and returns its unescaped bytes: a subslice of the
// input when there is no escape, else r.scratch (valid until the next call).
func (r *jsonReader) rawStr() ([]byte, error) {
	if err := r.expect('"'); err != nil {
		return nil, err
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
				return r.b[start : r.pos-1], nil
			}
			var s string
			if err := json.Unmarshal(r.b[start-1:r.pos], &s); err != nil {
				return nil, r.errorf("bad string: %v", err)
			}
			r.scratch = append(r.scratch[:0], s...)
			return r.scratch, nil
		case c < 0x20:
			return nil, r.errorf("control character in string")
		}
		r.pos++
	}
	return nil, r.errorf("unterminated string")
}

// skipValue skips one JSON value (validated later by encoding/json when it
// is one this package reads).
func (r *jsonReader) skipValue() error {
	depth := 0
	for {
		switch c := r.peek(); c {
		case 0:
			return r.errorf("unexpected end of JSON")
		case '"':
			if _, err := r.rawStr(); err != nil {
				return err
			}
		case '{', '[':
			r.pos++
			depth++
			continue
		case '}', ']':
			if depth == 0 {
				return r.errorf("unexpected %q", c)
			}
			r.pos++
			depth--
		case ',', ':':
			if depth == 0 {
				return r.errorf("unexpected %q", c)
			}
			r.pos++
			continue
		default: // number, true, false, null
			for r.pos < len(r.b) {
				c := r.b[r.pos]
				if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
					break
				}
				r.pos++
			}
		}
		if depth == 0 {
			return nil
		}
	}
}

// splitObject returns the members of a JSON object as raw values; the
// members of a member named in nested are returned too, as "name.member",
// in the same pass.
func splitObject(raw []byte, nested ...string) (map[string]json.RawMessage, error) {
	r := &jsonReader{b: raw}
	out := map[string]json.RawMessage{}
	if err := r.splitInto(out, "", nested); err != nil {
		return nil, err
	}
	if err := r.end(); err != nil {
		return nil, err
	}
	return out, nil
}

func (r *jsonReader) splitInto(out map[string]json.RawMessage, prefix string, nested []string) error {
	if err := r.expect('{'); err != nil {
		return err
	}
	for n := 0; r.peek() != '}'; n++ {
		if n > 0 {
			if err := r.expect(','); err != nil {
				return err
			}
		}
		key, err := r.rawStr()
		if err != nil {
			return err
		}
		name := prefix + string(key)
		if err := r.expect(':'); err != nil {
			return err
		}
		r.skipSpace()
		start := r.pos
		if r.peek() == '{' && slices.Contains(nested, name) {
			err = r.splitInto(out, name+".", nil)
		} else {
			err = r.skipValue()
		}
		if err != nil {
			return fmt.Errorf("%q: %w", name, err)
		}
		out[name] = r.b[start:r.pos]
	}
	r.pos++
	return nil
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

// vocabEntry is a token of model.vocab and its id.
type vocabEntry struct {
	tok string
	id  int32
}

// parseVocab reads model.vocab and returns it with its entry of the largest
// id. The token strings share one allocation.
func parseVocab(raw []byte) (map[string]int32, vocabEntry, error) {
	var top vocabEntry
	r := &jsonReader{b: raw}
	if err := r.expect('{'); err != nil {
		return nil, top, fmt.Errorf("model.vocab: %w", err)
	}
	type entry struct{ start, end, id int32 }
	var entries []entry
	arena := make([]byte, 0, len(raw)/2)
	for r.peek() != '}' {
		if len(entries) > 0 {
			if err := r.expect(','); err != nil {
				return nil, top, fmt.Errorf("model.vocab: %w", err)
			}
		}
		tok, err := r.rawStr()
		if err != nil {
			return nil, top, fmt.Errorf("model.vocab: %w", err)
		}
		start := len(arena)
		arena = append(arena, tok...)
		if err := r.expect(':'); err != nil {
			return nil, top, fmt.Errorf("model.vocab: %w", err)
		}
		id, err := r.integer()
		if err != nil {
			return nil, top, fmt.Errorf("model.vocab[%q]: %w", tok, err)
		}
		if id < 0 || id > maxVocabID {
			return nil, top, fmt.Errorf("model.vocab[%q]: id %d out of range [0, %d]", arena[start:], id, maxVocabID)
		}
		entries = append(entries, entry{int32(start), int32(len(arena)), int32(id)})
	}
	r.pos++
	if err := r.end(); err != nil {
		return nil, top, fmt.Errorf("model.vocab: %w", err)
	}
	all := string(arena)
	vocab := make(map[string]int32, len(entries))
	top.id = -1
	for _, e := range entries {
		tok := all[e.start:e.end]
		if _, dup := vocab[tok]; dup {
			return nil, top, fmt.Errorf("model.vocab: %q appears twice", tok)
		}
		vocab[tok] = e.id
		if e.id > top.id {
			top = vocabEntry{tok, e.id}
		}
	}
	return vocab, top, nil
}

// eachMerge calls f(rank, a, b) for model.merges in either format; null or
// absent is none. a and b are only valid during the call.
func eachMerge(raw []byte, f func(rank int, a, b []byte) error) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	r := &jsonReader{b: raw}
	if err := r.expect('['); err != nil {
		return fmt.Errorf("model.merges: %w", err)
	}
	var first []byte
	for rank := 0; r.peek() != ']'; rank++ {
		if rank > 0 {
			if err := r.expect(','); err != nil {
				return fmt.Errorf("model.merges: %w", err)
			}
		}
		var a, b []byte
		var err error
		switch r.peek() {
		case '[': // tokenizers >= 0.20: ["a", "b"]
			r.pos++
			if a, err = r.rawStr(); err == nil {
				first = append(first[:0], a...) // rawStr may reuse scratch
				a = first
				if err = r.expect(','); err == nil {
					if b, err = r.rawStr(); err == nil {
						err = r.expect(']')
					}
				}
			}
		case '"': // older files: "a b"
			var line []byte
			if line, err = r.rawStr(); err == nil {
				i := bytes.IndexByte(line, ' ')
				if i <= 0 || i == len(line)-1 || bytes.IndexByte(line[i+1:], ' ') >= 0 {
					err = fmt.Errorf("%q: want two tokens separated by one space", line)
				} else {
					a, b = line[:i], line[i+1:]
				}
			}
		default:
			err = r.errorf("want [\"a\", \"b\"] or \"a b\"")
		}
		if err == nil {
			err = f(rank, a, b)
		}
		if err != nil {
			return fmt.Errorf("model.merges[%d]: %w", rank, err)
		}
	}
	r.pos++
	if err := r.end(); err != nil {
		return fmt.Errorf("model.merges: %w", err)
	}
	return nil
}
