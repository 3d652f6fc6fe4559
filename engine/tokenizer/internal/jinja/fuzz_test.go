package jinja

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzTemplate parses and renders arbitrary templates: errors are fine,
// panics and hangs are not.
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
		if len(src) > 4096 || strings.Count(src, "range") > 2 {
			return // keep each run short
		}
		tmpl, err := Parse(src, hfOptions)
		if err != nil {
			return
		}
		_, _ = tmpl.Render(env)
	})
}
