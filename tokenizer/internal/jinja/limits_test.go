package jinja

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hostileCase is a template that tries to take the process down: a Go
// panic, memory the runtime cannot recover from, a stack overflow or a
// hang. Each must end in a *LimitError naming the limit it went over, both
// with DefaultLimits (src) and with smallLimits (small, the same shape
// scaled down; "" for src itself).
type hostileCase struct {
	name       string
	src, small string
	limit      string // the Limits field it exceeds
	op         string // in the error: what went over the limit
}

// hostile are the shapes of the bugs this interpreter had (each one a crash
// or a hang before the budget existed) and the other ways the budget closes.
var hostile = []hostileCase{
	// Go panics.
	{"repeat overflow", "{{ 'abcd' * 2**62 }}", "", "Bytes", "'*' on str"},
	{"indent 2**63-1", "{{ 'a\nb'|indent(2**63-1) }}", "", "Bytes", "filter indent"},
	{"replace makeslice",
		"{% set s = 'a' * 10000000 %}{% set t = 'b' * 100000000 %}{{ s|replace('a', t) }}",
		"{% set s = 'a' * 2000 %}{% set t = 'b' * 2000 %}{{ s|replace('a', t) }}", "Bytes", "filter replace"},
	{"str.replace makeslice",
		"{% set s = 'a' * 10000000 %}{% set t = 'b' * 100000000 %}{{ s.replace('a', t) }}",
		"{% set s = 'a' * 2000 %}{% set t = 'b' * 2000 %}{{ s.replace('a', t) }}", "Bytes", "str.replace"},
	// Fatal out-of-memory.
	{"indent 1e12", "{{ 'a\nb'|indent(1000000000000) }}", "", "Bytes", "filter indent"},
	{"indent lines",
		"{% set s = '\n' * 1000000 %}{% set w = ' ' * 1000 %}{{ s|indent(w, blank=true) }}",
		"{% set s = '\n' * 2000 %}{% set w = ' ' * 1000 %}{{ s|indent(w, blank=true) }}", "Bytes", "filter indent"},
	{"tojson indent 1e12", "{{ [1, [2]]|tojson(indent=1000000000000) }}", "", "Bytes", "filter tojson"},
	{"tojson indent per level",
		"{% set w = ' ' * 1000000 %}{{ " + strings.Repeat("[", 30) + "1" + strings.Repeat("]", 30) + "|tojson(indent=w) }}",
		"{% set w = ' ' * 10000 %}{{ " + strings.Repeat("[", 30) + "1" + strings.Repeat("]", 30) + "|tojson(indent=w) }}", "Bytes", "filter tojson"},
	{"join 1M copies of 60 MB",
		"{{ (['x' * 60000000] * 1000000)|join }}",
		"{{ (['x' * 10000] * 30)|join }}", "Bytes", "filter join"},
	{"str.join copies",
		"{{ ''.join(['x' * 60000000] * 1000000) }}",
		"{{ ''.join(['x' * 10000] * 30) }}", "Bytes", "str.join"},
	{"string doubling", "{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "", "Bytes", "'+'"},
	{"concat doubling", "{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "", "Bytes", "'~'"},
	{"list doubling", "{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "", "Bytes", "'+'"},
	{"list repeat doubling", "{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l * 2 %}{% endfor %}", "", "Bytes", "'*' on list"},
	{"output",
		"{% set s = 'x' * 100000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
		"{% set s = 'x' * 10000 %}{% for i in range(1000) %}{{ s }}{% endfor %}", "Bytes", "output"},
	{"repr of copies",
		"{% set l = ['x' * 100000] * 100000 %}{{ l|string|length }}",
		"{% set l = ['x' * 1000] * 1000 %}{{ l|string|length }}", "Bytes", "filter string"},
	{"format copies",
		"{% set s = 'x' * 10000000 %}{{ '" + strings.Repeat("%s", 30) + "' % ((s,) * 30) }}",
		"{% set s = 'x' * 100000 %}{{ '" + strings.Repeat("%s", 30) + "' % ((s,) * 30) }}", "Bytes", "'%' on str"},
	{"split into pieces",
		"{% set s = ',' * 10000000 %}{{ s.split(',')|length }}",
		"{% set s = ',' * 100000 %}{{ s.split(',')|length }}", "Bytes", "str.split"},
	{"tokens",
		"{{ 1" + strings.Repeat("|abs", 5_000_000) + " }}",
		"{{ 1" + strings.Repeat("|abs", 5000) + " }}", "Bytes", "parsing"},
	{"blocks 1M deep",
		strings.Repeat("{% if 1 %}", 1_000_000) + strings.Repeat("{% endif %}", 1_000_000),
		strings.Repeat("{% if 1 %}", 1100) + strings.Repeat("{% endif %}", 1100), "Bytes", "parsing"},
	// Fatal stack overflow.
	{"brackets 1M deep",
		"{{ " + strings.Repeat("(", 1_000_000) + "1" + strings.Repeat(")", 1_000_000) + " }}",
		"{{ " + strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000) + " }}", "Depth", "parsing"},
	{"lists 1M deep",
		"{{ " + strings.Repeat("[", 1_000_000) + strings.Repeat("]", 1_000_000) + " }}",
		"{{ " + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + " }}", "Depth", "parsing"},
	{"not 1M deep",
		"{{ " + strings.Repeat("not ", 1_000_000) + "1 }}",
		"{{ " + strings.Repeat("not ", 1000) + "1 }}", "Depth", "parsing"},
	{"minus 1M deep",
		"{{ " + strings.Repeat("-", 1_000_000) + "1 }}",
		"{{ " + strings.Repeat("-", 1000) + "1 }}", "Depth", "parsing"},
	{"blocks 2000 deep",
		strings.Repeat("{% if 1 %}", 2000) + strings.Repeat("{% endif %}", 2000),
		strings.Repeat("{% if 1 %}", 500) + strings.Repeat("{% endif %}", 500), "Depth", "parsing"},
	{"operator chain 1M",
		"{{ 1" + strings.Repeat(" + 1", 1_000_000) + " }}",
		"{{ 1" + strings.Repeat(" + 1", 1000) + " }}", "Depth", "syntax"},
	{"filter chain",
		"{{ 1" + strings.Repeat("|abs", 100_000) + " }}",
		"{{ 1" + strings.Repeat("|abs", 1000) + " }}", "Depth", "syntax"},
	{"attribute chain",
		"{{ x" + strings.Repeat(".a", 100_000) + " }}",
		"{{ x" + strings.Repeat(".a", 1000) + " }}", "Depth", "syntax"},
	{"macro recursion", "{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", "", "Depth", ""},
	// Within the syntax limit, but a macro nests its body in each call.
	{"deep blocks recursion",
		"{% macro m() %}" + strings.Repeat("{% filter trim %}", 900) + "{{ m() }}" + strings.Repeat("{% endfilter %}", 900) + "{% endmacro %}{{ m() }}",
		"{% macro m() %}" + strings.Repeat("{% filter trim %}", 90) + "{{ m() }}" + strings.Repeat("{% endfilter %}", 90) + "{% endmacro %}{{ m() }}", "Depth", "statement"},
	{"deep body recursion",
		"{% macro m() %}{{ " + strings.Repeat("not ", 900) + "m() }}{% endmacro %}{{ m() }}",
		"{% macro m() %}{{ " + strings.Repeat("not ", 90) + "m() }}{% endmacro %}{{ m() }}", "Depth", "expression"},
	{"nested list printed", "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}", "", "Depth", "output"},
	{"nested list compared", "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x == ns.x }}", "", "Depth", "comparing values"},
	{"nested list ordered", "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x < ns.x }}", "", "Depth", "comparing values"},
	{"nested list serialised", "{% set ns = namespace(x=[]) %}{% for i in range(5000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}", "", "Depth", "filter tojson"},
	{"nested tuple hashed", "{% set ns = namespace(x=()) %}{% for i in range(5000) %}{% set ns.x = (ns.x,) %}{% endfor %}{{ {ns.x: 1} }}", "", "Depth", "hashing a tuple"},
	{"namespace chain printed",
		"{% set ns = namespace(x=none) %}{% for i in range(5000) %}{% set ns.x = namespace(x=ns.x) %}{% endfor %}{{ ns }}",
		"{% set ns = namespace(x=none) %}{% for i in range(500) %}{% set ns.x = namespace(x=ns.x) %}{% endfor %}{{ ns }}", "Depth", "output"},
	// Hangs.
	{"macro twice per level",
		"{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(40) }}",
		"{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(20) }}", "Steps", ""},
	{"big-integer squaring", "{% set ns = namespace(x=3) %}{% for i in range(100) %}{% set ns.x = ns.x * ns.x %}{% endfor %}", "", "Steps", "integer *"},
	{"big-integer power", "{{ 3 ** (2 ** 40) }}", "", "Bytes", "integer **"},
	{"big-integer compare",
		"{% set x = 7 ** 300000 %}{% set y = 7 ** 300000 %}{% for i in range(100000) %}{% if x == y %}{% endif %}{% endfor %}",
		"{% set x = 7 ** 20000 %}{% set y = 7 ** 20000 %}{% for i in range(1000) %}{% if x == y %}{% endif %}{% endfor %}", "Steps", "=="},
	{"big-integer power loop",
		"{% for i in range(100000) %}{% set x = 7 ** 100000 %}{% endfor %}",
		"{% for i in range(1000) %}{% set x = 7 ** 100000 %}{% endfor %}", "Steps", "integer **"},
	{"1M iterations of heavy work",
		"{% set big = 'x' * 1000000 %}{% for c in 'y' * 1000000 %}{{ big.count('y') }}{% endfor %}",
		"{% set big = 'x' * 10000 %}{% for c in 'y' * 10000 %}{{ big.count('y') }}{% endfor %}", "Steps", "str.count"},
	{"nested loops",
		"{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}",
		"{% set r = range(1000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}", "Steps", "loop iteration"},
	{"in over a big string",
		"{% set big = 'x' * 1000000 %}{% for i in range(100000) %}{% if 'y' in big %}{% endif %}{% endfor %}",
		"{% set big = 'x' * 10000 %}{% for i in range(10000) %}{% if 'y' in big %}{% endif %}{% endfor %}", "Steps", "'in'"},
	{"equal big strings",
		"{% set a = 'x' * 1000000 %}{% set b = 'x' * 1000000 %}{% for i in range(100000) %}{% if a == b %}{% endif %}{% endfor %}",
		"{% set a = 'x' * 50000 %}{% set b = 'x' * 50000 %}{% for i in range(2000) %}{% if a == b %}{% endif %}{% endfor %}", "Steps", "=="},
	{"long name lookups",
		"{% for i in range(100000) %}{{ " + strings.Repeat("n", 1_000_000) + " }}{% endfor %}",
		"{% for i in range(1000) %}{{ " + strings.Repeat("n", 20_000) + " }}{% endfor %}", "Steps", "name lookup"},
	{"hash big keys",
		"{% set k = 'k' * 1000000 %}{% set d = {k: 1} %}{% for i in range(100000) %}{{ d[k] }}{% endfor %}",
		"{% set k = 'k' * 100000 %}{% set d = {k: 1} %}{% for i in range(1000) %}{{ d[k] }}{% endfor %}", "Steps", "hashing a key"},
	{"sort a big list",
		"{{ (range(100000)|list * 20)|sort|length }}",
		"{{ (range(1000)|list * 4)|sort|length }}", "Steps", "sorting"},
	{"strip with a long set",
		"{% set chars = 'abcdefghij' * 100000 %}{% for i in range(100000) %}{{ 'xyz'.strip(chars) }}{% endfor %}",
		"{% set chars = 'abcdefghij' * 10000 %}{% for i in range(1000) %}{{ 'xyz'.strip(chars) }}{% endfor %}", "Steps", "strip"},
	{"isupper of a big string",
		"{% set s = '\u00c9' * 10000000 %}{% for i in range(100000) %}{{ s.isupper() }}{% endfor %}",
		"{% set s = '\u00c9' * 100000 %}{% for i in range(1000) %}{{ s.isupper() }}{% endfor %}", "Steps", "str.isupper"},
	{"split whitespace",
		"{% set s = 'a' * 10000000 %}{% for i in range(100000) %}{{ s.split()|length }}{% endfor %}",
		"{% set s = 'a' * 100000 %}{% for i in range(1000) %}{{ s.split()|length }}{% endfor %}", "Steps", "str.split"},
	{"index a big string",
		"{% set s = '\u00e9' * 10000000 %}{% for i in range(100000) %}{{ s[-5000000] }}{% endfor %}",
		"{% set s = '\u00e9' * 100000 %}{% for i in range(1000) %}{{ s[50000] }}{% endfor %}", "Steps", "subscript"},
}

// smallLimits are what the bounded tests run hostile templates with.
var smallLimits = Limits{Bytes: 256 << 10, Steps: 50_000, Depth: 100}

// runBounded parses and renders src with lim, failing the test when that
// takes longer than timeout (the goroutine is then left behind: a hang).
// It returns the error, the time taken and the bytes allocated meanwhile
// (runtime.MemStats.TotalAlloc, a bound on the heap the call could use).
func runBounded(t *testing.T, src string, lim Limits, timeout time.Duration) (error, time.Duration, uint64) {
	t.Helper()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	done := make(chan error, 1)
	var peak atomic.Uint64
	start := time.Now()
	go func() {
		tmpl, err := Parse(src, Options{TrimBlocks: true, LStripBlocks: true, Limits: lim})
		if err == nil {
			_, err = tmpl.Render(Env{Vars: map[string]Value{"x": NewDict()}})
		}
		done <- err
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			elapsed := time.Since(start)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			t.Logf("%v in %v, allocated %d MiB, peak heap %d MiB", err, elapsed.Round(time.Millisecond),
				(after.TotalAlloc-before.TotalAlloc)>>20, peak.Load()>>20)
			return err, elapsed, after.TotalAlloc - before.TotalAlloc
		case <-tick.C:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
		case <-time.After(timeout):
			t.Fatalf("still running after %v", timeout)
		}
	}
}

func checkLimitError(t *testing.T, err error, c hostileCase, max int64) {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) {
		t.Fatalf("error %v; want a *LimitError", err)
	}
	if le.Limit != c.limit || le.Max != max {
		t.Fatalf("error %v exceeds %s (max %d); want %s (max %d)", err, le.Limit, le.Max, c.limit, max)
	}
	if !strings.Contains(le.Op, c.op) {
		t.Fatalf("error %v is about %q; want %q", err, le.Op, c.op)
	}
}

func limitOf(lim Limits, field string) int64 {
	switch field {
	case "Bytes":
		return lim.Bytes
	case "Steps":
		return lim.Steps
	}
	return int64(lim.Depth)
}

// TestHostileTemplatesSmallLimits runs every hostile template with small
// limits: each fails with the limit it exceeds, quickly, in little memory.
func TestHostileTemplatesSmallLimits(t *testing.T) {
	for _, c := range hostile {
		t.Run(c.name, func(t *testing.T) {
			src := c.small
			if src == "" {
				src = c.src
			}
			err, elapsed, alloc := runBounded(t, src, smallLimits, time.Minute)
			checkLimitError(t, err, c, limitOf(smallLimits, c.limit))
			if elapsed > 5*time.Second {
				t.Errorf("took %v", elapsed)
			}
			// The budget is 1 MiB; the per-step scratch of 100k steps comes
			// on top.
			if max := uint64(64 << 20); alloc > max {
				t.Errorf("allocated %d MiB, more than %d MiB", alloc>>20, max>>20)
			}
		})
	}
}

// TestHostileTemplatesDefaultLimits runs every hostile template with the
// limits production uses: a clean error, in bounded time and memory, where
// each of them used to crash the process or hang.
func TestHostileTemplatesDefaultLimits(t *testing.T) {
	def := DefaultLimits()
	for _, c := range hostile {
		t.Run(c.name, func(t *testing.T) {
			err, elapsed, alloc := runBounded(t, c.src, Limits{}, 2*time.Minute)
			checkLimitError(t, err, c, limitOf(def, c.limit))
			if elapsed > 30*time.Second {
				t.Errorf("took %v", elapsed)
			}
			// The value budget a few times over (a string builder doubles,
			// parsing a 20 MB source), and the scratch of DefaultSteps steps
			// (scopes, macro arguments).
			if max := uint64(4*DefaultBytes + 512<<20); alloc > max {
				t.Errorf("allocated %d MiB, more than %d MiB", alloc>>20, max>>20)
			}
		})
	}
}

func TestLimitErrorMessages(t *testing.T) {
	for _, c := range []struct {
		src  string
		lim  Limits
		want string
	}{
		{"{{ 'a'|indent(1000000000000) }}", Limits{}, "line 1: template exceeds its value budget of 128 MiB (filter indent)"},
		{"\n{{ 'ab' * 1000 }}", Limits{Bytes: 1000}, "line 2: template exceeds its value budget of 1000 bytes ('*' on str)"},
		{"{% for i in range(100) %}{% endfor %}", Limits{Steps: 50}, "line 1: template exceeds its budget of 50 steps (loop iteration)"},
		{"{{ ((((1)))) }}", Limits{Depth: 3}, "line 1: template nests deeper than its limit of 3 (parsing)"},
		{"{{ 1 + 1 + 1 + 1 }}", Limits{Depth: 3}, "line 1: template nests deeper than its limit of 3 (syntax)"},
		{"{% macro m() %}{{ m() }}{% endmacro %}\n{{ m() }}", Limits{Depth: 10}, "template nests deeper than its limit of 10 ("},
	} {
		tmpl, err := Parse(c.src, Options{Limits: c.lim})
		if err == nil {
			_, err = tmpl.Render(Env{})
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v; want %q", c.src, err, c.want)
		}
	}
}

// TestLimitsDefaults checks that zero fields mean the defaults, that a
// template keeps the limits it was parsed with, and where each limit falls.
func TestLimitsDefaults(t *testing.T) {
	tmpl, err := Parse("x", Options{Limits: Limits{Steps: 7}})
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{Bytes: DefaultBytes, Steps: 7, Depth: DefaultDepth}
	if tmpl.lim != want {
		t.Fatalf("limits %+v; want %+v", tmpl.lim, want)
	}
	if DefaultLimits() != (Limits{Bytes: DefaultBytes, Steps: DefaultSteps, Depth: DefaultDepth}) {
		t.Fatalf("DefaultLimits() = %+v", DefaultLimits())
	}
	for _, c := range []struct {
		src  string
		lim  Limits
		fits bool
	}{
		// Render charges the string and its output (Parse its 6 tokens,
		// 384 bytes, against a budget of its own).
		{"{{ 'ab' * 500 }}", Limits{Bytes: 2000}, true},
		{"{{ 'ab' * 500 }}", Limits{Bytes: 1999}, false},
		// Parse charges 4 tokens: {{, 'a', }} and the end.
		{"{{ 'a' }}", Limits{Bytes: 4 * tokenSize}, true},
		{"{{ 'a' }}", Limits{Bytes: 4*tokenSize - 1}, false},
		// One step for the statement, one for its expression, one for
		// scanning the string and one per iteration.
		{"{% for i in 'abc' %}{% endfor %}", Limits{Steps: 6}, true},
		{"{% for i in 'abc' %}{% endfor %}", Limits{Steps: 5}, false},
		// A statement and its expression; an attribute adds a level of
		// syntax, a bracket one of parsing.
		{"{{ 1 }}", Limits{Depth: 2}, true},
		{"{{ x.y }}", Limits{Depth: 2}, false},
		{"{{ (1) }}", Limits{Depth: 2}, false},
	} {
		tmpl, err := Parse(c.src, Options{Limits: c.lim})
		if err == nil {
			_, err = tmpl.Render(Env{})
		}
		if (err == nil) != c.fits {
			t.Errorf("%q with %+v: error %v; want fits=%v", c.src, c.lim, err, c.fits)
		}
	}
}

// TestRealTemplateWithinLimits renders the Qwen3 template over a long
// conversation (about 4 MB: more than a million tokens) with the default
// limits, and shows the budget is what it is charged against.
func TestRealTemplateWithinLimits(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "qwen3_chat_template.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	sb.WriteString(`{"messages": [`)
	for i := range 2000 {
		if i > 0 {
			sb.WriteString(", ")
		}
		role := []string{"user", "assistant"}[i%2]
		fmt.Fprintf(&sb, `{"role": %q, "content": "%s"}`, role, strings.Repeat("lorem ipsum ", 170))
	}
	sb.WriteString(`], "add_generation_prompt": true}`)
	vars, err := FromJSON([]byte(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	env := Env{Vars: map[string]Value{}}
	d := vars.(*Dict)
	for i, k := range d.Keys() {
		env.Vars[k.(string)] = d.vals[i]
	}
	tmpl, err := Parse(string(src), hfOptions)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := tmpl.Render(env)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 4_000_000 {
		t.Fatalf("rendered %d bytes", len(out))
	}
	t.Logf("rendered %d bytes in %v", len(out), time.Since(start))
	small, err := Parse(string(src), Options{TrimBlocks: true, LStripBlocks: true, Limits: Limits{Bytes: 4 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	var le *LimitError
	if _, err := small.Render(env); !errors.As(err, &le) || le.Limit != "Bytes" {
		t.Fatalf("with a 4 MiB budget: %v; want the value budget exceeded", err)
	}
	few, err := Parse(string(src), Options{TrimBlocks: true, LStripBlocks: true, Limits: Limits{Steps: 10_000}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := few.Render(env); !errors.As(err, &le) || le.Limit != "Steps" {
		t.Fatalf("with 10000 steps: %v; want the step budget exceeded", err)
	}
}

// TestHugeIntLiteral checks that an integer literal beyond CPython's digit
// limit is refused by Parse (Jinja2's lexer raises ValueError), before
// big.Int's quadratic decimal conversion runs on it.
func TestHugeIntLiteral(t *testing.T) {
	_, err := Parse("{{ 1"+strings.Repeat("0", 1_000_000)+" }}", Options{})
	if err == nil || !strings.Contains(err.Error(), "integer literal of 1000001 digits") {
		t.Fatalf("Parse: %v", err)
	}
}

func TestFromJSONBounds(t *testing.T) {
	ok := strings.Repeat("[", DefaultDepth) + strings.Repeat("]", DefaultDepth)
	if _, err := FromJSON([]byte(ok)); err != nil {
		t.Fatalf("%d nested arrays: %v", DefaultDepth, err)
	}
	deep := strings.Repeat(`{"a": [`, 100_000) + strings.Repeat("]}", 100_000)
	if _, err := FromJSON([]byte(deep)); err == nil || !strings.Contains(err.Error(), "nested deeper than 1000") {
		t.Fatalf("200000 nested values: %v", err)
	}
	if _, err := FromJSON([]byte(strings.Repeat("9", maxIntDigits))); err != nil {
		t.Fatalf("a %d-digit integer: %v", maxIntDigits, err)
	}
	// json.loads refuses a longer one (and SetString would be quadratic).
	if _, err := FromJSON([]byte(strings.Repeat("9", 1_000_000))); err == nil || !strings.Contains(err.Error(), "Exceeds the limit (4300 digits)") {
		t.Fatalf("a million-digit integer: %v", err)
	}
}
