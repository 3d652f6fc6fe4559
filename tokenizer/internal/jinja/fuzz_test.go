package jinja

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fuzzLimits keep one fuzz execution cheap: whatever the template, it ends
// within a few milliseconds.
var fuzzLimits = smallLimits

// FuzzTemplate parses and renders arbitrary templates with small limits:
// errors are fine, panics and hangs are not, a *LimitError names one of the
// limits, and a template that renders within the small limits renders the
// same with the default ones (limits refuse, they never change the output). The hostile shapes of limits_test.go are committed as seeds
// under testdata/fuzz/FuzzTemplate (TestFuzzCorpusHasHostileShapes).
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{
		"{{ x }}", "{% for m in messages %}{{ m.role }}{% endfor %}", "{%- if a -%}b{% else %}c{% endif %}",
		"{{ 'a' ~ 1 + 2 | string }}", "{% set ns = namespace(a=1) %}{% set ns.a = ns.a + 1 %}{{ ns.a }}",
		"{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}", "{{ messages[::-1] | tojson(indent=2) }}",
		"{# c #}{% raw %}{{{% endraw %}", "{{ (1, 2) }}{{ [1, {'a': none}] }}", "{{ x.y.z }}", "{{ 1 / 0 }}",
		"{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", "{% for i in range(1000000000) %}{% endfor %}",
	} {
		f.Add(s)
	}
	if data, err := os.ReadFile(filepath.Join("..", "..", "qwen3_chat_template.jinja")); err == nil {
		f.Add(string(data))
	}
	vars, err := FromJSON([]byte(`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>x</think>y", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}], "tools": [{"type": "function"}], "add_generation_prompt": true, "x": {"y": [1, 2.5, "s"]}}`))
	if err != nil {
		f.Fatal(err)
	}
	env := Env{Vars: map[string]Value{}, Now: time.Unix(0, 0).UTC()}
	d := vars.(*Dict)
	for i, k := range d.Keys() {
		env.Vars[k.(string)] = d.vals[i]
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 1<<16 {
			return // the parse budget refuses long ones anyway; keep mutation quick
		}
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				panic(fmt.Sprintf("FuzzTemplate hangs on %q", src))
			}
		}()
		opt := Options{TrimBlocks: true, LStripBlocks: true, Limits: fuzzLimits}
		tmpl, err := Parse(src, opt)
		if err != nil {
			checkFuzzError(t, err)
			return
		}
		out, err := tmpl.Render(env)
		if err != nil {
			checkFuzzError(t, err)
			return
		}
		opt.Limits = Limits{}
		big, err := Parse(src, opt)
		if err != nil {
			t.Fatalf("parses with %+v but not with the defaults: %v", fuzzLimits, err)
		}
		if again, err := big.Render(env); err != nil || again != out {
			t.Fatalf("renders %q with %+v, but %q, %v with the defaults", out, fuzzLimits, again, err)
		}
	})
}

// checkFuzzError checks that a *LimitError is about one of fuzzLimits and
// names what went over it.
func checkFuzzError(t *testing.T, err error) {
	var le *LimitError
	if !errors.As(err, &le) {
		return
	}
	if max := limitOf(fuzzLimits, le.Limit); le.Max != max || le.Op == "" {
		t.Fatalf("%v: Limit %q, Max %d, Op %q; want one of %+v", err, le.Limit, le.Max, le.Op, fuzzLimits)
	}
}

var updateCorpus = flag.Bool("update-corpus", false, "write the hostile shapes into testdata/fuzz/FuzzTemplate")

// TestFuzzCorpusHasHostileShapes checks that every hostile shape (in its
// small form) is a committed FuzzTemplate seed, so that fuzzing starts from
// the inputs that used to crash. -update-corpus writes them.
func TestFuzzCorpusHasHostileShapes(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzTemplate")
	for _, c := range hostile {
		src := c.small
		if src == "" {
			src = c.src
		}
		if len(src) > 1<<16 {
			t.Errorf("%s: a %d-byte seed is longer than FuzzTemplate takes", c.name, len(src))
			continue
		}
		path := filepath.Join(dir, "hostile-"+strings.NewReplacer(" ", "-", "*", "x", "'", "").Replace(c.name))
		data := []byte("go test fuzz v1\nstring(" + strconv.Quote(src) + ")\n")
		if *updateCorpus {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s is missing or stale (%v); run go test -run TestFuzzCorpusHasHostileShapes -update-corpus", path, err)
		}
	}
}
