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
)

type filterFunc func(r *renderer, v Value, args []Value, kwargs []kwarg) (Value, error)

var filters map[string]filterFunc

type testFunc func(r *renderer, v Value, args []Value) (Value, error)

var tests map[string]testFunc

func init() {
	filters = map[string]filterFunc{
		"length":  filterLength,
		"count":   filterLength,
		"default": filterDefault,
		"d":       filterDefault,
		"trim":    filterTrim,
		"join":    filterJoin,
		"first":   filterFirst,
		"last":    filterLast,
		"list":    filterList,
		"string": func(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
			return toStr(v), noArgs("string", a, kw)
		},
		"lower": func(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
			return strings.ToLower(toStr(v)), noArgs("lower", a, kw)
		},
		"upper": func(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
			return pyUpper(toStr(v)), noArgs("upper", a, kw)
		},
		"capitalize": func(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
			return pyCapitalize(toStr(v)), noArgs("capitalize", a, kw)
		},
		"title":      filterTitle,
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
		"safe": func(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
			return toStr(v), noArgs("safe", a, kw)
		},
		"escape":    filterEscape,
		"e":         filterEscape,
		"wordcount": filterWordcount,
		"attr":      filterAttr,
		"format":    filterFormat,
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
		"sameas": func(_ *renderer, v Value, a []Value) (Value, error) {
			return oneArg("sameas", a, func(o Value) bool { return sameAs(v, o) })
		},
		"escaped": func(_ *renderer, v Value, _ []Value) (Value, error) { return false, nil },
		"divisibleby": func(_ *renderer, v Value, a []Value) (Value, error) {
			if len(a) != 1 {
				return nil, errors.New("divisibleby takes one argument")
			}
			m, err := arith("%", v, a[0])
			if err != nil {
				return nil, err
			}
			return pyEqual(m, int64(0)), nil
		},
		"even": func(_ *renderer, v Value, _ []Value) (Value, error) {
			m, err := arith("%", v, int64(2))
			return err == nil && pyEqual(m, int64(0)), err
		},
		"odd": func(_ *renderer, v Value, _ []Value) (Value, error) {
			m, err := arith("%", v, int64(2))
			return err == nil && pyEqual(m, int64(1)), err
		},
		"lower": func(_ *renderer, v Value, _ []Value) (Value, error) {
			s := toStr(v)
			return strings.ToLower(s) == s, nil
		},
		"upper": func(_ *renderer, v Value, _ []Value) (Value, error) {
			s := toStr(v)
			return pyUpper(s) == s, nil
		},
		"in": func(_ *renderer, v Value, a []Value) (Value, error) {
			if len(a) != 1 {
				return nil, errors.New("in takes one argument")
			}
			return contains(a[0], v)
		},
		"filter": func(_ *renderer, v Value, _ []Value) (Value, error) { _, ok := filters[toStr(v)]; return ok, nil },
		"test":   func(_ *renderer, v Value, _ []Value) (Value, error) { _, ok := tests[toStr(v)]; return ok, nil },
	}
	for _, op := range []struct{ names []string }{
		{[]string{"==", "eq", "equalto"}}, {[]string{"!=", "ne"}}, {[]string{"<", "lt", "lessthan"}},
		{[]string{"<=", "le"}}, {[]string{">", "gt", "greaterthan"}}, {[]string{">=", "ge"}},
	} {
		sym := op.names[0]
		for _, n := range op.names {
			tests[n] = func(_ *renderer, v Value, a []Value) (Value, error) {
				if len(a) != 1 {
					return nil, fmt.Errorf("test %s takes one argument", n)
				}
				return compare(sym, v, a[0])
			}
		}
	}
}

func oneArg(name string, a []Value, f func(Value) bool) (Value, error) {
	if len(a) != 1 {
		return nil, fmt.Errorf("test %s takes one argument", name)
	}
	return f(a[0]), nil
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

func filterLength(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("length", a, kw); err != nil {
		return nil, err
	}
	n, err := length(v)
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

func filterTrim(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("trim", a, kw, 1, "chars"); err != nil {
		return nil, err
	}
	chars, _ := argAt(a, kw, 0, "chars")
	f, err := stripFunc([]Value{chars}, nil, "trim")
	if err != nil {
		return nil, err
	}
	return strings.TrimFunc(toStr(v), f), nil
}

func attrGetter(r *renderer, attribute Value) func(Value) (Value, error) {
	if attribute == nil {
		return func(v Value) (Value, error) { return v, nil }
	}
	var parts []Value
	if s, ok := attribute.(string); ok {
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
			var err error
			if v, err = getitem(v, p); err != nil {
				return nil, err
			}
		}
		return v, nil
	}
}

func filterJoin(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("join", a, kw, 2, "d", "attribute"); err != nil {
		return nil, err
	}
	sep, ok := argAt(a, kw, 0, "d")
	if !ok {
		sep = ""
	}
	attr, _ := argAt(a, kw, 1, "attribute")
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	get := attrGetter(r, attr)
	parts := make([]string, len(items))
	for i, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		parts[i] = toStr(x)
	}
	return strings.Join(parts, toStr(sep)), nil
}

func filterFirst(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("first", a, kw); err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{Name: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func filterLast(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("last", a, kw); err != nil {
		return nil, err
	}
	if u, ok := v.(Undefined); ok {
		return nil, undefinedErr(u)
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{Name: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

func filterList(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("list", a, kw); err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return &List{Items: append([]Value(nil), items...)}, nil
}

func filterTitle(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("title", a, kw); err != nil {
		return nil, err
	}
	// jinja2: split on runs of [-\s({[<] and capitalise each word.
	s := toStr(v)
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
	return sb.String(), nil
}

func filterReplace(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
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
	return strings.Replace(toStr(v), toStr(old), toStr(nw), n), nil
}

// parseInt is Python's int(str, base) for the bases Jinja's int filter uses.
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

func filterInt(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
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

func filterFloat(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := checkArgs("float", a, kw, 1, "default"); err != nil {
		return nil, err
	}
	def, ok := argAt(a, kw, 0, "default")
	if !ok {
		def = 0.0
	}
	switch x := v.(type) {
	case string:
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

func filterAbs(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
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
	return intValue(new(big.Int).Abs(n.i)), nil
}

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
		method = toStr(m)
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
		if prec < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
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

func filterItems(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("items", a, kw); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case Undefined:
		return &List{}, nil
	case *Dict:
		return dictItems(x), nil
	}
	return nil, fmt.Errorf("can only get item pairs from a mapping, not %s", typeName(v))
}

func sortKey(caseSensitive bool) func(Value) Value {
	return func(v Value) Value {
		if s, ok := v.(string); ok && !caseSensitive {
			return strings.ToLower(s)
		}
		return v
	}
}

func filterDictsort(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
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
	items := dictItems(d).Items
	key := sortKey(truthy(cs))
	err := sortValues(items, func(it Value) Value { return key(it.(*List).Items[pos]) }, truthy(rev))
	return &List{Items: items}, err
}

func filterMap(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var f func(Value) (Value, error)
	if attr, ok := argAt(nil, kw, -1, "attribute"); ok {
		get := attrGetter(r, attr)
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
		name := toStr(a[0])
		fn, ok := filters[name]
		if !ok {
			return nil, fmt.Errorf("no filter named %q", name)
		}
		rest := a[1:]
		f = func(x Value) (Value, error) { return fn(r, x, rest, kw) }
	}
	out := &List{Items: make([]Value, len(items))}
	for i, it := range items {
		if out.Items[i], err = f(it); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func selectFilter(reject, byAttr bool) filterFunc {
	return func(r *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		get := attrGetter(r, nil)
		if byAttr {
			if len(a) == 0 {
				return nil, errors.New("missing parameter for attribute name")
			}
			get = attrGetter(r, a[0])
			a = a[1:]
		}
		test := func(x Value) (bool, error) { return truthy(x), nil }
		if len(a) > 0 {
			name := toStr(a[0])
			fn, ok := tests[name]
			if !ok {
				return nil, fmt.Errorf("no test named %q", name)
			}
			rest := a[1:]
			test = func(x Value) (bool, error) {
				res, err := fn(r, x, rest)
				return truthy(res), err
			}
		}
		out := &List{}
		for _, it := range items {
			x, err := get(it)
			if err != nil {
				return nil, err
			}
			ok, err := test(x)
			if err != nil {
				return nil, err
			}
			if ok != reject {
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
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	get := attrGetter(r, attr)
	key := sortKey(truthy(cs))
	out := &List{}
	seen := map[any]bool{}
	for _, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		h, err := hashKey(key(x))
		if err != nil {
			return nil, err
		}
		if !seen[h] {
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
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	items = append([]Value(nil), items...)
	get := attrGetter(r, attr)
	key := sortKey(truthy(cs))
	var getErr error
	err = sortValues(items, func(x Value) Value {
		y, e := get(x)
		if e != nil && getErr == nil {
			getErr = e
		}
		return key(y)
	}, truthy(rev))
	if getErr != nil {
		return nil, getErr
	}
	return &List{Items: items}, err
}

func filterReverse(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("reverse", a, kw); err != nil {
		return nil, err
	}
	if s, ok := v.(string); ok {
		runes := []rune(s)
		for i, j := 0, len(runes)-1; i < j; i, j = i+1, j-1 {
			runes[i], runes[j] = runes[j], runes[i]
		}
		return string(runes), nil
	}
	items, err := iterate(v)
	if err != nil {
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
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	get := attrGetter(r, attr)
	for _, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		if total, err = arith("+", total, x); err != nil {
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
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{Name: "No aggregated item, sequence was empty."}, nil
		}
		get := attrGetter(r, attr)
		key := sortKey(truthy(cs))
		best := items[0]
		bk, err := get(best)
		if err != nil {
			return nil, err
		}
		bk = key(bk)
		for _, it := range items[1:] {
			k, err := get(it)
			if err != nil {
				return nil, err
			}
			k = key(k)
			c, err := pyCompare(k, bk)
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

func filterIndent(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
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
			ind = strings.Repeat(" ", max(n, 0))
		}
	}
	first, _ := argAt(a, kw, 1, "first")
	blank, _ := argAt(a, kw, 2, "blank")
	s := toStr(v) + "\n"
	lines := splitLines(s, false)
	var rv string
	if truthy(blank) {
		rv = strings.Join(lines, "\n"+ind)
	} else {
		rv = lines[0]
		if len(lines) > 1 {
			rest := make([]string, len(lines)-1)
			for i, l := range lines[1:] {
				if l != "" {
					l = ind + l
				}
				rest[i] = l
			}
			rv += "\n" + strings.Join(rest, "\n")
		}
	}
	if truthy(first) {
		rv = ind + rv
	}
	return rv, nil
}

func filterEscape(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("escape", a, kw); err != nil {
		return nil, err
	}
	return html.EscapeString(toStr(v)), nil // & < > " ' as markupsafe does
}

func filterWordcount(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if err := noArgs("wordcount", a, kw); err != nil {
		return nil, err
	}
	n, in := int64(0), false
	for _, r := range toStr(v) {
		w := unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || unicode.IsNumber(r)
		if w && !in {
			n++
		}
		in = w
	}
	return n, nil
}

func filterAttr(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if len(a) != 1 || len(kw) > 0 {
		return nil, errors.New("attr takes one argument")
	}
	// Only Python attributes (methods, namespace and loop attributes), never
	// items: jinja2's do_attr uses getattr alone.
	name := toStr(a[0])
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
		return getattr(v, name)
	}
	return Undefined{Name: fmt.Sprintf("'%s object' has no attribute '%s'", jinjaTypeName(v), name)}, nil
}

func filterFormat(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
	if len(kw) > 0 {
		return nil, errors.New("format with keyword arguments is not supported")
	}
	return percentFormat(toStr(v), &List{Items: a, Tuple: true})
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False).
func filterToJSON(_ *renderer, v Value, a []Value, kw []kwarg) (Value, error) {
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
			opt.indent = strings.Repeat(" ", max(n, 0))
		}
	}
	if sep, ok := argAt(a, kw, 2, "separators"); ok && sep != nil {
		items, err := iterate(sep)
		if err != nil || len(items) != 2 {
			return nil, errors.New("separators must be a pair of strings")
		}
		opt.itemSep, opt.keySep = toStr(items[0]), toStr(items[1])
	}
	if sk, ok := argAt(a, kw, 3, "sort_keys"); ok {
		opt.sortKeys = truthy(sk)
	}
	var sb strings.Builder
	if err := writeJSON(&sb, v, opt, 0); err != nil {
		return nil, err
	}
	return sb.String(), nil
}

type jsonOpts struct {
	ensureASCII     bool
	indented        bool
	indent          string
	itemSep, keySep string
	sortKeys        bool
}

// writeJSON is Python's json.dumps encoder.
func writeJSON(sb *strings.Builder, v Value, opt jsonOpts, level int) error {
	if level > maxDepth {
		return errors.New("value nested too deeply for JSON")
	}
	newline := func(l int) {
		if opt.indented {
			sb.WriteByte('\n')
			sb.WriteString(strings.Repeat(opt.indent, l))
		}
	}
	switch x := v.(type) {
	case nil:
		sb.WriteString("null")
	case bool:
		if x {
			sb.WriteString("true")
		} else {
			sb.WriteString("false")
		}
	case int64, *big.Int:
		sb.WriteString(toStr(x))
	case float64:
		switch {
		case math.IsNaN(x):
			sb.WriteString("NaN")
		case math.IsInf(x, 1):
			sb.WriteString("Infinity")
		case math.IsInf(x, -1):
			sb.WriteString("-Infinity")
		default:
			sb.WriteString(floatRepr(x))
		}
	case string:
		writeJSONString(sb, x, opt.ensureASCII)
	case *List:
		if len(x.Items) == 0 {
			sb.WriteString("[]")
			return nil
		}
		sb.WriteByte('[')
		for i, it := range x.Items {
			if i > 0 {
				sb.WriteString(opt.itemSep)
			}
			newline(level + 1)
			if err := writeJSON(sb, it, opt, level+1); err != nil {
				return err
			}
		}
		newline(level)
		sb.WriteByte(']')
	case *Dict:
		if x.Len() == 0 {
			sb.WriteString("{}")
			return nil
		}
		order := make([]int, x.Len())
		for i := range order {
			order[i] = i
		}
		if opt.sortKeys {
			keys := make([]Value, len(order))
			for i := range keys {
				keys[i] = &List{Items: []Value{x.keys[i], int64(i)}, Tuple: true}
			}
			if err := sortValues(keys, func(k Value) Value { return k.(*List).Items[0] }, false); err != nil {
				return err
			}
			for i, k := range keys {
				order[i] = int(k.(*List).Items[1].(int64))
			}
		}
		sb.WriteByte('{')
		for n, i := range order {
			if n > 0 {
				sb.WriteString(opt.itemSep)
			}
			newline(level + 1)
			var key string
			switch k := x.keys[i].(type) {
			case string:
				key = k
			case nil, bool, int64, *big.Int:
				var kb strings.Builder
				_ = writeJSON(&kb, k, opt, level)
				key = kb.String()
			case float64:
				key = floatRepr(k)
			default:
				return fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
			}
			writeJSONString(sb, key, opt.ensureASCII)
			sb.WriteString(opt.keySep)
			if err := writeJSON(sb, x.vals[i], opt, level+1); err != nil {
				return err
			}
		}
		newline(level)
		sb.WriteByte('}')
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func writeJSONString(sb *strings.Builder, s string, ensureASCII bool) {
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(sb, `\u%04x`, r)
			case ensureASCII && r > 0x7E:
				if r > 0xFFFF {
					r1, r2 := utf16.EncodeRune(r)
					fmt.Fprintf(sb, `\u%04x\u%04x`, r1, r2)
				} else {
					fmt.Fprintf(sb, `\u%04x`, r)
				}
			default:
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
}
