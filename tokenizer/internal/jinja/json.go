package jinja

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"
)

// FromJSON decodes one JSON value into template values the way Python's
// json.loads does: objects keep their key order, integers stay integers (up
// to CPython's 4300 digits), numbers with a fraction or exponent become
// floats. Arrays and objects may nest DefaultDepth deep.
func FromJSON(data []byte) (Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("invalid JSON: data after the value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	return decodeFrom(dec, tok, depth)
}

func decodeFrom(dec *json.Decoder, tok json.Token, depth int) (Value, error) {
	switch t := tok.(type) {
	case nil, bool, string:
		return t, nil
	case json.Number:
		return jsonNumber(string(t))
	case json.Delim:
		if depth >= DefaultDepth {
			return nil, fmt.Errorf("invalid JSON: arrays and objects nested deeper than %d", DefaultDepth)
		}
		switch t {
		case '[':
			l := &List{Items: []Value{}}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l.Items = append(l.Items, v)
			}
			_, err := dec.Token()
			return l, err
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("invalid JSON object key %v", kt)
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if err := d.Set(k, v); err != nil {
					return nil, err
				}
			}
			_, err := dec.Token()
			return d, err
		}
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

func jsonNumber(s string) (Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		if len(strings.TrimPrefix(s, "-")) > maxIntDigits {
			return nil, fmt.Errorf("invalid JSON number of %d digits: %w", len(s), errIntDigits)
		}
		b, ok := new(big.Int).SetString(s, 10)
		if !ok {
			return nil, fmt.Errorf("invalid JSON number %q", s)
		}
		return b, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !isRangeErr(err) {
		return nil, fmt.Errorf("invalid JSON number %q", s)
	}
	return f, nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
