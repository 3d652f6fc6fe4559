package jnf

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// topLevelKeys lists the keys of a JSON object in document order.
func topLevelKeys(t *testing.T, doc []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %v %v\n%s", tok, err, doc)
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// TestSpecRecordFieldOrder checks that SPEC.md's record examples list the
// fields in the order the writer puts them.
func TestSpecRecordFieldOrder(t *testing.T) {
	spec, err := os.ReadFile("SPEC.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```json\n(\\{\"kind\": \"(tensor|expert)\".*?)```").FindAllSubmatch(spec, -1)
	if len(blocks) != 2 {
		t.Fatalf("found %d record examples in SPEC.md, want 2", len(blocks))
	}
	part := Part{Name: "gate_proj", DType: BF16, Shape: []int64{2, 2}, Length: 8, Source: SourceRange{File: "s", Length: 8}}
	written := map[string]Record{
		"tensor": {Kind: KindTensor, Name: "t", Expert: -1, DType: BF16, Shape: []int64{2}, Length: 4, Source: []SourceRange{{File: "s", Length: 4}}},
		"expert": {Kind: KindExpert, Name: "e", Parts: []Part{part, part, part}, Length: 24},
	}
	for _, b := range blocks {
		kind := string(b[2])
		example := strings.NewReplacer("{…}", "{}", "…", "").Replace(string(b[1]))
		enc, err := json.Marshal(written[kind])
		if err != nil {
			t.Fatal(err)
		}
		got, want := strings.Join(topLevelKeys(t, []byte(example)), ","), strings.Join(topLevelKeys(t, enc), ",")
		if got != want {
			t.Errorf("SPEC.md's %s record lists fields %s; the writer writes %s", kind, got, want)
		}
	}
}
