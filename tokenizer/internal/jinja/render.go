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
//
// Templates come from model files, so the interpreter is a sandbox: the
// template sees only its variables, and Parse and Render are bounded in
// memory, work and nesting by Limits (a *LimitError when one is exceeded).
package jinja

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Template is a parsed template. It is immutable and safe for concurrent
// Render calls.
type Template struct {
	body []node
	lim  Limits
}

// Parse lexes and parses src. opt.Limits bound the parse (Bytes and Depth)
// and every Render of the template.
func Parse(src string, opt Options) (*Template, error) {
	b := newBudget(opt.Limits)
	toks, err := lex(src, opt, b)
	if err != nil {
		return nil, err
	}
	body, err := parse(toks, b)
	if err != nil {
		return nil, err
	}
	if err := checkNesting(body, b.lim.Depth); err != nil {
		return nil, err
	}
	return &Template{body: body, lim: b.lim}, nil
}

// maxRange is the sandbox's MAX_RANGE: Jinja2's ImmutableSandboxedEnvironment
// refuses a range() of more items.
const maxRange = 100_000

// Env is what a render sees: variables, and the current time for
// strftime_now (zero means time.Now).
type Env struct {
	Vars map[string]Value
	Now  time.Time
}

// Render renders the template with vars as its top-level variables.
func (t *Template) Render(env Env) (string, error) {
	r := &renderer{budget: newBudget(t.lim), env: env}
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
	*budget
	env   Env
	out   strings.Builder
	root  *scope
	scope *scope
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
	if err := r.alloc(int64(len(s)), "output"); err != nil {
		return err
	}
	r.out.Grow(len(s)) // doubles, as in printer.WriteString
	r.out.WriteString(s)
	return nil
}

// writeValue writes str(v).
func (r *renderer) writeValue(v Value) error {
	s, err := r.str(v, "output")
	if err != nil {
		return err
	}
	return r.write(s)
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

// lineError is an error of the statement or expression at a line.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

// lineErr adds the line to err unless it names one already (or is the
// template's own exception).
func lineErr(line int, err error) error {
	if err == nil {
		return nil
	}
	var le *lineError
	var re *RaiseError
	if errors.As(err, &le) || errors.As(err, &re) {
		return err
	}
	return &lineError{line, err}
}

// exec runs one statement: a step and a level of nesting.
func (r *renderer) exec(n node) (flow, error) {
	if err := r.work(1, "statement"); err != nil {
		return flowNormal, err
	}
	if err := r.enter("statement"); err != nil {
		return flowNormal, err
	}
	f, err := r.execNode(n)
	r.leave()
	return f, err
}

func (r *renderer) execNode(n node) (flow, error) {
	switch n := n.(type) {
	case *textNode:
		return flowNormal, r.write(n.text)
	case *outputNode:
		v, err := r.eval(n.e)
		if err == nil {
			err = r.writeValue(v)
		}
		return flowNormal, lineErr(n.line, err)
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c)
			if err != nil {
				return flowNormal, lineErr(n.line, err)
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
		return flowNormal, r.writeValue(v)
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
		return ns.attrs.set(r.budget, t.attr, v)
	}
	if !t.tuple {
		r.scope.vars[t.names[0]] = v
		return nil
	}
	items, err := r.iterate(v)
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
	items, err := r.iterate(seq)
	if err != nil {
		return lineErr(n.line, err)
	}
	saved := r.scope
	defer func() { r.scope = saved }()
	// Each iteration (and each test of the loop's filter) starts from a
	// fresh scope, as in Jinja2: one map, cleared.
	sc := &scope{vars: map[string]Value{}, parent: saved}
	if n.cond != nil {
		// The filter sees each candidate bound to the target (not loop).
		var kept []Value
		for _, it := range items {
			if err := r.work(1, "loop filter"); err != nil {
				return lineErr(n.line, err)
			}
			clear(sc.vars)
			r.scope = sc
			if err := r.assign(n.target, it); err != nil {
				return lineErr(n.line, err)
			}
			c, err := r.eval(n.cond)
			if err != nil {
				return lineErr(n.line, err)
			}
			if truthy(c) {
				if err := r.allocValues(1, "loop filter"); err != nil {
					return lineErr(n.line, err)
				}
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
		if err := r.work(1, "loop iteration"); err != nil {
			return lineErr(n.line, err)
		}
		loop.index = i
		clear(sc.vars)
		sc.vars["loop"] = loop
		r.scope = sc
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

// eval evaluates one expression: a step and a level of nesting.
func (r *renderer) eval(e expr) (Value, error) {
	if err := r.work(1, "expression"); err != nil {
		return nil, err
	}
	if err := r.enter("expression"); err != nil {
		return nil, err
	}
	v, err := r.evalExpr(e)
	r.leave()
	return v, err
}

func (r *renderer) evalExpr(e expr) (Value, error) {
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		if len(e.name) >= scanPerStep { // looking a name up hashes it
			if err := r.scan(len(e.name), "name lookup"); err != nil {
				return nil, err
			}
		}
		return r.lookup(e.name), nil
	case *getattrExpr:
		obj, err := r.eval(e.obj)
		if err != nil {
			return nil, err
		}
		if len(e.attr) >= scanPerStep {
			if err := r.scan(len(e.attr), "attribute lookup"); err != nil {
				return nil, err
			}
		}
		return r.getattr(obj, e.attr)
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
		return r.getitem(obj, key)
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
			return r.arith("-", int64(0), v)
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
		return r.arith(e.op, l, rv)
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
			ok, err := r.compareOp(op, l, rv)
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
			if err := d.set(r.budget, k, v); err != nil {
				return nil, err
			}
		}
		return d, nil
	case *concatExpr:
		parts := make([]string, len(e.parts))
		var n int64
		for i, p := range e.parts {
			v, err := r.eval(p)
			if err != nil {
				return nil, err
			}
			if parts[i], err = r.str(v, "'~'"); err != nil {
				return nil, err
			}
			n += int64(len(parts[i]))
		}
		if err := r.alloc(n, "'~'"); err != nil {
			return nil, err
		}
		return strings.Join(parts, ""), nil
	case *sliceExpr:
		return nil, errors.New("slice outside of a subscript")
	}
	return nil, fmt.Errorf("internal error: unknown expression %T", e)
}

// evalAll evaluates expressions in order into a new list's items.
func (r *renderer) evalAll(es []expr) ([]Value, error) {
	if err := r.allocValues(len(es), "list"); err != nil {
		return nil, err
	}
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
		if err := r.scan(len(kw.name), "keyword argument"); err != nil { // it is matched by name
			return nil, nil, err
		}
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
		if err := r.work(1, "call"); err != nil {
			return nil, err
		}
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
		return nil, lineErr(f.line, fmt.Errorf("no filter named %s", strRepr(f.name)))
	}
	args, kwargs, err := r.evalArgs(f.args, f.kwargs)
	if err != nil {
		return nil, err
	}
	if err := r.work(1, "filter"); err != nil {
		return nil, err
	}
	out, err := fn(r, v, args, kwargs)
	if err != nil {
		var le *LimitError
		if errors.As(err, &le) {
			return nil, lineErr(f.line, err)
		}
		return nil, lineErr(f.line, fmt.Errorf("filter %s: %w", f.name, err))
	}
	return out, nil
}
