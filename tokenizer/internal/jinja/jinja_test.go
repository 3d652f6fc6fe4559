package jinja

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

type goldenFile struct {
	Vars  json.RawMessage `json:"vars"`
	Cases []struct {
		Name     string  `json:"name"`
		Template string  `json:"template"`
		Want     *string `json:"want"`
		Error    string  `json:"error"`
	} `json:"cases"`
}

// hfOptions are the Environment settings of transformers' chat templates.
var hfOptions = Options{TrimBlocks: true, LStripBlocks: true}

// TestJinja2Goldens renders every case of testdata/jinja_goldens.json (made
// by testdata/gen_goldens.py with Python Jinja2 3.1.2) and compares bytes.
// Cases where Jinja2 raised must fail here too.
func TestJinja2Goldens(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "jinja_goldens.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g goldenFile
	if err := json.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	vars, err := FromJSON(g.Vars)
	if err != nil {
		t.Fatal(err)
	}
	env := Env{Vars: map[string]Value{}, Now: time.Date(2025, 3, 7, 14, 5, 9, 0, time.UTC)}
	d := vars.(*Dict)
	for i, k := range d.Keys() {
		env.Vars[k.(string)] = d.vals[i]
	}
	if len(g.Cases) < 50 {
		t.Fatalf("only %d golden cases", len(g.Cases))
	}
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			tmpl, err := Parse(c.Template, hfOptions)
			var got string
			if err == nil {
				got, err = tmpl.Render(env)
			}
			if c.Want == nil {
				if err == nil {
					t.Fatalf("rendered %q; Jinja2 raised %s", got, c.Error)
				}
				t.Logf("error as expected: %v (Jinja2: %s)", err, c.Error)
				return
			}
			if err != nil {
				t.Fatalf("error %v; want %q", err, *c.Want)
			}
			if got != *c.Want {
				t.Fatalf("template %q\n got  %q\n want %q", c.Template, got, *c.Want)
			}
		})
	}
}
