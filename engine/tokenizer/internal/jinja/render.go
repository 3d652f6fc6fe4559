// Package jinja is a Jinja2 template interpreter for chat templates. It
// implements the subset of Jinja2 3.1 that Hugging Face chat templates use,
// with Python semantics for values (str, int, float, list, dict, None,
// Undefined) so that renderings are byte-identical to
// transformers.apply_chat_template, which runs Jinja2's
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
// loopcontrols extension and its own tojson filter.
//
// Supported: {{ }}, {% %}, {# #} with "-"/"+" whitespace control, trim_blocks,
// lstrip_blocks, raw; if/elif/else, for (with "if" filter, else, loop.*,
// tuple unpacking), set (also ns.attr and block set), macro, filter blocks,
// with, break/continue, generation; the expression grammar of Jinja2 with its
// precedence; the common filters, tests, str/dict/list methods and the
// globals namespace, range, dict, raise_exception and strftime_now.
// Anything else is a parse or render error naming it, never a silent
// difference.
package jinja

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// Template is a parsed template. It is immutable and safe for concurrent
// Render calls.
type Template struct {
	body []node
}

// Parse lexes and parses src.
func Parse(src string, opt Options) (*Template, error) {
	toks, err := lex(src, opt)
	if err != nil {
		return nil, err
	}
	body, err := parse(toks)
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// Limits bound a render, since templates come from files.
const (
	maxOutput     = 64 << 20
	maxIterations = 10_000_000
	maxDepth      = 200
	maxRange      = 1 << 20 // items of one range() or repeated list
)

// Env is what a render sees: variables, and the current time for
// strftime_now (zero means time.Now).
type Env struct {
	Vars map[string]Value
	Now  time.Time
}

// Render renders the template with vars as its top-level variables.
func (t *Template) Render(env Env) (string, error) {
	r := &renderer{env: env}
	r.root = &scope{vars: map[string]Value{}}
	r.scope = r.root
	if _, err := r.execBody(t.body); err != nil {
		return "", err
	}
	return r.out.String(), nil
}

// RaiseError is returned when the template calls raise_exception(msg).
type RaiseError struct{ Message string }

func (e *RaiseError) Error() string { return "template raised an exception: " + e.Message }

type scope struct {
	vars   map[string]Value
	parent *scope
}

type renderer struct {
	env        Env
	out        strings.Builder
	root       *scope
	scope      *scope
	iterations int
	depth      int
}

type flow int

const (
	flowNormal flow = iota
	flowBreak
	flowContinue
)

func (r *renderer) lookup(name string) Value {
	for s := r.scope; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v
		}
	}
	if v, ok := r.env.Vars[name]; ok {
		return v
	}
	if g, ok := globals[name]; ok {
		return g
	}
	return Undefined{Name: name}
}

func (r *renderer) write(s string) error {
	if r.out.Len()+len(s) > maxOutput {
		return fmt.Errorf("output exceeds %d bytes", maxOutput)
	}
	r.out.WriteString(s)
	return nil
}

func (r *renderer) execBody(body []node) (flow, error) {
	for _, n := range body {
		f, err := r.exec(n)
		if err != nil || f != flowNormal {
			return f, err
		}
	}
	return flowNormal, nil
}

func lineErr(line int, err error) error {
	if err == nil {
		return nil
	}
	var re *RaiseError
	if errors.As(err, &re) || strings.HasPrefix(err.Error(), "line ") {
		return err
	}
	return fmt.Errorf("line %d: %w", line, err)
}

func (r *renderer) exec(n node) (flow, error) {
	switch n := n.(type) {
	case *textNode:
		return flowNormal, r.write(n.text)
	case *outputNode:
		v, err := r.eval(n.e)
		if err != nil {
			return flowNormal, lineErr(n.line, err)
		}
		return flowNormal, r.write(toStr(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c)
			if err != nil {
				return flowNormal, err
			}
			if truthy(v) {
				return r.execBody(n.bodies[i])
			}
		}
		return r.execBody(n.els)
	case *forNode:
		return flowNormal, r.execFor(n)
	case *setNode:
		return flowNormal, r.execSet(n)
	case *macroNode:
		r.scope.vars[n.name] = r.makeMacro(n)
		return flowNormal, nil
	case *filterBlockNode:
		s, err := r.capture(n.body)
		if err != nil {
			return flowNormal, err
		}
		var v Value = s
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v); err != nil {
				return flowNormal, err
			}
		}
		return flowNormal, r.write(toStr(v))
	case *withNode:
		vals := make([]Value, len(n.values))
		for i, e := range n.values {
			v, err := r.eval(e)
			if err != nil {
				return flowNormal, err
			}
			vals[i] = v
		}
		saved := r.scope
		r.scope = &scope{vars: map[string]Value{}, parent: saved}
		defer func() { r.scope = saved }()
		for i, t := range n.targets {
			if err := r.assign(t, vals[i]); err != nil {
				return flowNormal, err
			}
		}
		return r.execBody(n.body)
	case *breakNode:
		return flowBreak, nil
	case *continueNode:
		return flowContinue, nil
	}
	return flowNormal, fmt.Errorf("internal error: unknown node %T", n)
}

// capture renders body into a string instead of the output.
func (r *renderer) capture(body []node) (string, error) {
	saved := r.out
	r.out = strings.Builder{}
	_, err := r.execBody(body)
	s := r.out.String()
	r.out = saved
	if err != nil {
		return "", err
	}
	if r.out.Len()+len(s) > maxOutput {
		return "", fmt.Errorf("output exceeds %d bytes", maxOutput)
	}
	return s, nil
}

func (r *renderer) execSet(n *setNode) error {
	var v Value
	var err error
	if n.value != nil {
		v, err = r.eval(n.value)
	} else {
		var s string
		s, err = r.capture(n.body)
		v = s
		for _, f := range n.filters {
			if err != nil {
				break
			}
			v, err = r.applyFilter(f, v)
		}
	}
	if err != nil {
		return lineErr(n.line, err)
	}
	return lineErr(n.line, r.assign(n.target, v))
}

func (r *renderer) assign(t target, v Value) error {
	if t.attr != "" {
		ns, ok := r.lookup(t.names[0]).(*Namespace)
		if !ok {
			return fmt.Errorf("can only set attributes on a namespace object, %q is not one", t.names[0])
		}
		return ns.attrs.Set(t.attr, v)
	}
	if !t.tuple {
		r.scope.vars[t.names[0]] = v
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return err
	}
	if len(items) != len(t.names) {
		if len(items) > len(t.names) {
			return fmt.Errorf("too many values to unpack (expected %d)", len(t.names))
		}
		return fmt.Errorf("not enough values to unpack (expected %d, got %d)", len(t.names), len(items))
	}
	for i, name := range t.names {
		r.scope.vars[name] = items[i]
	}
	return nil
}

// Loop is the "loop" variable of a for loop.
type Loop struct {
	items   []Value
	index   int
	changed []Value
	hasLast bool
}

func (r *renderer) execFor(n *forNode) error {
	seq, err := r.eval(n.iter)
	if err != nil {
		return lineErr(n.line, err)
	}
	items, err := iterate(seq)
	if err != nil {
		return lineErr(n.line, err)
	}
	saved := r.scope
	defer func() { r.scope = saved }()
	if n.cond != nil {
		// The filter sees each candidate bound to the target (not loop).
		var kept []Value
		for _, it := range items {
			r.scope = &scope{vars: map[string]Value{}, parent: saved}
			if err := r.assign(n.target, it); err != nil {
				return lineErr(n.line, err)
			}
			c, err := r.eval(n.cond)
			if err != nil {
				return lineErr(n.line, err)
			}
			if truthy(c) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		r.scope = saved
		_, err := r.execBody(n.els)
		return err
	}
	loop := &Loop{items: items}
	for i, it := range items {
		r.iterations++
		if r.iterations > maxIterations {
			return lineErr(n.line, fmt.Errorf("more than %d loop iterations", maxIterations))
		}
		loop.index = i
		r.scope = &scope{vars: map[string]Value{"loop": loop}, parent: saved}
		if err := r.assign(n.target, it); err != nil {
			return lineErr(n.line, err)
		}
		f, err := r.execBody(n.body)
		if err != nil {
			return err
		}
		if f == flowBreak {
			break
		}
	}
	return nil
}

func (r *renderer) makeMacro(n *macroNode) *Func {
	return &Func{Name: n.name, Call: func(r *renderer, args []Value, kwargs []kwarg) (Value, error) {
		if len(args) > len(n.params) {
			return nil, fmt.Errorf("macro %q takes not more than %d argument(s)", n.name, len(n.params))
		}
		r.depth++
		defer func() { r.depth-- }()
		if r.depth > maxDepth {
			return nil, fmt.Errorf("macro recursion deeper than %d", maxDepth)
		}
		vars := map[string]Value{}
		for i, p := range n.params {
			if i < len(args) {
				vars[p] = args[i]
			}
		}
		for _, kw := range kwargs {
			found := false
			for _, p := range n.params {
				if p == kw.name {
					found = true
				}
			}
			if !found {
				return nil, fmt.Errorf("macro %q takes no keyword argument %q", n.name, kw.name)
			}
			vars[kw.name] = kw.val
		}
		saved := r.scope
		r.scope = &scope{vars: vars, parent: r.root}
		defer func() { r.scope = saved }()
		firstDefault := len(n.params) - len(n.defaults)
		for i, p := range n.params {
			if _, ok := vars[p]; ok {
				continue
			}
			if i >= firstDefault {
				v, err := r.eval(n.defaults[i-firstDefault])
				if err != nil {
					return nil, err
				}
				vars[p] = v
			} else {
				vars[p] = Undefined{Name: p}
			}
		}
		return r.capture(n.body)
	}}
}

func (r *renderer) eval(e expr) (Value, error) {
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		return r.lookup(e.name), nil
	case *getattrExpr:
		obj, err := r.eval(e.obj)
		if err != nil {
			return nil, err
		}
		return getattr(obj, e.attr)
	case *getitemExpr:
		obj, err := r.eval(e.obj)
		if err != nil {
			return nil, err
		}
		if s, ok := e.key.(*sliceExpr); ok {
			return r.slice(obj, s)
		}
		key, err := r.eval(e.key)
		if err != nil {
			return nil, err
		}
		return getitem(obj, key)
	case *callExpr:
		fn, err := r.eval(e.fn)
		if err != nil {
			return nil, err
		}
		args, kwargs, err := r.evalArgs(e.args, e.kwargs)
		if err != nil {
			return nil, err
		}
		return r.call(fn, args, kwargs)
	case *filterExpr:
		v, err := r.eval(e.arg)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(e, v)
	case *testExpr:
		v, err := r.eval(e.arg)
		if err != nil {
			return nil, err
		}
		test, ok := tests[e.name]
		if !ok {
			return nil, fmt.Errorf("no test named %q", e.name)
		}
		args, _, err := r.evalArgs(e.args, e.kwargs)
		if err != nil {
			return nil, err
		}
		return test(r, v, args)
	case *unaryExpr:
		v, err := r.eval(e.e)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(v), nil
		case "-":
			if _, ok := numeric(v); !ok {
				if u, isU := v.(Undefined); isU {
					return nil, undefinedErr(u)
				}
				return nil, fmt.Errorf("bad operand type for unary -: '%s'", typeName(v))
			}
			return arith("-", int64(0), v)
		default:
			if _, ok := numeric(v); !ok {
				return nil, fmt.Errorf("bad operand type for unary +: '%s'", typeName(v))
			}
			return v, nil
		}
	case *binExpr:
		l, err := r.eval(e.l)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "and":
			if !truthy(l) {
				return l, nil
			}
			return r.eval(e.r)
		case "or":
			if truthy(l) {
				return l, nil
			}
			return r.eval(e.r)
		}
		rv, err := r.eval(e.r)
		if err != nil {
			return nil, err
		}
		return arith(e.op, l, rv)
	case *compareExpr:
		l, err := r.eval(e.first)
		if err != nil {
			return nil, err
		}
		for i, op := range e.ops {
			rv, err := r.eval(e.rest[i])
			if err != nil {
				return nil, err
			}
			ok, err := compare(op, l, rv)
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			l = rv
		}
		return true, nil
	case *condExpr:
		t, err := r.eval(e.test)
		if err != nil {
			return nil, err
		}
		if truthy(t) {
			return r.eval(e.yes)
		}
		if e.no == nil {
			return Undefined{Name: "<conditional expression>"}, nil
		}
		return r.eval(e.no)
	case *listExpr:
		items, err := r.evalAll(e.items)
		if err != nil {
			return nil, err
		}
		return &List{Items: items}, nil
	case *tupleExpr:
		items, err := r.evalAll(e.items)
		if err != nil {
			return nil, err
		}
		return &List{Items: items, Tuple: true}, nil
	case *dictExpr:
		d := NewDict()
		for i := range e.keys {
			k, err := r.eval(e.keys[i])
			if err != nil {
				return nil, err
			}
			v, err := r.eval(e.vals[i])
			if err != nil {
				return nil, err
			}
			if err := d.Set(k, v); err != nil {
				return nil, err
			}
		}
		return d, nil
	case *concatExpr:
		var sb strings.Builder
		for _, p := range e.parts {
			v, err := r.eval(p)
			if err != nil {
				return nil, err
			}
			sb.WriteString(toStr(v))
		}
		return sb.String(), nil
	case *sliceExpr:
		return nil, errors.New("slice outside of a subscript")
	}
	return nil, fmt.Errorf("internal error: unknown expression %T", e)
}

func (r *renderer) evalArgs(args []expr, kws []kwExpr) ([]Value, []kwarg, error) {
	vals := make([]Value, len(args))
	for i, a := range args {
		v, err := r.eval(a)
		if err != nil {
			return nil, nil, err
		}
		vals[i] = v
	}
	var kwargs []kwarg
	for _, kw := range kws {
		v, err := r.eval(kw.e)
		if err != nil {
			return nil, nil, err
		}
		kwargs = append(kwargs, kwarg{kw.name, v})
	}
	return vals, kwargs, nil
}

func (r *renderer) call(fn Value, args []Value, kwargs []kwarg) (Value, error) {
	switch f := fn.(type) {
	case *Func:
		return f.Call(r, args, kwargs)
	case Undefined:
		return nil, undefinedErr(f)
	}
	return nil, fmt.Errorf("'%s' object is not callable", typeName(fn))
}

func undefinedErr(u Undefined) error {
	if u.Name == "" {
		return errors.New("undefined value used")
	}
	return fmt.Errorf("'%s' is undefined", u.Name)
}

func (r *renderer) applyFilter(f *filterExpr, v Value) (Value, error) {
	fn, ok := filters[f.name]
	if !ok {
		return nil, fmt.Errorf("line %d: no filter named %q", f.line, f.name)
	}
	args, kwargs, err := r.evalArgs(f.args, f.kwargs)
	if err != nil {
		return nil, err
	}
	out, err := fn(r, v, args, kwargs)
	if err != nil {
		return nil, lineErr(f.line, fmt.Errorf("filter %s: %w", f.name, err))
	}
	return out, nil
}

// slice is obj[start:stop:step] for lists, tuples and strings.
func (r *renderer) slice(obj Value, s *sliceExpr) (Value, error) {
	var bounds [3]Value
	for i, e := range []expr{s.start, s.stop, s.step} {
		if e == nil {
			bounds[i] = nil
			continue
		}
		v, err := r.eval(e)
		if err != nil {
			return nil, err
		}
		bounds[i] = v
	}
	switch o := obj.(type) {
	case *List:
		idx, err := sliceIndices(len(o.Items), bounds)
		if err != nil {
			return nil, err
		}
		out := &List{Tuple: o.Tuple, Items: make([]Value, 0, len(idx))}
		for _, i := range idx {
			out.Items = append(out.Items, o.Items[i])
		}
		return out, nil
	case string:
		runes := []rune(o)
		idx, err := sliceIndices(len(runes), bounds)
		if err != nil {
			return nil, err
		}
		out := make([]rune, 0, len(idx))
		for _, i := range idx {
			out = append(out, runes[i])
		}
		return string(out), nil
	case Undefined:
		return nil, undefinedErr(o)
	}
	return Undefined{Name: "slice"}, nil
}

// sliceIndices is Python's slice.indices(n), expanded.
func sliceIndices(n int, b [3]Value) ([]int, error) {
	get := func(v Value) (int, bool, error) {
		if v == nil {
			return 0, false, nil
		}
		num, ok := numeric(v)
		if !ok || num.isFloat {
			return 0, false, fmt.Errorf("slice indices must be integers or None, not %s", typeName(v))
		}
		if !num.i.IsInt64() {
			if num.i.Sign() < 0 {
				return -1 << 62, true, nil
			}
			return 1 << 62, true, nil
		}
		return int(num.i.Int64()), true, nil
	}
	step, has, err := get(b[2])
	if err != nil {
		return nil, err
	}
	if !has {
		step = 1
	}
	if step == 0 {
		return nil, errors.New("slice step cannot be zero")
	}
	start, hasStart, err := get(b[0])
	if err != nil {
		return nil, err
	}
	stop, hasStop, err := get(b[1])
	if err != nil {
		return nil, err
	}
	adjust := func(i int, has bool, def int) int {
		if !has {
			return def
		}
		if i < 0 {
			i += n
			if i < 0 {
				if step < 0 {
					return -1
				}
				return 0
			}
		} else if i >= n {
			if step < 0 {
				return n - 1
			}
			return n
		}
		return i
	}
	var out []int
	if step > 0 {
		start, stop = adjust(start, hasStart, 0), adjust(stop, hasStop, n)
		for i := start; i < stop; i += step {
			out = append(out, i)
		}
	} else {
		start, stop = adjust(start, hasStart, n-1), adjust(stop, hasStop, -1)
		for i := start; i > stop; i += step {
			out = append(out, i)
		}
	}
	return out, nil
}

// compare evaluates one comparison operator.
func compare(op string, l, r Value) (bool, error) {
	switch op {
	case "==":
		return pyEqual(l, r), nil
	case "!=":
		return !pyEqual(l, r), nil
	case "in", "not in":
		in, err := contains(r, l)
		if op == "not in" {
			in = !in
		}
		return in, err
	}
	if u, ok := l.(Undefined); ok {
		return false, undefinedErr(u)
	}
	if u, ok := r.(Undefined); ok {
		return false, undefinedErr(u)
	}
	c, err := pyCompare(l, r)
	if err != nil {
		return false, fmt.Errorf("'%s' not supported between instances of '%s' and '%s'", op, typeName(l), typeName(r))
	}
	if c == 2 { // NaN
		return false, nil
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

// contains is Python's "item in container".
func contains(container, item Value) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case *Dict:
		if _, err := hashKey(item); err != nil {
			return false, err
		}
		_, ok := c.Get(item)
		return ok, nil
	case *List:
		for _, it := range c.Items {
			if pyEqual(it, item) {
				return true, nil
			}
		}
		return false, nil
	case Undefined:
		return false, nil
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
}

// arith evaluates + - * / // % ** with Python semantics.
func arith(op string, l, r Value) (Value, error) {
	if u, ok := l.(Undefined); ok {
		return nil, undefinedErr(u)
	}
	if u, ok := r.(Undefined); ok {
		return nil, undefinedErr(u)
	}
	ln, lok := numeric(l)
	rn, rok := numeric(r)
	if lok && rok {
		return numArith(op, ln, rn)
	}
	switch op {
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := r.(string); ok {
				return a + b, nil
			}
			return nil, fmt.Errorf("can only concatenate str (not \"%s\") to str", typeName(r))
		case *List:
			if b, ok := r.(*List); ok && a.Tuple == b.Tuple {
				items := append(append([]Value{}, a.Items...), b.Items...)
				return &List{Items: items, Tuple: a.Tuple}, nil
			}
		}
	case "*":
		if s, n, ok := seqTimes(l, r); ok {
			return repeat(s, n)
		}
		if s, n, ok := seqTimes(r, l); ok {
			return repeat(s, n)
		}
	case "%":
		if s, ok := l.(string); ok {
			return percentFormat(s, r)
		}
	}
	return nil, fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

func seqTimes(s, n Value) (Value, int64, bool) {
	switch s.(type) {
	case string, *List:
	default:
		return nil, 0, false
	}
	num, ok := numeric(n)
	if !ok || num.isFloat || !num.i.IsInt64() {
		return nil, 0, false
	}
	return s, num.i.Int64(), true
}

func repeat(s Value, n int64) (Value, error) {
	if n < 0 {
		n = 0
	}
	switch s := s.(type) {
	case string:
		if int64(len(s))*n > maxOutput {
			return nil, errors.New("repeated string too long")
		}
		return strings.Repeat(s, int(n)), nil
	case *List:
		if int64(len(s.Items))*n > maxRange {
			return nil, errors.New("repeated list too long")
		}
		out := &List{Tuple: s.Tuple}
		for range n {
			out.Items = append(out.Items, s.Items...)
		}
		return out, nil
	}
	return nil, errors.New("cannot repeat")
}

func numArith(op string, a, b number) (Value, error) {
	if !a.isFloat && !b.isFloat {
		x, y := a.i, b.i
		switch op {
		case "+":
			return intValue(new(big.Int).Add(x, y)), nil
		case "-":
			return intValue(new(big.Int).Sub(x, y)), nil
		case "*":
			return intValue(new(big.Int).Mul(x, y)), nil
		case "/":
			if y.Sign() == 0 {
				return nil, errors.New("division by zero")
			}
			return a.float() / b.float(), nil
		case "//", "%":
			if y.Sign() == 0 {
				return nil, errors.New("integer division or modulo by zero")
			}
			q, m := new(big.Int), new(big.Int)
			q.DivMod(x, y, m) // Euclidean: m >= 0
			if m.Sign() != 0 && y.Sign() < 0 {
				q.Add(q, big.NewInt(1))
				m.Add(m, y)
			}
			if op == "//" {
				return intValue(q), nil
			}
			return intValue(m), nil
		case "**":
			if y.Sign() < 0 {
				return pyPow(a.float(), b.float())
			}
			if y.BitLen() > 20 || x.BitLen()*int(y.Int64()) > 1<<16 {
				return nil, errors.New("integer power too large")
			}
			return intValue(new(big.Int).Exp(x, y, nil)), nil
		}
	}
	x, y := a.float(), b.float()
	switch op {
	case "+":
		return x + y, nil
	case "-":
		return x - y, nil
	case "*":
		return x * y, nil
	case "/":
		if y == 0 {
			return nil, errors.New("float division by zero")
		}
		return x / y, nil
	case "//", "%":
		if y == 0 {
			return nil, errors.New("float modulo")
		}
		q, m := floatDivMod(x, y)
		if op == "//" {
			return q, nil
		}
		return m, nil
	case "**":
		return pyPow(x, y)
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

// evalAll evaluates expressions in order.
func (r *renderer) evalAll(es []expr) ([]Value, error) {
	out := make([]Value, len(es))
	for i, e := range es {
		v, err := r.eval(e)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
