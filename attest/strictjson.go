package attest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of envelopes and statements we accept.
const maxJSONDepth = 64

// decodeStrictJSON unmarshals data into v after checking that data is one
// well-formed JSON value in valid UTF-8, nested at most maxJSONDepth deep,
// in which no object has two keys that are equal ignoring case.
//
// Those checks close parser differentials on signed bytes: encoding/json
// silently keeps the last of duplicate keys, matches field names without
// regard to case, and replaces invalid UTF-8 with U+FFFD, while other
// parsers may keep the first key or reject the document. A signed statement
// must mean one thing to every verifier. Unknown keys are allowed (in-toto
// requires consumers to ignore them).
func decodeStrictJSON(data []byte, v any) error {
	if !utf8.Valid(data) {
		return errors.New("JSON is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walkJSON(dec, 0); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return json.Unmarshal(data, v)
}

func walkJSON(dec *json.Decoder, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("JSON nested deeper than %d levels", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return errors.New("empty JSON document")
		}
		return err
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	switch d {
	case '{':
		seen := make(map[string]string)
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return err
			}
			key, ok := kt.(string)
			if !ok {
				return fmt.Errorf("object key %v is not a string", kt)
			}
			folded := foldKey(key)
			if prev, dup := seen[folded]; dup {
				if prev == key {
					return fmt.Errorf("duplicate object key %q", key)
				}
				return fmt.Errorf("object keys %q and %q differ only in case", prev, key)
			}
			seen[folded] = key
			if err := walkJSON(dec, depth+1); err != nil {
				return err
			}
		}
	case '[':
		for dec.More() {
			if err := walkJSON(dec, depth+1); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unexpected %v", d)
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

// foldKey maps key to a form in which two keys are equal exactly when
// bytes.EqualFold says so, the equivalence encoding/json uses to match
// object keys to struct fields (so "K" and the Kelvin sign U+212A collide).
func foldKey(key string) string {
	var b strings.Builder
	for _, r := range key {
		if r < utf8.RuneSelf {
			b.WriteRune(unicode.ToUpper(r))
			continue
		}
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		b.WriteRune(r)
	}
	return b.String()
}
