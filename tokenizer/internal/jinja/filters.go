package jinja

import (
	"errors"
	"fmt"
	"html"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

type filterFunc func(r *renderer, v Value, args []Value, kwargs []kwarg) (Value, error)

var filters map[string]filterFunc

type testFunc func(r *renderer, v Value, args []Value) (Value, error)

var tests map[string]testFunc

func init() {
	filters = map[string]filterFunc{
		"length":     filterLength,
		"count":      filterLength,
		"default":    filterDefault,
		"d":          filterDefault,
		"trim":       filterTrim,
		"join":       filterJoin,
		"first":      filterFirst,
		"last":       filterLast,
		"list":       filterList,
		"string":     strFilter("string", nil),
		"safe":       strFilter("safe", nil),
		"lower":      strFilter("lower", strings.ToLower),
		"upper":      strFilter("upper", pyUpper),
		"capitalize": strFilter("capitalize", pyCapitalize),
		"title":      strFilter("title", jinjaTitle),
		"replace":    filterReplace,
		"int":        filterInt,
		"float":      filterFloat,
		"abs":        filterAbs,
		"round":      filterRound,
		"items":      filterItems,
		"dictsort":   filterDictsort,
		"map":        filterMap,
		"select":     selectFilter(false, false),
		"reject":     selectFilter(true, false),
		"selectattr": selectFilter(false, true),
		"rejectattr": selectFilter(true, true),
		"unique":     filterUnique,
		"sort":       filterSort,
		"reverse":    filterReverse,
		"sum":        filterSum,
		"min":        minMaxFilter(-1),
		"max":        minMaxFilter(1),
		"indent":     filterIndent,
		"tojson":     filterToJSON,
		"escape":     filterEscape,
		"e":          filterEscape,
		"wordcount":  filterWordcount,
		"attr":       filterAttr,
		"format":     filterFormat,
	}
	tests = map[string]testFunc{
		"defined":   func(_ *renderer, v Value, _ []Value) (Value, error) { _, u := v.(Undefined); return !u, nil },
		"undefined": func(_ *renderer, v Value, _ []Value) (Value, error) { _, u := v.(Undefined); return u, nil },
		"none":      func(_ *renderer, v Value, _ []Value) (Value, error) { return v == nil, nil },
		"boolean":   func(_ *renderer, v Value, _ []Value) (Value, error) { _, ok := v.(bool); return ok, nil },
		"true":      func(_ *renderer, v Value, _ []Value) (Value, error) { b, ok := v.(bool); return ok && b, nil },
		"false":     func(_ *renderer, v Value, _ []Value) (Value, error) { b, ok := v.(bool); return ok && !b, nil },
		"integer": func(_ *renderer, v Value, _ []Value) (Value, error) {
			switch v.(type) {
			case int64, *big.Int:
				return true, nil
			}
			return false, nil
		},
		"float": func(_ *renderer, v Value, _ []Value) (Value, error) { _, ok := v.(float64); return ok, nil },
		"number": func(_ *renderer, v Value, _ []Value) (Value, error) {
			_, ok := numeric(v)
			return ok, nil
		},
		"string":  func(_ *renderer, v Value, _ []Value) (Value, error) { _, ok := v.(string); return ok, nil },
		"mapping": func(_ *renderer, v Value, _ []Value) (Value, error) { _, ok := v.(*Dict); return ok, nil },
		"sequence": func(_ *renderer, v Value, _ []Value) (Value, error) {
			switch v.(type) {
			case string, *List, *Dict:
				return true, nil
			}
			return false, nil
		},
		"iterable": func(_ *renderer, v Value, _ []Value) (Value, error) {
			switch v.(type) {
			case string, *List, *Dict, Undefined:
				return true, nil
			}
			return false, nil
		},
		"callable": func(_ *renderer, v Value, _ []Value) (Value, error) { _, ok := v.(*Func); return ok, nil },
		"sameas": func(r *renderer, v Value, a []Value) (Value, error) {
			if len(a) != 1 {
				return nil, errors.New("test sameas takes one argument")
			}
			if s, ok := v.(string); ok {
				if err := r.scan(len(s), "test sameas"); err != nil {
					return nil, err
				}
			}
			return sameAs(v, a[0]), nil
		},
		"escaped": func(_ *renderer, v Value, _ []Value) (Value, error) { return false, nil },
		"divisibleby": func(r *renderer, v Value, a []Value) (Value, error) {
			if len(a) != 1 {
				return nil, errors.New("divisibleby takes one argument")
			}
			m, err := r.arith("%", v, a[0])
			if err != nil {
				return nil, err
			}
			return r.equal(m, int64(0))
		},
		"even": func(r *renderer, v Value, _ []Value) (Value, error) {
			m, err := r.arith("%", v, int64(2))
			if err != nil {
				return nil, err
			}
			return r.equal(m, int64(0))
		},
		"odd": func(r *renderer, v Value, _ []Value) (Value, error) {
			m, err := r.arith("%", v, int64(2))
			if err != nil {
				return nil, err
			}
			return r.equal(m, int64(1))
		},
		"lower": caseTest("islower"),
		"upper": caseTest("isupper"),
		"in": func(r *renderer, v Value, a []Value) (Value, error) {
			if len(a) != 1 {
				return nil, errors.New("in takes one argument")
			}
			return r.contains(a[0], v)
		},
		"filter": func(_ *renderer, v Value, _ []Value) (Value, error) {
			s, _ := v.(string)
			_, ok := filters[s]
			return ok, nil
		},
		"test": func(_ *renderer, v Value, _ []Value) (Value, error) {
			s, _ := v.(string)
			_, ok := tests[s]
			return ok, nil
		},
	}
	for _, op := range []struct{ names []string }{
		{[]string{"==", "eq", "equalto"}}, {[]string{"!=", "ne"}}, {[]string{"<", "lt", "lessthan"}},
		{[]string{"<=", "le"}}, {[]string{">", "gt", "greaterthan"}}, {[]string{">=", "ge"}},
	} {
		sym := op.names[0]
		for _, n := range op.names {
			tests[n] = func(r *renderer, v Value, a []Value) (Value, error) {
				if len(a) != 1 {
					return nil, fmt.Errorf("test %s takes one argument", n)
				}
				return r.compareOp(sym, v, a[0])
			}
		}
	}
}

func sameAs(a, b Value) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case bool:
		bb, ok := b.(bool)
		return ok && a == bb
	case int64:
		bb, ok := b.(int64)
		return ok && a == bb && a >= -5 && a <= 256
	case string:
		bb, ok := b.(string)
		return ok && a == bb
	case *List, *Dict, *Namespace, *Func, *Loop:
		return a == b
	}
	return false
}

func noArgs(name string, a []Value, kw []kwarg) error {
	if len(a) > 0 || len(kw) > 0 {
		return fmt.Errorf("%s takes no arguments", name)
	}
	return nil
}

// strFilter is a filter of str(v) through f (nil: str(v) itself).
func strFilter(name string, f func(string) string) filterFunc {
	op := "filter " + name
	return func(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
		if err := noArgs(name, a, kw); err != nil {
			return nil, err
		}
		s, err := r.str(v, op)
		if err != nil || f == nil {
			return s, err
		}
		return r.caseMap(s, op, f)
	}
}

// caseTest is the lower/upper test: str(v).islower() / isupper().
func caseTest(pred string) testFunc {
	op := "test " + pred[2:]
	return func(r *renderer, v Value, _ []Value) (Value, error) {
		s, err := r.str(v, op)
		if err != nil {
			return nil, err
		}
		if err := r.runes(len(s), op); err != nil {
			return nil, err
		}
		return strPredicate(pred, s), nil
	}
}

func filterLength(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("length", a, kw); err != nil {
		return nil, err
	}
	n, err := r.length(v)
	return int64(n), err
}

func filterDefault(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("default", a, kw, 2, "default_value", "boolean"); err != nil {
		return nil, err
	}
	def, ok := argAt(a, kw, 0, "default_value")
	if !ok {
		def = ""
	}
	boolean, _ := argAt(a, kw, 1, "boolean")
	if _, u := v.(Undefined); u || (truthy(boolean) && !truthy(v)) {
		return def, nil
	}
	return v, nil
}

func filterTrim(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("trim", a, kw, 1, "chars"); err != nil {
		return nil, err
	}
	chars, _ := argAt(a, kw, 0, "chars")
	f, err := r.stripFunc([]Value{chars}, nil, "trim")
	if err != nil {
		return nil, err
	}
	s, err := r.str(v, "filter trim")
	if err != nil {
		return nil, err
	}
	if err := r.runes(len(s), "filter trim"); err != nil {
		return nil, err
	}
	return strings.TrimFunc(s, f), nil
}

// attrGetter is jinja2's make_attrgetter: "a.b.0" looks up a, then b, then
// item 0.
func attrGetter(r *renderer, attribute Value) (func(Value) (Value, error), error) {
	if attribute == nil {
		return func(v Value) (Value, error) { return v, nil }, nil
	}
	var parts []Value
	if s, ok := attribute.(string); ok {
		if err := r.scan(len(s), "attribute"); err != nil {
			return nil, err
		}
		if err := r.allocValues(strings.Count(s, ".")+1, "attribute"); err != nil {
			return nil, err
		}
		for _, p := range strings.Split(s, ".") {
			if n, err := strconv.ParseInt(p, 10, 64); err == nil {
				parts = append(parts, n)
			} else {
				parts = append(parts, p)
			}
		}
	} else {
		parts = []Value{attribute}
	}
	return func(v Value) (Value, error) {
		for _, p := range parts {
			if err := r.work(1, "attribute lookup"); err != nil {
				return nil, err
			}
			var err error
			if v, err = r.getitem(v, p); err != nil {
				return nil, err
			}
		}
		return v, nil
	}, nil
}

func filterJoin(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("join", a, kw, 2, "d", "attribute"); err != nil {
		return nil, err
	}
	sepV, ok := argAt(a, kw, 0, "d")
	if !ok {
		sepV = ""
	}
	sep, err := r.str(sepV, "filter join")
	if err != nil {
		return nil, err
	}
	attr, _ := argAt(a, kw, 1, "attribute")
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if err := r.allocValues(len(items), "filter join"); err != nil {
		return nil, err
	}
	get, err := attrGetter(r, attr)
	if err != nil {
		return nil, err
	}
	parts := make([]string, len(items))
	for i, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		if parts[i], err = r.str(x, "filter join"); err != nil {
			return nil, err
		}
	}
	return r.join(parts, sep, "filter join")
}

func filterFirst(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("first", a, kw); err != nil {
		return nil, err
	}
	if s, ok := v.(string); ok { // the first character, without listing them all
		if s == "" {
			return Undefined{Name: "No first item, sequence was empty."}, nil
		}
		r, w := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && w == 1 {
			return string(utf8.RuneError), nil
		}
		return s[:w], nil
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{Name: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func filterLast(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("last", a, kw); err != nil {
		return nil, err
	}
	if u, ok := v.(Undefined); ok {
		return nil, undefinedErr(u)
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{Name: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

func filterList(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("list", a, kw); err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if _, isStr := v.(string); isStr {
		return &List{Items: items}, nil // iterate made a new slice
	}
	if err := r.allocValues(len(items), "filter list"); err != nil {
		return nil, err
	}
	return &List{Items: append([]Value(nil), items...)}, nil
}

// jinjaTitle is the title filter: split on runs of [-\s({[<] and capitalise
// each word.
func jinjaTitle(s string) string {
	var sb strings.Builder
	start := true
	for _, r := range s {
		if r == '-' || r == '(' || r == '{' || r == '[' || r == '<' || pyIsSpace(r) {
			sb.WriteRune(r)
			start = true
			continue
		}
		if start {
			sb.WriteString(pyUpper(string(r)))
		} else {
			sb.WriteString(strings.ToLower(string(r)))
		}
		start = false
	}
	return sb.String()
}

func filterReplace(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("replace", a, kw, 3, "old", "new", "count"); err != nil {
		return nil, err
	}
	old, ok1 := argAt(a, kw, 0, "old")
	nw, ok2 := argAt(a, kw, 1, "new")
	if !ok1 || !ok2 {
		return nil, errors.New("replace needs old and new")
	}
	n := -1
	if c, ok := argAt(a, kw, 2, "count"); ok && c != nil {
		var err error
		if n, err = intArg(c, "count"); err != nil {
			return nil, err
		}
	}
	var strs [3]string
	for i, x := range []Value{v, old, nw} {
		var err error
		if strs[i], err = r.str(x, "filter replace"); err != nil {
			return nil, err
		}
	}
	return r.replace(strs[0], strs[1], strs[2], n, "filter replace")
}

// parseInt is Python's int(str, base) for the bases Jinja's int filter uses
// (false where Python raises ValueError, including CPython's digit limit).
func parseInt(s string, base int) (Value, bool) {
	s = strings.TrimFunc(s, pyIsSpace)
	s = strings.ReplaceAll(s, "_", "")
	if base == 0 {
		// big.Int's base 0 accepts the same 0x / 0o / 0b prefixes.
	} else if len(s) > 2 {
		sign := ""
		if s[0] == '-' || s[0] == '+' {
			sign, s = s[:1], s[1:]
		}
		p := strings.ToLower(s[:min(2, len(s))])
		if base == 16 && p == "0x" || base == 8 && p == "0o" || base == 2 && p == "0b" {
			s = s[2:]
		}
		s = sign + s
	}
	if base != 2 && base != 4 && base != 8 && base != 16 && base != 32 &&
		len(strings.TrimLeft(s, "+-")) > maxIntDigits {
		return nil, false
	}
	if len(s) > maxIntDigits*8 { // any base: beyond what the budget lets a template hold as an int
		return nil, false
	}
	b, ok := new(big.Int).SetString(s, base)
	if !ok {
		return nil, false
	}
	return intValue(b), true
}

func parseFloat(s string) (float64, bool) {
	s = strings.TrimFunc(s, pyIsSpace)
	switch strings.ToLower(strings.TrimLeft(s, "+-")) {
	case "inf", "infinity", "nan":
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}

func filterInt(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("int", a, kw, 2, "default", "base"); err != nil {
		return nil, err
	}
	def, ok := argAt(a, kw, 0, "default")
	if !ok {
		def = int64(0)
	}
	base := 10
	if b, ok := argAt(a, kw, 1, "base"); ok {
		var err error
		if base, err = intArg(b, "base"); err != nil {
			return nil, err
		}
	}
	switch x := v.(type) {
	case string:
		if err := r.scan(len(x), "filter int"); err != nil {
			return nil, err
		}
		if err := r.alloc(int64(len(x)), "filter int"); err != nil { // the cleaned copy
			return nil, err
		}
		if n, ok := parseInt(x, base); ok {
			return n, nil
		}
		if f, ok := parseFloat(x); ok && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return floatToInt(f), nil
		}
		return def, nil
	case bool:
		if x {
			return int64(1), nil
		}
		return int64(0), nil
	case int64, *big.Int:
		return x, nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return def, nil
		}
		return floatToInt(x), nil
	}
	return def, nil
}

func floatToInt(f float64) Value {
	b, _ := new(big.Float).SetFloat64(math.Trunc(f)).Int(nil)
	return intValue(b)
}

func filterFloat(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("float", a, kw, 1, "default"); err != nil {
		return nil, err
	}
	def, ok := argAt(a, kw, 0, "default")
	if !ok {
		def = 0.0
	}
	switch x := v.(type) {
	case string:
		if err := r.scan(len(x), "filter float"); err != nil {
			return nil, err
		}
		if err := r.alloc(int64(len(x)), "filter float"); err != nil { // the cleaned copy
			return nil, err
		}
		if f, ok := parseFloat(x); ok {
			return f, nil
		}
		return def, nil
	}
	if n, ok := numeric(v); ok {
		return n.float(), nil
	}
	return def, nil
}

func filterAbs(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("abs", a, kw); err != nil {
		return nil, err
	}
	n, ok := numeric(v)
	if !ok {
		return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
	}
	if n.isFloat {
		return math.Abs(n.f), nil
	}
	if err := r.alloc(words(n.i)*8, "filter abs"); err != nil {
		return nil, err
	}
	return intValue(new(big.Int).Abs(n.i)), nil
}

// Python's round(float, ndigits) returns x itself beyond these digits
// (CPython's NDIGITS_MAX/MIN for doubles).
const (
	roundDigitsMax = 323
	roundDigitsMin = -308
)

func filterRound(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("round", a, kw, 2, "precision", "method"); err != nil {
		return nil, err
	}
	prec := 0
	if p, ok := argAt(a, kw, 0, "precision"); ok {
		var err error
		if prec, err = intArg(p, "precision"); err != nil {
			return nil, err
		}
	}
	method := "common"
	if m, ok := argAt(a, kw, 1, "method"); ok {
		method, _ = m.(string)
	}
	n, ok := numeric(v)
	if !ok {
		return nil, fmt.Errorf("round: a number is required, not %s", typeName(v))
	}
	x := n.float()
	scale := math.Pow(10, float64(prec))
	switch method {
	case "common":
		if !n.isFloat {
			if prec >= 0 {
				return v, nil
			}
			return intValue(n.i), nil
		}
		switch {
		case prec > roundDigitsMax:
			return x, nil
		case prec < roundDigitsMin:
			return 0.0 * x, nil
		case prec < 0 || math.IsInf(x, 0) || math.IsNaN(x):
			return math.RoundToEven(x*scale) / scale, nil
		}
		f, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', prec, 64), 64)
		return f, nil
	case "ceil":
		return math.Ceil(x*scale) / scale, nil
	case "floor":
		return math.Floor(x*scale) / scale, nil
	}
	return nil, errors.New("method must be common, ceil or floor")
}

func filterItems(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("items", a, kw); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case Undefined:
		return &List{}, nil
	case *Dict:
		return r.dictItems(x)
	}
	return nil, fmt.Errorf("can only get item pairs from a mapping, not %s", typeName(v))
}

// sortKey lowers strings unless caseSensitive (charged to b).
func (b *budget) sortKey(caseSensitive bool) func(Value) (Value, error) {
	return func(v Value) (Value, error) {
		if s, ok := v.(string); ok && !caseSensitive {
			return b.caseMap(s, "sort key", strings.ToLower)
		}
		return v, nil
	}
}

func filterDictsort(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("dictsort", a, kw, 3, "case_sensitive", "by", "reverse"); err != nil {
		return nil, err
	}
	d, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("dictsort needs a dict, not %s", typeName(v))
	}
	cs, _ := argAt(a, kw, 0, "case_sensitive")
	by, ok := argAt(a, kw, 1, "by")
	if !ok {
		by = "key"
	}
	pos := 0
	switch by {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, errors.New("you can only sort by either \"key\" or \"value\"")
	}
	rev, _ := argAt(a, kw, 2, "reverse")
	list, err := r.dictItems(d)
	if err != nil {
		return nil, err
	}
	key := r.sortKey(truthy(cs))
	err = r.sortValues(list.Items, func(it Value) (Value, error) { return key(it.(*List).Items[pos]) }, truthy(rev))
	return list, err
}

func filterMap(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	var f func(Value) (Value, error)
	if attr, ok := argAt(nil, kw, -1, "attribute"); ok {
		get, err := attrGetter(r, attr)
		if err != nil {
			return nil, err
		}
		def, hasDef := argAt(nil, kw, -1, "default")
		f = func(x Value) (Value, error) {
			y, err := get(x)
			if _, u := y.(Undefined); u && hasDef {
				return def, nil
			}
			return y, err
		}
	} else {
		if len(a) == 0 {
			return nil, errors.New("map requires a filter argument")
		}
		name, _ := a[0].(string)
		fn, ok := filters[name]
		if !ok {
			return nil, fmt.Errorf("no filter named %s", shortRepr(a[0]))
		}
		rest := a[1:]
		f = func(x Value) (Value, error) { return fn(r, x, rest, kw) }
	}
	if err := r.allocValues(len(items), "filter map"); err != nil {
		return nil, err
	}
	out := &List{Items: make([]Value, len(items))}
	for i, it := range items {
		if err := r.work(1, "filter map"); err != nil {
			return nil, err
		}
		if out.Items[i], err = f(it); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func selectFilter(reject, byAttr bool) filterFunc {
	return func(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		get, _ := attrGetter(r, nil)
		if byAttr {
			if len(a) == 0 {
				return nil, errors.New("missing parameter for attribute name")
			}
			if get, err = attrGetter(r, a[0]); err != nil {
				return nil, err
			}
			a = a[1:]
		}
		test := func(x Value) (bool, error) { return truthy(x), nil }
		if len(a) > 0 {
			name, _ := a[0].(string)
			fn, ok := tests[name]
			if !ok {
				return nil, fmt.Errorf("no test named %s", shortRepr(a[0]))
			}
			rest := a[1:]
			test = func(x Value) (bool, error) {
				res, err := fn(r, x, rest)
				return truthy(res), err
			}
		}
		out := &List{}
		for _, it := range items {
			if err := r.work(1, "filter select"); err != nil {
				return nil, err
			}
			x, err := get(it)
			if err != nil {
				return nil, err
			}
			ok, err := test(x)
			if err != nil {
				return nil, err
			}
			if ok != reject {
				if err := r.allocValues(1, "filter select"); err != nil {
					return nil, err
				}
				out.Items = append(out.Items, it)
			}
		}
		return out, nil
	}
}

func filterUnique(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("unique", a, kw, 2, "case_sensitive", "attribute"); err != nil {
		return nil, err
	}
	cs, _ := argAt(a, kw, 0, "case_sensitive")
	attr, _ := argAt(a, kw, 1, "attribute")
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	get, err := attrGetter(r, attr)
	if err != nil {
		return nil, err
	}
	key := r.sortKey(truthy(cs))
	out := &List{}
	seen := map[any]bool{}
	for _, it := range items {
		if err := r.work(1, "filter unique"); err != nil {
			return nil, err
		}
		x, err := get(it)
		if err == nil {
			x, err = key(x)
		}
		if err != nil {
			return nil, err
		}
		h, err := hashKey(r.budget, x, 0)
		if err != nil {
			return nil, err
		}
		if !seen[h] {
			if err := r.alloc(dictEntrySize, "filter unique"); err != nil {
				return nil, err
			}
			seen[h] = true
			out.Items = append(out.Items, it)
		}
	}
	return out, nil
}

func filterSort(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("sort", a, kw, 3, "reverse", "case_sensitive", "attribute"); err != nil {
		return nil, err
	}
	rev, _ := argAt(a, kw, 0, "reverse")
	cs, _ := argAt(a, kw, 1, "case_sensitive")
	attr, _ := argAt(a, kw, 2, "attribute")
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if err := r.allocValues(len(items), "filter sort"); err != nil {
		return nil, err
	}
	items = append([]Value(nil), items...)
	get, err := attrGetter(r, attr)
	if err != nil {
		return nil, err
	}
	key := r.sortKey(truthy(cs))
	err = r.sortValues(items, func(x Value) (Value, error) {
		y, err := get(x)
		if err != nil {
			return nil, err
		}
		return key(y)
	}, truthy(rev))
	if err != nil {
		return nil, err
	}
	return &List{Items: items}, nil
}

func filterReverse(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("reverse", a, kw); err != nil {
		return nil, err
	}
	if s, ok := v.(string); ok {
		return r.sliceString(s, [3]Value{nil, nil, int64(-1)})
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if err := r.allocValues(len(items), "filter reverse"); err != nil {
		return nil, err
	}
	out := &List{Items: make([]Value, len(items))}
	for i, it := range items {
		out.Items[len(items)-1-i] = it
	}
	return out, nil
}

func filterSum(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("sum", a, kw, 2, "attribute", "start"); err != nil {
		return nil, err
	}
	attr, _ := argAt(a, kw, 0, "attribute")
	total, ok := argAt(a, kw, 1, "start")
	if !ok {
		total = int64(0)
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	get, err := attrGetter(r, attr)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		if err := r.work(1, "filter sum"); err != nil {
			return nil, err
		}
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		if total, err = r.arith("+", total, x); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func minMaxFilter(sign int) filterFunc {
	return func(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
		if err := checkArgs("min/max", a, kw, 2, "case_sensitive", "attribute"); err != nil {
			return nil, err
		}
		cs, _ := argAt(a, kw, 0, "case_sensitive")
		attr, _ := argAt(a, kw, 1, "attribute")
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{Name: "No aggregated item, sequence was empty."}, nil
		}
		get, err := attrGetter(r, attr)
		if err != nil {
			return nil, err
		}
		key := r.sortKey(truthy(cs))
		keyOf := func(x Value) (Value, error) {
			k, err := get(x)
			if err != nil {
				return nil, err
			}
			return key(k)
		}
		best := items[0]
		bk, err := keyOf(best)
		if err != nil {
			return nil, err
		}
		for _, it := range items[1:] {
			if err := r.work(1, "filter min/max"); err != nil {
				return nil, err
			}
			k, err := keyOf(it)
			if err != nil {
				return nil, err
			}
			c, err := r.compare(k, bk)
			if err != nil {
				return nil, err
			}
			if c*sign > 0 {
				best, bk = it, k
			}
		}
		return best, nil
	}
}

func filterIndent(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("indent", a, kw, 3, "width", "first", "blank"); err != nil {
		return nil, err
	}
	ind := "    "
	if w, ok := argAt(a, kw, 0, "width"); ok {
		if s, isStr := w.(string); isStr {
			ind = s
		} else {
			n, err := intArg(w, "width")
			if err != nil {
				return nil, err
			}
			if err := r.alloc(int64(max(n, 0)), "filter indent"); err != nil {
				return nil, err
			}
			ind = strings.Repeat(" ", max(n, 0))
		}
	}
	first, _ := argAt(a, kw, 1, "first")
	blank, _ := argAt(a, kw, 2, "blank")
	s, err := r.str(v, "filter indent")
	if err != nil {
		return nil, err
	}
	lines, err := r.splitLines(s+"\n", false)
	if err != nil {
		return nil, err
	}
	// Every line but the first gets ind (blank ones only with blank=True),
	// and the first one too with first=True.
	n := int64(0)
	for i, l := range lines {
		if i > 0 && (l != "" || truthy(blank)) || i == 0 && truthy(first) {
			n++
		}
	}
	size := addSat(addSat(int64(len(s)), int64(len(lines))), mulSat(n, int64(len(ind))))
	if err := r.alloc(size, "filter indent"); err != nil {
		return nil, err
	}
	var sb strings.Builder
	sb.Grow(int(size))
	if truthy(first) {
		sb.WriteString(ind)
	}
	for i, l := range lines {
		if i > 0 {
			sb.WriteByte('\n')
			if l != "" || truthy(blank) {
				sb.WriteString(ind)
			}
		}
		sb.WriteString(l)
	}
	return sb.String(), nil
}

func filterEscape(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("escape", a, kw); err != nil {
		return nil, err
	}
	s, err := r.str(v, "filter escape")
	if err != nil {
		return nil, err
	}
	if err := r.scan(len(s), "filter escape"); err != nil {
		return nil, err
	}
	size := int64(len(s))
	for i := range len(s) {
		switch s[i] {
		case '&', '\'', '"':
			size += 4 // &amp; &#39; &#34;
		case '<', '>':
			size += 3 // &lt; &gt;
		}
	}
	if err := r.alloc(size, "filter escape"); err != nil {
		return nil, err
	}
	return html.EscapeString(s), nil // & < > " ' as markupsafe does
}

func filterWordcount(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("wordcount", a, kw); err != nil {
		return nil, err
	}
	s, err := r.str(v, "filter wordcount")
	if err != nil {
		return nil, err
	}
	if err := r.runes(len(s), "filter wordcount"); err != nil {
		return nil, err
	}
	n, in := int64(0), false
	for _, r := range s {
		w := unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || unicode.IsNumber(r)
		if w && !in {
			n++
		}
		in = w
	}
	return n, nil
}

func filterAttr(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if len(a) != 1 || len(kw) > 0 {
		return nil, errors.New("attr takes one argument")
	}
	// Only Python attributes (methods, namespace and loop attributes), never
	// items: jinja2's do_attr uses getattr alone.
	name, err := r.str(a[0], "filter attr")
	if err != nil {
		return nil, err
	}
	switch o := v.(type) {
	case *Dict:
		if m := dictMethod(o, name); m != nil {
			return m, nil
		}
	case string:
		if m := strMethod(o, name); m != nil {
			return m, nil
		}
	case *List:
		if m := listMethod(o, name); m != nil {
			return m, nil
		}
	case *Namespace, *Loop:
		return r.getattr(v, name)
	}
	return r.noAttr(v, name)
}

func filterFormat(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if len(kw) > 0 {
		return nil, errors.New("format with keyword arguments is not supported")
	}
	s, err := r.str(v, "filter format")
	if err != nil {
		return nil, err
	}
	return r.percentFormat(s, &List{Items: a, Tuple: true})
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False).
func filterToJSON(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("tojson", a, kw, 4, "ensure_ascii", "indent", "separators", "sort_keys"); err != nil {
		return nil, err
	}
	opt := jsonOpts{itemSep: ", ", keySep: ": "}
	if ea, ok := argAt(a, kw, 0, "ensure_ascii"); ok {
		opt.ensureASCII = truthy(ea)
	}
	if ind, ok := argAt(a, kw, 1, "indent"); ok && ind != nil {
		opt.indented = true
		opt.itemSep = ","
		if s, isStr := ind.(string); isStr {
			opt.indent = s
		} else {
			n, err := intArg(ind, "indent")
			if err != nil {
				return nil, err
			}
			if err := r.alloc(int64(max(n, 0)), "filter tojson"); err != nil {
				return nil, err
			}
			opt.indent = strings.Repeat(" ", max(n, 0))
		}
	}
	if sep, ok := argAt(a, kw, 2, "separators"); ok && sep != nil {
		items, err := r.iterate(sep)
		if err != nil || len(items) != 2 {
			return nil, errors.New("separators must be a pair of strings")
		}
		var strs [2]string
		for i, it := range items {
			if strs[i], err = r.str(it, "filter tojson"); err != nil {
				return nil, err
			}
		}
		opt.itemSep, opt.keySep = strs[0], strs[1]
	}
	if sk, ok := argAt(a, kw, 3, "sort_keys"); ok {
		opt.sortKeys = truthy(sk)
	}
	p := &printer{b: r.budget, op: "filter tojson"}
	if err := writeJSON(p, v, opt, 0); err != nil {
		return nil, err
	}
	return p.result()
}

type jsonOpts struct {
	ensureASCII     bool
	indented        bool
	indent          string
	itemSep, keySep string
	sortKeys        bool
}

// writeJSON is Python's json.dumps encoder.
func writeJSON(p *printer, v Value, opt jsonOpts, level int) error {
	if p.err != nil {
		return p.err
	}
	if level >= p.b.maxDepth() {
		return p.b.depthErr("filter tojson")
	}
	newline := func(l int) {
		if opt.indented {
			p.WriteByte('\n')
			for range l {
				if p.err != nil {
					return
				}
				p.WriteString(opt.indent)
			}
		}
	}
	switch x := v.(type) {
	case nil:
		p.WriteString("null")
	case bool:
		if x {
			p.WriteString("true")
		} else {
			p.WriteString("false")
		}
	case int64, *big.Int:
		p.str(x)
	case float64:
		switch {
		case math.IsNaN(x):
			p.WriteString("NaN")
		case math.IsInf(x, 1):
			p.WriteString("Infinity")
		case math.IsInf(x, -1):
			p.WriteString("-Infinity")
		default:
			p.WriteString(floatRepr(x))
		}
	case string:
		writeJSONString(p, x, opt.ensureASCII)
	case *List:
		if len(x.Items) == 0 {
			p.WriteString("[]")
			return p.err
		}
		p.WriteByte('[')
		for i, it := range x.Items {
			if i > 0 {
				p.WriteString(opt.itemSep)
			}
			newline(level + 1)
			if err := writeJSON(p, it, opt, level+1); err != nil {
				return err
			}
		}
		newline(level)
		p.WriteByte(']')
	case *Dict:
		if x.Len() == 0 {
			p.WriteString("{}")
			return p.err
		}
		order := make([]int, x.Len())
		for i := range order {
			order[i] = i
		}
		if opt.sortKeys {
			if err := p.b.alloc(mulSat(int64(len(order)), itemSize), "filter tojson"); err != nil {
				return err
			}
			keys := make([]Value, len(order))
			for i := range keys {
				keys[i] = &List{Items: []Value{x.keys[i], int64(i)}, Tuple: true}
			}
			if err := p.b.sortValues(keys, func(k Value) (Value, error) { return k.(*List).Items[0], nil }, false); err != nil {
				return err
			}
			for i, k := range keys {
				order[i] = int(k.(*List).Items[1].(int64))
			}
		}
		p.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				p.WriteString(opt.itemSep)
			}
			newline(level + 1)
			switch k := x.keys[i].(type) {
			case string:
				writeJSONString(p, k, opt.ensureASCII)
			case nil, bool, int64, *big.Int:
				p.WriteByte('"')
				if err := writeJSON(p, k, opt, level); err != nil {
					return err
				}
				p.WriteByte('"')
			case float64:
				writeJSONString(p, floatRepr(k), opt.ensureASCII)
			default:
				return fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			p.WriteString(opt.keySep)
			if err := writeJSON(p, x.vals[i], opt, level+1); err != nil {
				return err
			}
		}
		newline(level)
		p.WriteByte('}')
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return p.err
}

func writeJSONString(p *printer, s string, ensureASCII bool) {
	p.WriteByte('"')
	for len(s) > 0 && p.err == nil {
		// Runs that need no escape go out in one write.
		n := 0
		for n < len(s) {
			c := s[n]
			if c < 0x20 || c == '"' || c == '\\' || ensureASCII && c > 0x7E {
				break
			}
			if c >= utf8.RuneSelf {
				r, w := utf8.DecodeRuneInString(s[n:])
				if r == utf8.RuneError && w == 1 {
					break
				}
				n += w
				continue
			}
			n++
		}
		if n > 0 {
			p.WriteString(s[:n])
			s = s[n:]
			continue
		}
		r, w := utf8.DecodeRuneInString(s)
		s = s[w:]
		switch r {
		case '"':
			p.WriteString(`\"`)
		case '\\':
			p.WriteString(`\\`)
		case '\n':
			p.WriteString(`\n`)
		case '\r':
			p.WriteString(`\r`)
		case '\t':
			p.WriteString(`\t`)
		case '\b':
			p.WriteString(`\b`)
		case '\f':
			p.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				p.WriteString(fmt.Sprintf(`\u%04x`, r))
			case ensureASCII && r > 0x7E:
				if r > 0xFFFF {
					r1, r2 := utf16.EncodeRune(r)
					p.WriteString(fmt.Sprintf(`\u%04x\u%04x`, r1, r2))
				} else {
					p.WriteString(fmt.Sprintf(`\u%04x`, r))
				}
			default:
				p.WriteRune(r)
			}
		}
	}
	p.WriteByte('"')
}
