package jnf

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxJSONDepth bounds the nesting of every JSON document Tarfa reads
// strictly; Tarfa's own formats nest at most 6 levels.
const MaxJSONDepth = 64

// DecodeJSON decodes data into v with the strict reading that every signed
// or hashed Tarfa format uses (record tables, manifests, golden metadata,
// prompt lines, convert journals): so that two readers can never see two
// different documents in the same bytes, data must be
//
//   - exactly one JSON value (RFC 8259), with nothing but white space after it;
//   - valid UTF-8, with no unpaired surrogate escape (\ud800);
//   - nested at most MaxJSONDepth levels;
//   - free of duplicate object keys, and, in objects decoded into a struct,
//     of keys that are equal ignoring case (encoding/json matches both to
//     the same field);
//   - spelled exactly: every key of an object decoded into a struct is one of
//     its field names, byte for byte (encoding/json alone would accept "Name"
//     for "name" and drop unknown keys).
//
// Errors name the path of the offending key, e.g. `records[3].Kind`.
func DecodeJSON(data []byte, v any) error { return decodeStrict(data, v, modeStrict) }

// DecodeJSONExtensible is DecodeJSON for formats whose specification tells
// consumers to ignore unknown fields (in-toto statements, DSSE envelopes):
// a key no struct field has is skipped, but one that differs from a field's
// name only in case is still an error. Because other implementations decode
// such documents (and the parts this one keeps raw, like predicates) into
// types of their own, keys equal ignoring case are refused in every object.
func DecodeJSONExtensible(data []byte, v any) error { return decodeStrict(data, v, modeExtensible) }

// DecodeForeignJSON is DecodeJSON for the formats Tarfa reads but does not
// define (Hugging Face config.json and model.safetensors.index.json,
// tokenizer.json, tokenizer_config.json, safetensors headers, the JSON
// lines of `tarfa tokenize`): a key no struct field has is skipped, as
// those formats grow fields Tarfa does not use, but every other rule holds.
// The document must pass CheckJSON (one value, valid UTF-8, no duplicate
// key in any object: encoding/json alone keeps the last of two, Python's
// json the last too, other readers the first), and in an object decoded
// into a struct no key may differ from a field's name only in case, nor two
// keys be equal ignoring case (encoding/json matches both to one field).
// Keys of maps and of parts kept raw are compared exactly: a vocabulary
// holds both "A" and "a".
func DecodeForeignJSON(data []byte, v any) error { return decodeStrict(data, v, modeForeign) }

// CheckJSON checks the rules of DecodeJSON that hold whatever the document
// is decoded into: data is exactly one JSON value with nothing but white
// space after it, valid UTF-8 with no unpaired surrogate escape, nested at
// most MaxJSONDepth levels, and no object holds the same key twice. Errors
// give the byte offset and the path of the key.
func CheckJSON(data []byte) error { return decodeStrict(data, nil, modeForeign) }

type jsonMode int

const (
	modeStrict     jsonMode = iota // every key a field's, spelled exactly
	modeExtensible                 // unknown keys skipped; keys equal ignoring case refused in every object
	modeForeign                    // unknown keys skipped; case checked in struct objects only
)

func decodeStrict(data []byte, v any, mode jsonMode) error {
	if !utf8.Valid(data) {
		return fmt.Errorf("JSON is not valid UTF-8 (at byte %d)", invalidUTF8At(data))
	}
	s := &scanner{data: data, foldAll: mode == modeExtensible, unknownOK: mode != modeStrict}
	var t reflect.Type
	if v != nil {
		t = reflect.TypeOf(v)
	}
	s.space()
	if s.pos == len(data) {
		return fmt.Errorf("empty JSON document")
	}
	if err := s.value(t, jpath{}, 0); err != nil {
		return err
	}
	s.space()
	if s.pos != len(data) {
		return fmt.Errorf("trailing data after the JSON value at byte %d", s.pos)
	}
	if v == nil {
		return nil
	}
	if mode != modeStrict {
		return json.Unmarshal(data, v)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// scanner validates a JSON document byte by byte, following the Go type the
// document will be decoded into (nil: any type) to check key spelling.
type scanner struct {
	data      []byte
	pos       int
	foldAll   bool // compare the keys of every object ignoring case
	unknownOK bool // skip keys no struct field has
}

func (s *scanner) errf(format string, a ...any) error {
	return fmt.Errorf("JSON at byte %d: %s", s.pos, fmt.Sprintf(format, a...))
}

func (s *scanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// elemType narrows t to what a JSON value decodes into; nil means "no
// spelling checks below here" (interfaces, json.RawMessage, custom
// unmarshalers).
func elemType(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		if t.Implements(unmarshalerType) {
			return nil
		}
		t = t.Elem()
	}
	if t == nil || t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	return t
}

func (s *scanner) value(t reflect.Type, path jpath, depth int) error {
	if depth > MaxJSONDepth {
		return fmt.Errorf("JSON nested deeper than %d levels at %s", MaxJSONDepth, pathOr(path))
	}
	t = elemType(t)
	if s.pos >= len(s.data) {
		return s.errf("unexpected end of JSON")
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		return s.object(t, path, depth)
	case c == '[':
		return s.array(t, path, depth)
	case c == '"':
		_, err := s.str(false)
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if strings.HasPrefix(string(s.data[s.pos:min(len(s.data), s.pos+5)]), lit) {
				s.pos += len(lit)
				return nil
			}
		}
		return s.errf("invalid character %q looking for a value", c)
	}
}

func pathOr(p jpath) string {
	if p.parent == nil {
		return "the top level"
	}
	return p.String()
}

// jpath is where a value is in the document, rendered only for an error
// (building the path of every key would cost more than the scan).
type jpath struct {
	parent *jpath // nil at the top level
	key    string // of an object member
	index  int    // of an array element, when key is ""
	elem   bool   // an array element
}

func (p jpath) String() string {
	if p.parent == nil {
		return ""
	}
	prefix := p.parent.String()
	if p.elem {
		return fmt.Sprintf("%s[%d]", prefix, p.index)
	}
	if prefix == "" {
		return strconv.Quote(p.key)
	}
	return prefix + "." + strconv.Quote(p.key)
}

func (s *scanner) object(t reflect.Type, path jpath, depth int) error {
	s.pos++ // {
	var fields map[string]reflect.Type
	var folded map[string]string
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields, folded = structFields(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	seen := map[string]string{} // key (case-folded for structs) → key as written
	s.space()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		return nil
	}
	for {
		s.space()
		if s.pos >= len(s.data) || s.data[s.pos] != '"' {
			return s.errf("object key expected at %s", pathOr(path))
		}
		keyAt := s.pos
		key, err := s.str(true)
		if err != nil {
			return err
		}
		kp := jpath{parent: &path, key: key}
		// Keys of a struct-typed object are compared ignoring case (as
		// encoding/json matches them to fields); in extensible formats,
		// which other implementations decode into types of their own, the
		// keys of every object; otherwise exactly (a map keeps "a" and "A"
		// apart).
		f := key
		if fields != nil || s.foldAll {
			f = foldKey(key)
		}
		if prev, dup := seen[f]; dup {
			if prev == key {
				return fmt.Errorf("duplicate object key %s (at byte %d)", kp, keyAt)
			}
			return fmt.Errorf("object keys %q and %q at %s differ only in case (at byte %d)", prev, key, pathOr(path), keyAt)
		}
		seen[f] = key
		sub := elem
		if fields != nil {
			ft, ok := fields[key]
			switch {
			case ok:
				sub = ft
			case folded[foldKey(key)] != "":
				return fmt.Errorf("unknown field %s (keys are case-sensitive: the field is %q)", kp, folded[foldKey(key)])
			case !s.unknownOK:
				return fmt.Errorf("unknown field %s", kp)
			}
		}
		s.space()
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			return s.errf("':' expected after object key %s", kp)
		}
		s.pos++
		s.space()
		if err := s.value(sub, kp, depth+1); err != nil {
			return err
		}
		s.space()
		if s.pos >= len(s.data) {
			return s.errf("unexpected end of JSON in object %s", pathOr(path))
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errf("',' or '}' expected in object %s", pathOr(path))
		}
	}
}

func (s *scanner) array(t reflect.Type, path jpath, depth int) error {
	s.pos++ // [
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	s.space()
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		s.space()
		if err := s.value(elem, jpath{parent: &path, index: i, elem: true}, depth+1); err != nil {
			return err
		}
		s.space()
		if s.pos >= len(s.data) {
			return s.errf("unexpected end of JSON in array %s", pathOr(path))
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errf("',' or ']' expected in array %s", pathOr(path))
		}
	}
}

// str scans a string starting at the opening quote. It returns the decoded
// text when decode is set (object keys).
func (s *scanner) str(decode bool) (string, error) {
	s.pos++ // "
	var b strings.Builder
	start := s.pos
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			if decode {
				b.Write(s.data[start:s.pos])
			}
			s.pos++
			return b.String(), nil
		case c < 0x20:
			return "", s.errf("control character %#x in a string", c)
		case c == '\\':
			if decode {
				b.Write(s.data[start:s.pos])
			}
			r, err := s.escape()
			if err != nil {
				return "", err
			}
			if decode {
				b.WriteRune(r)
			}
			start = s.pos
		default:
			s.pos++
		}
	}
	return "", s.errf("unterminated string")
}

// escape scans one escape sequence at s.pos (the backslash) and returns the
// rune it stands for. Surrogates must come in valid pairs.
func (s *scanner) escape() (rune, error) {
	if s.pos+1 >= len(s.data) {
		return 0, s.errf("unterminated escape")
	}
	c := s.data[s.pos+1]
	s.pos += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, err := s.hex4()
		if err != nil {
			return 0, err
		}
		if !utf16.IsSurrogate(r) {
			return r, nil
		}
		if r < 0xdc00 && s.pos+1 < len(s.data) && s.data[s.pos] == '\\' && s.data[s.pos+1] == 'u' {
			s.pos += 2
			r2, err := s.hex4()
			if err != nil {
				return 0, err
			}
			if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
				return d, nil
			}
		}
		return 0, s.errf("unpaired UTF-16 surrogate escape \\u%04x", r)
	}
	return 0, s.errf("invalid escape \\%c", c)
}

func (s *scanner) hex4() (rune, error) {
	if s.pos+4 > len(s.data) {
		return 0, s.errf("short \\u escape")
	}
	v, err := strconv.ParseUint(string(s.data[s.pos:s.pos+4]), 16, 16)
	if err != nil {
		return 0, s.errf("invalid \\u escape %q", s.data[s.pos:s.pos+4])
	}
	s.pos += 4
	return rune(v), nil
}

// number scans a JSON number (RFC 8259 §6 grammar).
func (s *scanner) number() error {
	d := s.data
	if d[s.pos] == '-' {
		s.pos++
	}
	digits := func() int {
		n := 0
		for s.pos < len(d) && d[s.pos] >= '0' && d[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	if s.pos < len(d) && d[s.pos] == '0' {
		s.pos++
	} else if digits() == 0 {
		return s.errf("invalid number")
	}
	if s.pos < len(d) && d[s.pos] == '.' {
		s.pos++
		if digits() == 0 {
			return s.errf("invalid number: no digits after '.'")
		}
	}
	if s.pos < len(d) && (d[s.pos] == 'e' || d[s.pos] == 'E') {
		s.pos++
		if s.pos < len(d) && (d[s.pos] == '+' || d[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			return s.errf("invalid number: no digits in the exponent")
		}
	}
	return nil
}

// structFields maps a struct type's JSON field names (as encoding/json
// sees them, embedded structs flattened) to their types, and case-folded
// names to the names.
func structFields(t reflect.Type) (map[string]reflect.Type, map[string]string) {
	if c, ok := fieldCache.Load(t); ok {
		f := c.(*fieldSet)
		return f.types, f.folded
	}
	f := &fieldSet{types: map[string]reflect.Type{}, folded: map[string]string{}}
	collectFields(t, f, 0)
	fieldCache.Store(t, f)
	return f.types, f.folded
}

type fieldSet struct {
	types  map[string]reflect.Type
	folded map[string]string
}

var fieldCache sync.Map // reflect.Type → *fieldSet

func collectFields(t reflect.Type, f *fieldSet, depth int) {
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			et := sf.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct && depth < 8 {
				collectFields(et, f, depth+1)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if _, ok := f.types[name]; !ok {
			f.types[name] = sf.Type
			f.folded[foldKey(name)] = name
		}
	}
}

// foldKey maps key to a form in which two keys are equal exactly when
// bytes.EqualFold says so, the equivalence encoding/json uses to match
// object keys to struct fields (so "K" and the Kelvin sign U+212A collide).
func foldKey(key string) string {
	var b strings.Builder
	for _, r := range key {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}
