package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// The tags of the XML-parameter form (ToolXML).
const (
	xmlFunction      = "<function="
	xmlFunctionEnd   = "</function>"
	xmlParameter     = "<parameter="
	xmlParameterEnd  = "</parameter>"
	xmlMaxNameLength = 256 // bytes of a function or parameter name
)

// xmlParam is one parameter of a call in the XML form, its value as
// written less the newline the format adds at each end.
type xmlParam struct {
	key, value string
}

// scanXMLFunction reads <function=NAME>, its parameters and </function>
// from the start of s and returns how many bytes they take. Between the
// elements only whitespace may stand. It reads each byte of s a bounded
// number of times.
func scanXMLFunction(s string) (name string, params []xmlParam, n int, err error) {
	if !strings.HasPrefix(s, xmlFunction) {
		return "", nil, 0, errors.New("want <function=")
	}
	pos := len(xmlFunction)
	if name, err = xmlName(s[pos:]); err != nil {
		return "", nil, 0, fmt.Errorf("function name: %w", err)
	}
	pos += len(name) + 1
	for {
		pos = skipSpace(s, pos)
		rest := s[pos:]
		if strings.HasPrefix(rest, xmlFunctionEnd) {
			return name, params, pos + len(xmlFunctionEnd), nil
		}
		if !strings.HasPrefix(rest, xmlParameter) {
			return "", nil, 0, fmt.Errorf("at byte %d: want %s or %s", pos, xmlParameter, xmlFunctionEnd)
		}
		pos += len(xmlParameter)
		key, err := xmlName(s[pos:])
		if err != nil {
			return "", nil, 0, fmt.Errorf("parameter name: %w", err)
		}
		pos += len(key) + 1
		end := parameterEnd(s, pos)
		if end < 0 {
			return "", nil, 0, fmt.Errorf("parameter %q: no %s followed by %s or %s", key, xmlParameterEnd, xmlParameter, xmlFunctionEnd)
		}
		v := strings.TrimPrefix(s[pos:end], "\n")
		v = strings.TrimSuffix(v, "\n")
		params = append(params, xmlParam{key, v})
		pos = end + len(xmlParameterEnd)
	}
}

// xmlName is the name that s starts with, up to the '>' that ends it: not
// empty, at most xmlMaxNameLength bytes, without '<' or a line break.
func xmlName(s string) (string, error) {
	i := strings.IndexByte(s[:min(len(s), xmlMaxNameLength+1)], '>')
	switch {
	case i < 0:
		return "", fmt.Errorf("no '>' in the first %d bytes", xmlMaxNameLength+1)
	case i == 0:
		return "", errors.New("empty")
	case strings.ContainsAny(s[:i], "<\r\n"):
		return "", fmt.Errorf("%.40q is not a name", s[:i])
	}
	return s[:i], nil
}

// parameterEnd is the index of the </parameter> that ends a value starting
// at s[from:]: the first one followed, past whitespace, by the next
// parameter or by the end of the function (a value may hold the tag as
// text); -1 if there is none.
func parameterEnd(s string, from int) int {
	for {
		i := strings.Index(s[from:], xmlParameterEnd)
		if i < 0 {
			return -1
		}
		i += from
		after := s[skipSpace(s, i+len(xmlParameterEnd)):]
		if strings.HasPrefix(after, xmlParameter) || strings.HasPrefix(after, xmlFunctionEnd) {
			return i
		}
		from = i + len(xmlParameterEnd)
	}
}

// skipSpace is the index of the first byte of s at or after i that does not
// start a whitespace character.
func skipSpace(s string, i int) int {
	return len(s) - len(strings.TrimLeftFunc(s[i:], unicode.IsSpace))
}

// parseXMLCall parses the inside of a block in the XML form into a call
// whose arguments are a JSON object, each value converted by the type its
// tool declares (see SplitToolCalls).
func parseXMLCall(inner string, types toolTypes) (FunctionCall, error) {
	s := strings.TrimLeftFunc(inner, unicode.IsSpace)
	name, params, n, err := scanXMLFunction(s)
	if err != nil {
		return FunctionCall{}, err
	}
	if strings.TrimSpace(s[n:]) != "" {
		return FunctionCall{}, fmt.Errorf("text after %s", xmlFunctionEnd)
	}
	fn := types[name]
	seen := make(map[string]bool, len(params))
	var b bytes.Buffer
	b.WriteByte('{')
	for i, p := range params {
		if seen[p.key] {
			return FunctionCall{}, fmt.Errorf("parameter %q given twice", p.key)
		}
		seen[p.key] = true
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, p.key)
		b.WriteByte(':')
		writeArgument(&b, p.value, fn[p.key])
	}
	b.WriteByte('}')
	return FunctionCall{Name: name, Arguments: b.String()}, nil
}

// jsonType is a set of JSON schema types.
type jsonType uint8

const (
	typeString jsonType = 1 << iota
	typeNull
	typeBoolean
	typeInteger
	typeNumber
	typeObject
	typeArray
)

var typeNames = map[string]jsonType{
	"string": typeString, "null": typeNull, "boolean": typeBoolean, "integer": typeInteger,
	"number": typeNumber, "object": typeObject, "array": typeArray,
}

// toolTypes are the declared types of the request's tools' parameters, by
// function and parameter name.
type toolTypes map[string]map[string]jsonType

// paramTypes reads the parameter types of tools (checked by ParseChat to
// be function tools with a name). What a schema does not say clearly is
// left out: such values stay strings. A second tool of the same name is
// ignored.
func paramTypes(tools []json.RawMessage) toolTypes {
	out := toolTypes{}
	for _, raw := range tools {
		var tool struct {
			Function struct {
				Name       string `json:"name"`
				Parameters struct {
					Properties map[string]json.RawMessage `json:"properties"`
				} `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &tool) != nil {
			continue
		}
		name := tool.Function.Name
		if _, dup := out[name]; dup || name == "" {
			continue
		}
		params := map[string]jsonType{}
		for k, schema := range tool.Function.Parameters.Properties {
			if t := schemaType(schema); t != 0 {
				params[k] = t
			}
		}
		out[name] = params
	}
	return out
}

// schemaType is the set of types a parameter's schema declares: its
// "type" (a name or a list of names) and the "type" of each of its
// "anyOf" and "oneOf" alternatives.
func schemaType(raw json.RawMessage) jsonType {
	var s struct {
		Type  json.RawMessage   `json:"type"`
		AnyOf []json.RawMessage `json:"anyOf"`
		OneOf []json.RawMessage `json:"oneOf"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return 0
	}
	t := typeOf(s.Type)
	for _, alt := range append(s.AnyOf, s.OneOf...) {
		var a struct {
			Type json.RawMessage `json:"type"`
		}
		if json.Unmarshal(alt, &a) == nil {
			t |= typeOf(a.Type)
		}
	}
	return t
}

// typeOf reads a schema's "type": a name or a list of names.
func typeOf(raw json.RawMessage) jsonType {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return typeNames[one]
	}
	var names []string
	var t jsonType
	if json.Unmarshal(raw, &names) == nil {
		for _, n := range names {
			t |= typeNames[n]
		}
	}
	return t
}

var (
	jsonInteger = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)$`)
	jsonNumber  = regexp.MustCompile(`^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$`)
)

// writeArgument writes the JSON of a value the model wrote as text v, for
// a parameter of type t (see SplitToolCalls).
func writeArgument(b *bytes.Buffer, v string, t jsonType) {
	s := strings.TrimSpace(v)
	switch {
	case t&typeNull != 0 && (strings.EqualFold(s, "null") || strings.EqualFold(s, "none")):
		b.WriteString("null")
	case t == 0 || t&typeString != 0:
		writeJSONString(b, v)
	case t&typeBoolean != 0 && strings.EqualFold(s, "true"):
		b.WriteString("true")
	case t&typeBoolean != 0 && strings.EqualFold(s, "false"):
		b.WriteString("false")
	case t&typeInteger != 0 && jsonInteger.MatchString(s),
		t&typeNumber != 0 && jsonNumber.MatchString(s):
		b.WriteString(s)
	case t&typeObject != 0 && strings.HasPrefix(s, "{") && json.Valid([]byte(s)),
		t&typeArray != 0 && strings.HasPrefix(s, "[") && json.Valid([]byte(s)):
		json.Compact(b, []byte(s)) // valid: cannot fail
	default:
		writeJSONString(b, v)
	}
}

// writeJSONString writes s as a JSON string, without escaping HTML (the
// arguments are text for a program, not for a page).
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string: cannot fail
	b.Truncate(b.Len() - 1)
}
