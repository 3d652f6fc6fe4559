package jnf

import (
	"encoding/json"
	"strings"
	"testing"
)

type strictInner struct {
	Name string `json:"name"`
	N    int    `json:"n,omitempty"`
}

type strictOuter struct {
	strictInner
	Items []strictInner            `json:"items"`
	Map   map[string]strictInner   `json:"map,omitempty"`
	Raw   json.RawMessage          `json:"raw,omitempty"`
	Any   any                      `json:"any,omitempty"`
	Skip  string                   `json:"-"`
	Deep  map[string][]strictInner `json:"deep,omitempty"`
}

func TestDecodeJSONStrict(t *testing.T) {
	good := `{"name":"a","n":1,"items":[{"name":"b"}],"map":{"x":{"name":"c"}},"raw":{"Any":1,"any":2},"any":{"z":[1,2]},"deep":{"k":[{"name":"d","n":2}]}}`
	var v strictOuter
	if err := DecodeJSON([]byte(good), &v); err != nil {
		t.Fatalf("valid document: %v", err)
	}
	if v.Name != "a" || v.Items[0].Name != "b" || v.Map["x"].Name != "c" || v.Deep["k"][0].N != 2 {
		t.Fatalf("decoded %+v", v)
	}
	for _, c := range []struct{ doc, want string }{
		{`{"name":"a","name":"b","items":[]}`, `duplicate object key "name"`},
		{`{"name":"a","Name":"b","items":[]}`, `differ only in case`},
		{`{"Name":"a","items":[]}`, `unknown field "Name" (keys are case-sensitive: the field is "name")`},
		{"{\"name\":\"a\",\"items\":[{\"name\":\"b\",\"\u212a\":1}]}", `unknown field`},
		{`{"name":"a","items":[{"name":"b","NAME":"c"}]}`, `"items"[0]`},
		{`{"name":"a","items":[{"nam":"b"}]}`, `unknown field "items"[0]."nam"`},
		{`{"name":"a","map":{"x":{"Name":"c"}}}`, `"map"."x"."Name"`},
		{`{"name":"a","map":{"x":{},"x":{}}}`, `duplicate object key "map"."x"`},
		{`{"name":"a","any":{"k":1,"k":2}}`, `duplicate object key "any"."k"`},
		{`{"name":"a","items":[]}]`, `trailing data`},
		{`{"name":"a","items":[]}}`, `trailing data`},
		{`{"name":"a","items":[]} {}`, `trailing data`},
		{`{"name":"\ud800","items":[]}`, `unpaired UTF-16 surrogate`},
		{`{"name":"\udc00\ud800","items":[]}`, `unpaired UTF-16 surrogate`},
		{"{\"name\":\"\xff\",\"items\":[]}", `not valid UTF-8`},
		{`{"name":"a","items":[],"Skip":"x"}`, `unknown field "Skip"`},
		{``, `empty JSON document`},
		{`{"name":"a",}`, `object key expected`},
		{`{"name":01}`, `',' or '}' expected`},
		{`{"name":"a","any":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, `nested deeper than 64`},
	} {
		var v strictOuter
		err := DecodeJSON([]byte(c.doc), &v)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant an error containing %q", c.doc, err, c.want)
		}
	}
	// A paired surrogate escape is fine, and the embedded struct's fields
	// are the outer object's fields.
	if err := DecodeJSON([]byte(`{"name":"\ud83d\ude00","items":null}`), &v); err != nil || v.Name != "😀" {
		t.Errorf("surrogate pair: %v %q", err, v.Name)
	}
}

func TestDecodeJSONExtensible(t *testing.T) {
	var v strictInner
	if err := DecodeJSONExtensible([]byte(`{"name":"a","future":{"x":1}}`), &v); err != nil || v.Name != "a" {
		t.Fatalf("unknown field in an extensible format: %v", err)
	}
	for _, doc := range []string{`{"Name":"a"}`, `{"name":"a","future":1,"future":2}`, `{"name":"a"}]`} {
		if err := DecodeJSONExtensible([]byte(doc), &v); err == nil {
			t.Errorf("%s accepted", doc)
		}
	}
}

// FuzzDecodeJSON checks that the strict reading is never more lenient than
// encoding/json's syntax and that what it accepts decodes the same way.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"name":"a","items":[{"name":"b","n":3}]}`, `{"name":"a","name":"a"}`, `{"Name":"x"}`,
		`[1,2]`, `{"name":"\u00e9\ud83d\ude00"}`, `{"name":"a"}]`, `{"any":{"k":[true,false,null,-1.5e3]}}`, `{"raw":{"A":1,"a":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var strict strictOuter
		if err := DecodeJSON(data, &strict); err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("strict decoder accepted invalid JSON %q", data)
		}
		var loose strictOuter
		if err := json.Unmarshal(data, &loose); err != nil {
			t.Fatalf("strict accepted what encoding/json refuses: %q: %v", data, err)
		}
		a, _ := json.Marshal(strict)
		b, _ := json.Marshal(loose)
		if string(a) != string(b) {
			t.Fatalf("decoded differently: %s vs %s", a, b)
		}
	})
}

func TestDecodeJSONExtensibleFoldsEveryObject(t *testing.T) {
	var v struct {
		Predicate json.RawMessage `json:"predicate"`
	}
	if err := DecodeJSONExtensible([]byte(`{"predicate":{"a":1,"A":2}}`), &v); err == nil || !strings.Contains(err.Error(), "differ only in case") {
		t.Errorf("case-variant keys in a raw part of a signed document: %v", err)
	}
	if err := DecodeJSON([]byte(`{"predicate":{"a":1,"A":2}}`), &v); err != nil {
		t.Errorf("strict (non-extensible) format keeps map keys exact: %v", err)
	}
}
