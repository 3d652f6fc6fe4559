package jinja

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// floatDivMod is Python's float // and % (CPython's _float_div_mod).
func floatDivMod(x, y float64) (float64, float64) {
	mod := math.Mod(x, y)
	div := (x - mod) / y
	if mod != 0 {
		if (y < 0) != (mod < 0) {
			mod += y
			div--
		}
	} else {
		mod = math.Copysign(0, y)
	}
	if div == 0 {
		return math.Copysign(0, x/y), mod
	}
	f := math.Floor(div)
	if div-f > 0.5 {
		f++
	}
	return f, mod
}

func pyPow(x, y float64) (Value, error) {
	if x == 0 && y < 0 {
		return nil, errors.New("0.0 cannot be raised to a negative power")
	}
	return math.Pow(x, y), nil
}

// getattr is jinja2's SandboxedEnvironment.getattr: a Python attribute of
// the object (a method), else obj[attr], else Undefined.
func getattr(obj Value, attr string) (Value, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, undefinedAttrErr(o, attr)
	case *Dict:
		if m := dictMethod(o, attr); m != nil {
			return m, nil
		}
		if v, ok := o.Get(attr); ok {
			return v, nil
		}
	case string:
		if m := strMethod(o, attr); m != nil {
			return m, nil
		}
	case *List:
		if m := listMethod(o, attr); m != nil {
			return m, nil
		}
	case *Namespace:
		if v, ok := o.attrs.Get(attr); ok {
			return v, nil
		}
	case *Loop:
		return o.attr(attr), nil
	}
	return Undefined{Name: fmt.Sprintf("'%s object' has no attribute '%s'", jinjaTypeName(obj), attr)}, nil
}

func jinjaTypeName(v Value) string {
	if _, ok := v.(*Dict); ok {
		return "dict"
	}
	return typeName(v)
}

func undefinedAttrErr(u Undefined, attr string) error {
	if u.Name == "" {
		return fmt.Errorf("undefined value has no attribute '%s'", attr)
	}
	if strings.HasPrefix(u.Name, "'") || strings.Contains(u.Name, " object has no ") {
		return errors.New(u.Name)
	}
	return fmt.Errorf("'%s' is undefined", u.Name)
}

// getitem is jinja2's Environment.getitem: obj[key], else the attribute
// named key, else Undefined.
func getitem(obj Value, key Value) (Value, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, undefinedAttrErr(o, toStr(key))
	case *Dict:
		if v, ok := o.Get(key); ok {
			return v, nil
		}
	case *List:
		if i, ok := index(key, len(o.Items)); ok {
			return o.Items[i], nil
		}
	case string:
		if _, isNum := numeric(key); isNum {
			runes := []rune(o)
			if i, ok := index(key, len(runes)); ok {
				return string(runes[i]), nil
			}
		}
	case *Loop:
	case *Namespace:
	}
	if s, ok := key.(string); ok {
		return getattr(obj, s)
	}
	return Undefined{Name: fmt.Sprintf("%s object has no element %s", jinjaTypeName(obj), repr(key))}, nil
}

// index resolves a Python sequence index (negative from the end).
func index(key Value, n int) (int, bool) {
	num, ok := numeric(key)
	if !ok || num.isFloat || !num.i.IsInt64() {
		return 0, false
	}
	i := int(num.i.Int64())
	if i < 0 {
		i += n
	}
	return i, i >= 0 && i < n
}

func (l *Loop) attr(name string) Value {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.index + 1)
	case "index0":
		return int64(l.index)
	case "revindex":
		return int64(n - l.index)
	case "revindex0":
		return int64(n - l.index - 1)
	case "first":
		return l.index == 0
	case "last":
		return l.index == n-1
	case "length":
		return int64(n)
	case "depth":
		return int64(1)
	case "depth0":
		return int64(0)
	case "previtem":
		if l.index > 0 {
			return l.items[l.index-1]
		}
		return Undefined{Name: "there is no previous item"}
	case "nextitem":
		if l.index+1 < n {
			return l.items[l.index+1]
		}
		return Undefined{Name: "there is no next item"}
	case "cycle":
		return &Func{Name: "loop.cycle", Call: func(_ *renderer, args []Value, _ []kwarg) (Value, error) {
			if len(args) == 0 {
				return nil, errors.New("no items for cycling given")
			}
			return args[l.index%len(args)], nil
		}}
	case "changed":
		return &Func{Name: "loop.changed", Call: func(_ *renderer, args []Value, _ []kwarg) (Value, error) {
			v := &List{Items: args, Tuple: true}
			if l.hasLast && pyEqual(v, &List{Items: l.changed, Tuple: true}) {
				return false, nil
			}
			l.changed, l.hasLast = args, true
			return true, nil
		}}
	}
	return Undefined{Name: fmt.Sprintf("'LoopContext object' has no attribute '%s'", name)}
}

// argument helpers

func argAt(args []Value, kwargs []kwarg, i int, name string) (Value, bool) {
	for _, kw := range kwargs {
		if kw.name == name {
			return kw.val, true
		}
	}
	if i >= 0 && i < len(args) {
		return args[i], true
	}
	return nil, false
}

func checkArgs(name string, args []Value, kwargs []kwarg, maxPos int, allowed ...string) error {
	if len(args) > maxPos {
		return fmt.Errorf("%s() takes at most %d positional argument(s) (%d given)", name, maxPos, len(args))
	}
	for _, kw := range kwargs {
		ok := false
		for _, a := range allowed {
			if kw.name == a {
				ok = true
			}
		}
		if !ok {
			return fmt.Errorf("%s() got an unexpected keyword argument '%s'", name, kw.name)
		}
	}
	return nil
}

func strArg(v Value, what string) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s must be str, not %s", what, typeName(v))
	}
	return s, nil
}

func intArg(v Value, what string) (int, error) {
	n, ok := numeric(v)
	if !ok || n.isFloat || !n.i.IsInt64() {
		return 0, fmt.Errorf("%s must be an integer, not %s", what, typeName(v))
	}
	return int(n.i.Int64()), nil
}

func method(name string, fn func(args []Value, kwargs []kwarg) (Value, error)) *Func {
	return &Func{Name: name, Call: func(_ *renderer, args []Value, kwargs []kwarg) (Value, error) {
		return fn(args, kwargs)
	}}
}

func unsafeMethod(typ, name string) *Func {
	return &Func{Name: name, Call: func(*renderer, []Value, []kwarg) (Value, error) {
		return nil, fmt.Errorf("access to attribute '%s' of '%s' object is unsafe (the sandbox is immutable)", name, typ)
	}}
}

func dictMethod(d *Dict, name string) Value {
	switch name {
	case "items":
		return method("items", func(args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs("items", args, kw, 0); err != nil {
				return nil, err
			}
			return dictItems(d), nil
		})
	case "keys":
		return method("keys", func(args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs("keys", args, kw, 0); err != nil {
				return nil, err
			}
			return &List{Items: append([]Value(nil), d.keys...)}, nil
		})
	case "values":
		return method("values", func(args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs("values", args, kw, 0); err != nil {
				return nil, err
			}
			return &List{Items: append([]Value(nil), d.vals...)}, nil
		})
	case "get":
		return method("get", func(args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs("get", args, kw, 2); err != nil {
				return nil, err
			}
			if len(args) == 0 {
				return nil, errors.New("get expected at least 1 argument, got 0")
			}
			if v, ok := d.Get(args[0]); ok {
				return v, nil
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return nil, nil
		})
	case "pop", "popitem", "update", "setdefault", "clear", "copy", "fromkeys":
		return unsafeMethod("dict", name)
	}
	return nil
}

func dictItems(d *Dict) *List {
	out := &List{Items: make([]Value, d.Len())}
	for i, k := range d.keys {
		out.Items[i] = &List{Items: []Value{k, d.vals[i]}, Tuple: true}
	}
	return out
}

func listMethod(l *List, name string) Value {
	switch name {
	case "count":
		return method("count", func(args []Value, kw []kwarg) (Value, error) {
			if len(args) != 1 || len(kw) != 0 {
				return nil, errors.New("count() takes exactly one argument")
			}
			n := int64(0)
			for _, it := range l.Items {
				if pyEqual(it, args[0]) {
					n++
				}
			}
			return n, nil
		})
	case "index":
		return method("index", func(args []Value, kw []kwarg) (Value, error) {
			if len(args) != 1 || len(kw) != 0 {
				return nil, errors.New("index() takes exactly one argument")
			}
			for i, it := range l.Items {
				if pyEqual(it, args[0]) {
					return int64(i), nil
				}
			}
			return nil, fmt.Errorf("%s is not in list", repr(args[0]))
		})
	case "append", "extend", "insert", "pop", "remove", "sort", "reverse", "clear", "copy":
		if l.Tuple {
			return nil
		}
		return unsafeMethod("list", name)
	}
	return nil
}

// charSet is the chars argument of str.strip and friends.
func stripFunc(args []Value, kw []kwarg, name string) (func(rune) bool, error) {
	if err := checkArgs(name, args, kw, 1); err != nil {
		return nil, err
	}
	if len(args) == 0 || args[0] == nil {
		return pyIsSpace, nil
	}
	chars, err := strArg(args[0], name+" arg")
	if err != nil {
		return nil, err
	}
	return func(r rune) bool { return strings.ContainsRune(chars, r) }, nil
}

func strMethod(s, name string) Value {
	switch name {
	case "strip", "lstrip", "rstrip":
		return method(name, func(args []Value, kw []kwarg) (Value, error) {
			f, err := stripFunc(args, kw, name)
			if err != nil {
				return nil, err
			}
			switch name {
			case "strip":
				return strings.TrimFunc(s, f), nil
			case "lstrip":
				return strings.TrimLeftFunc(s, f), nil
			}
			return strings.TrimRightFunc(s, f), nil
		})
	case "startswith", "endswith":
		return method(name, func(args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 3); err != nil {
				return nil, err
			}
			if len(args) == 0 {
				return nil, fmt.Errorf("%s() takes at least 1 argument (0 given)", name)
			}
			sub := s
			if len(args) > 1 {
				runes := []rune(s)
				idx, err := sliceIndices(len(runes), [3]Value{args[1], argOr(args, 2, nil), nil})
				if err != nil {
					return nil, err
				}
				if len(idx) == 0 {
					sub = ""
				} else {
					sub = string(runes[idx[0] : idx[len(idx)-1]+1])
				}
			}
			var cands []Value
			switch p := args[0].(type) {
			case string:
				cands = []Value{p}
			case *List:
				if !p.Tuple {
					return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not list", name)
				}
				cands = p.Items
			default:
				return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(p))
			}
			for _, c := range cands {
				cs, err := strArg(c, name+" tuple item")
				if err != nil {
					return nil, err
				}
				if name == "startswith" && strings.HasPrefix(sub, cs) || name == "endswith" && strings.HasSuffix(sub, cs) {
					return true, nil
				}
			}
			return false, nil
		})
	case "split", "rsplit":
		return method(name, func(args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 2, "sep", "maxsplit"); err != nil {
				return nil, err
			}
			sepV, _ := argAt(args, kw, 0, "sep")
			maxV, hasMax := argAt(args, kw, 1, "maxsplit")
			maxsplit := -1
			if hasMax {
				n, err := intArg(maxV, "maxsplit")
				if err != nil {
					return nil, err
				}
				maxsplit = n
			}
			if sepV == nil {
				return strList(splitWhitespace(s, maxsplit, name == "rsplit")), nil
			}
			sep, err := strArg(sepV, "sep")
			if err != nil {
				return nil, err
			}
			if sep == "" {
				return nil, errors.New("empty separator")
			}
			if name == "split" {
				return strList(strings.SplitN(s, sep, nIfMax(maxsplit))), nil
			}
			return strList(rsplitN(s, sep, maxsplit)), nil
		})
	case "splitlines":
		return method(name, func(args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 1, "keepends"); err != nil {
				return nil, err
			}
			keep, _ := argAt(args, kw, 0, "keepends")
			return strList(splitLines(s, truthy(keep))), nil
		})
	case "lower":
		return method(name, func(args []Value, kw []kwarg) (Value, error) { return strings.ToLower(s), checkArgs(name, args, kw, 0) })
	case "upper":
		return method(name, func(args []Value, kw []kwarg) (Value, error) { return pyUpper(s), checkArgs(name, args, kw, 0) })
	case "title":
		return method(name, func(args []Value, kw []kwarg) (Value, error) { return pyTitle(s), checkArgs(name, args, kw, 0) })
	case "capitalize":
		return method(name, func(args []Value, kw []kwarg) (Value, error) { return pyCapitalize(s), checkArgs(name, args, kw, 0) })
	case "replace":
		return method(name, func(args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 3, "count"); err != nil {
				return nil, err
			}
			if len(args) < 2 {
				return nil, errors.New("replace() takes at least 2 arguments")
			}
			old, err := strArg(args[0], "replace() argument 1")
			if err != nil {
				return nil, err
			}
			nw, err := strArg(args[1], "replace() argument 2")
			if err != nil {
				return nil, err
			}
			n := -1
			if c, ok := argAt(args, kw, 2, "count"); ok {
				if n, err = intArg(c, "count"); err != nil {
					return nil, err
				}
			}
			return strings.Replace(s, old, nw, n), nil
		})
	case "find", "rfind", "index", "rindex", "count":
		return method(name, func(args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 1); err != nil {
				return nil, err
			}
			if len(args) != 1 {
				return nil, fmt.Errorf("%s() takes exactly one argument", name)
			}
			sub, err := strArg(args[0], name+" arg")
			if err != nil {
				return nil, err
			}
			var i int
			switch name {
			case "count":
				if sub == "" {
					return int64(utf8.RuneCountInString(s) + 1), nil
				}
				return int64(strings.Count(s, sub)), nil
			case "find", "index":
				i = strings.Index(s, sub)
			default:
				i = strings.LastIndex(s, sub)
			}
			if i < 0 {
				if name == "index" || name == "rindex" {
					return nil, errors.New("substring not found")
				}
				return int64(-1), nil
			}
			return int64(utf8.RuneCountInString(s[:i])), nil
		})
	case "join":
		return method(name, func(args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 1); err != nil {
				return nil, err
			}
			if len(args) != 1 {
				return nil, errors.New("join() takes exactly one argument")
			}
			items, err := iterate(args[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				if parts[i], err = strArg(it, fmt.Sprintf("sequence item %d", i)); err != nil {
					return nil, err
				}
			}
			return strings.Join(parts, s), nil
		})
	case "isdigit", "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace", "islower", "isupper":
		return method(name, func(args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 0); err != nil {
				return nil, err
			}
			return strPredicate(name, s), nil
		})
	case "format":
		return method(name, func(args []Value, kw []kwarg) (Value, error) { return strFormat(s, args, kw) })
	}
	return nil
}

func argOr(args []Value, i int, def Value) Value {
	if i < len(args) {
		return args[i]
	}
	return def
}

func nIfMax(maxsplit int) int {
	if maxsplit < 0 {
		return -1
	}
	return maxsplit + 1
}

func strList(parts []string) *List {
	out := &List{Items: make([]Value, len(parts))}
	for i, p := range parts {
		out.Items[i] = p
	}
	return out
}

func rsplitN(s, sep string, maxsplit int) []string {
	if maxsplit < 0 {
		return strings.Split(s, sep)
	}
	var out []string
	for maxsplit > 0 {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		out = append(out, s[i+len(sep):])
		s = s[:i]
		maxsplit--
	}
	out = append(out, s)
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// splitWhitespace is str.split() / str.rsplit() without a separator.
func splitWhitespace(s string, maxsplit int, fromRight bool) []string {
	if !fromRight {
		var out []string
		for {
			s = strings.TrimLeftFunc(s, pyIsSpace)
			if s == "" {
				return out
			}
			if maxsplit == 0 {
				return append(out, s)
			}
			i := strings.IndexFunc(s, pyIsSpace)
			if i < 0 {
				return append(out, s)
			}
			out = append(out, s[:i])
			s = s[i:]
			maxsplit--
		}
	}
	var rev []string
	for {
		s = strings.TrimRightFunc(s, pyIsSpace)
		if s == "" {
			break
		}
		if maxsplit == 0 {
			rev = append(rev, s)
			break
		}
		i := strings.LastIndexFunc(s, pyIsSpace)
		if i < 0 {
			rev = append(rev, s)
			break
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		rev = append(rev, s[i+w:])
		s = s[:i]
		maxsplit--
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

func splitLines(s string, keep bool) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexFunc(s, isLineBreak)
		if i < 0 {
			out = append(out, s)
			break
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			w = 2
		}
		if keep {
			out = append(out, s[:i+w])
		} else {
			out = append(out, s[:i])
		}
		s = s[i+w:]
	}
	return out
}

func pyUpper(s string) string {
	return strings.ReplaceAll(strings.ToUpper(s), "ß", "SS")
}

func isCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

func pyTitle(s string) string {
	var sb strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			sb.WriteRune(unicode.ToLower(r))
		} else {
			sb.WriteRune(unicode.ToTitle(r))
		}
		prevCased = isCased(r)
	}
	return sb.String()
}

func pyCapitalize(s string) string {
	r, w := utf8.DecodeRuneInString(s)
	if w == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + strings.ToLower(s[w:])
}

func strPredicate(name, s string) bool {
	if s == "" {
		return false
	}
	switch name {
	case "islower", "isupper":
		cased := false
		for _, r := range s {
			if unicode.IsUpper(r) || unicode.IsTitle(r) {
				if name == "islower" {
					return false
				}
				cased = true
			}
			if unicode.IsLower(r) {
				if name == "isupper" {
					return false
				}
				cased = true
			}
		}
		return cased
	}
	for _, r := range s {
		var ok bool
		switch name {
		case "isdigit", "isdecimal":
			ok = unicode.Is(unicode.Nd, r)
		case "isnumeric":
			ok = unicode.IsNumber(r)
		case "isalpha":
			ok = unicode.IsLetter(r)
		case "isalnum":
			ok = unicode.IsLetter(r) || unicode.IsNumber(r)
		case "isspace":
			ok = pyIsSpace(r)
		}
		if !ok {
			return false
		}
	}
	return true
}

// strFormat is str.format with plain {} / {0} / {name} fields.
func strFormat(s string, args []Value, kw []kwarg) (Value, error) {
	var sb strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			sb.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			sb.WriteByte('}')
			i++
		case c == '{':
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				return nil, errors.New("single '{' encountered in format string")
			}
			field := s[i+1 : i+j]
			if strings.ContainsAny(field, ":!.[") {
				return nil, fmt.Errorf("format field {%s} is not supported", field)
			}
			var v Value
			switch {
			case field == "":
				if auto >= len(args) {
					return nil, fmt.Errorf("replacement index %d out of range", auto)
				}
				v = args[auto]
				auto++
			case field[0] >= '0' && field[0] <= '9':
				n, err := strconv.Atoi(field)
				if err != nil || n >= len(args) {
					return nil, fmt.Errorf("replacement index %s out of range", field)
				}
				v = args[n]
			default:
				found := false
				for _, k := range kw {
					if k.name == field {
						v, found = k.val, true
					}
				}
				if !found {
					return nil, fmt.Errorf("KeyError: %s", strRepr(field))
				}
			}
			sb.WriteString(toStr(v))
			i += j
		case c == '}':
			return nil, errors.New("single '}' encountered in format string")
		default:
			sb.WriteByte(c)
		}
	}
	return sb.String(), nil
}

// percentFormat is "fmt % args" with %s, %r, %d, %i, %f and %%.
func percentFormat(format string, arg Value) (Value, error) {
	var args []Value
	if l, ok := arg.(*List); ok && l.Tuple {
		args = l.Items
	} else {
		args = []Value{arg}
	}
	var sb strings.Builder
	next := 0
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			sb.WriteByte(format[i])
			continue
		}
		i++
		if i >= len(format) {
			return nil, errors.New("incomplete format")
		}
		verb := format[i]
		if verb == '%' {
			sb.WriteByte('%')
			continue
		}
		if next >= len(args) {
			return nil, errors.New("not enough arguments for format string")
		}
		v := args[next]
		next++
		switch verb {
		case 's':
			sb.WriteString(toStr(v))
		case 'r':
			sb.WriteString(repr(v))
		case 'd', 'i':
			n, ok := numeric(v)
			if !ok {
				return nil, fmt.Errorf("%%d format: a real number is required, not %s", typeName(v))
			}
			if n.isFloat {
				sb.WriteString(strconv.FormatFloat(math.Trunc(n.f), 'f', 0, 64))
			} else {
				sb.WriteString(n.i.String())
			}
		case 'f':
			n, ok := numeric(v)
			if !ok {
				return nil, fmt.Errorf("%%f format: a real number is required, not %s", typeName(v))
			}
			sb.WriteString(strconv.FormatFloat(n.float(), 'f', 6, 64))
		default:
			return nil, fmt.Errorf("unsupported format character '%c'", verb)
		}
	}
	if next < len(args) {
		return nil, errors.New("not all arguments converted during string formatting")
	}
	return sb.String(), nil
}

// globals are the functions every template sees.
var globals = map[string]Value{}

func init() {
	globals["namespace"] = &Func{Name: "namespace", Call: func(_ *renderer, args []Value, kw []kwarg) (Value, error) {
		ns := &Namespace{attrs: NewDict()}
		for _, a := range args {
			d, ok := a.(*Dict)
			if !ok {
				return nil, fmt.Errorf("namespace() positional argument must be a dict, not %s", typeName(a))
			}
			for i, k := range d.keys {
				if err := ns.attrs.Set(k, d.vals[i]); err != nil {
					return nil, err
				}
			}
		}
		for _, k := range kw {
			if err := ns.attrs.Set(k.name, k.val); err != nil {
				return nil, err
			}
		}
		return ns, nil
	}}
	globals["dict"] = &Func{Name: "dict", Call: func(_ *renderer, args []Value, kw []kwarg) (Value, error) {
		d := NewDict()
		if len(args) > 1 {
			return nil, errors.New("dict expected at most 1 argument")
		}
		if len(args) == 1 {
			switch a := args[0].(type) {
			case *Dict:
				for i, k := range a.keys {
					if err := d.Set(k, a.vals[i]); err != nil {
						return nil, err
					}
				}
			default:
				items, err := iterate(a)
				if err != nil {
					return nil, err
				}
				for _, it := range items {
					pair, err := iterate(it)
					if err != nil || len(pair) != 2 {
						return nil, errors.New("dictionary update sequence element has wrong length")
					}
					if err := d.Set(pair[0], pair[1]); err != nil {
						return nil, err
					}
				}
			}
		}
		for _, k := range kw {
			if err := d.Set(k.name, k.val); err != nil {
				return nil, err
			}
		}
		return d, nil
	}}
	globals["range"] = &Func{Name: "range", Call: func(_ *renderer, args []Value, kw []kwarg) (Value, error) {
		if len(kw) > 0 || len(args) == 0 || len(args) > 3 {
			return nil, errors.New("range expects 1 to 3 integer arguments")
		}
		ints := make([]int, len(args))
		for i, a := range args {
			n, err := intArg(a, "range() argument")
			if err != nil {
				return nil, err
			}
			ints[i] = n
		}
		start, stop, step := 0, 0, 1
		switch len(ints) {
		case 1:
			stop = ints[0]
		case 2:
			start, stop = ints[0], ints[1]
		default:
			start, stop, step = ints[0], ints[1], ints[2]
		}
		if step == 0 {
			return nil, errors.New("range() arg 3 must not be zero")
		}
		out := &List{}
		for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
			if len(out.Items) >= maxRange {
				return nil, fmt.Errorf("range() longer than %d", maxRange)
			}
			out.Items = append(out.Items, int64(i))
		}
		return out, nil
	}}
	globals["raise_exception"] = &Func{Name: "raise_exception", Call: func(_ *renderer, args []Value, _ []kwarg) (Value, error) {
		msg := ""
		if len(args) > 0 {
			msg = toStr(args[0])
		}
		return nil, &RaiseError{Message: msg}
	}}
	globals["strftime_now"] = &Func{Name: "strftime_now", Call: func(r *renderer, args []Value, _ []kwarg) (Value, error) {
		if len(args) != 1 {
			return nil, errors.New("strftime_now() takes exactly one argument")
		}
		f, err := strArg(args[0], "strftime_now() format")
		if err != nil {
			return nil, err
		}
		now := r.env.Now
		if now.IsZero() {
			now = time.Now()
		}
		return strftime(now, f)
	}}
}

func strftime(t time.Time, f string) (string, error) {
	var sb strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			sb.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			fmt.Fprintf(&sb, "%04d", t.Year())
		case 'y':
			fmt.Fprintf(&sb, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&sb, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&sb, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&sb, "%2d", t.Day())
		case 'H':
			fmt.Fprintf(&sb, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&sb, "%02d", (t.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(&sb, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&sb, "%02d", t.Second())
		case 'p':
			sb.WriteString(t.Format("PM"))
		case 'B':
			sb.WriteString(t.Month().String())
		case 'b', 'h':
			sb.WriteString(t.Month().String()[:3])
		case 'A':
			sb.WriteString(t.Weekday().String())
		case 'a':
			sb.WriteString(t.Weekday().String()[:3])
		case 'j':
			fmt.Fprintf(&sb, "%03d", t.YearDay())
		case '%':
			sb.WriteByte('%')
		default:
			return "", fmt.Errorf("strftime directive %%%c is not supported", f[i])
		}
	}
	return sb.String(), nil
}
