package jnf

import (
	"strings"
	"testing"
)

// TestCheckJSONAndForeign: the rules every JSON input follows (CheckJSON),
// and DecodeForeignJSON's reading of formats Tarfa does not define:
// unknown keys skipped, but no key twice anywhere, no key matching a field
// only ignoring case, valid UTF-8; keys of maps compared exactly.
func TestCheckJSONAndForeign(t *testing.T) {
	type cfg struct {
		Layers *int           `json:"num_hidden_layers"`
		Vocab  map[string]int `json:"vocab"`
	}
	good := `{"num_hidden_layers": 4, "unused": {"x": 1}, "vocab": {"A": 1, "a": 2}}`
	if err := CheckJSON([]byte(good)); err != nil {
		t.Fatalf("CheckJSON: %v", err)
	}
	var c cfg
	if err := DecodeForeignJSON([]byte(good), &c); err != nil || *c.Layers != 4 || c.Vocab["a"] != 2 {
		t.Fatalf("DecodeForeignJSON: %+v, %v", c, err)
	}
	for _, tc := range []struct{ doc, want string }{
		{`{"num_hidden_layers": 4, "num_hidden_layers": 5}`, `duplicate object key "num_hidden_layers" (at byte 25)`},
		{`{"num_hidden_layers": 4, "Num_Hidden_Layers": 5}`, `differ only in case (at byte 25)`},
		{`{"Num_Hidden_Layers": 5}`, `the field is "num_hidden_layers"`},
		{`{"unused": {"k": 1, "k": 2}}`, `duplicate object key "unused"."k"`},
		{`{"vocab": {"a": 1, "a": 2}}`, `duplicate object key "vocab"."a"`},
		{"{\"vocab\": {\"\xff\": 1}}", `not valid UTF-8 (at byte 12)`},
		{`{"vocab": {"\ud800": 1}}`, `unpaired UTF-16 surrogate`},
		{`{"num_hidden_layers": 4} {}`, `trailing data`},
	} {
		var c cfg
		err := DecodeForeignJSON([]byte(tc.doc), &c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeForeignJSON(%s): %v, want %q", tc.doc, err, tc.want)
		}
		// The type-free check: the same, except the rules of struct fields.
		err = CheckJSON([]byte(tc.doc))
		if typed := strings.Contains(tc.want, "case") || strings.Contains(tc.want, "the field"); typed != (err == nil) || !typed && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckJSON(%s): %v", tc.doc, err)
		}
	}
}
