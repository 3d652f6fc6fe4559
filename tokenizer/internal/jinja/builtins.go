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
func (b *budget) getattr(obj Value, attr string) (Value, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, undefinedAttrErr(o, attr)
	case *Dict:
		if m := dictMethod(o, attr); m != nil {
			return m, nil
		}
		if v, ok, err := o.get(b, attr); err != nil || ok {
			return v, err
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
		if v, ok, err := o.attrs.get(b, attr); err != nil || ok {
			return v, err
		}
	case *Loop:
		return o.attr(attr), nil
	}
	return b.noAttr(obj, attr)
}

// noAttr is the Undefined of a missing attribute (its message is charged:
// the name can be as long as the template).
func (b *budget) noAttr(obj Value, attr string) (Value, error) {
	if err := b.alloc(int64(len(attr))+64, "attribute lookup"); err != nil {
		return nil, err
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
func (b *budget) getitem(obj Value, key Value) (Value, error) {
	switch o := obj.(type) {
	case Undefined:
		return nil, undefinedAttrErr(o, shortStr(key))
	case *Dict:
		if v, ok, err := o.get(b, key); err != nil || ok {
			return v, err
		}
	case *List:
		if i, ok := index(key, len(o.Items)); ok {
			return o.Items[i], nil
		}
	case string:
		if _, isNum := numeric(key); isNum {
			if c, ok, err := b.strIndex(o, key); err != nil || ok {
				return c, err
			}
		}
	case *Loop:
	case *Namespace:
	}
	if s, ok := key.(string); ok {
		return b.getattr(obj, s)
	}
	return Undefined{Name: fmt.Sprintf("%s object has no element %s", jinjaTypeName(obj), shortRepr(key))}, nil
}

// strIndex is s[key] for an integer key: the character, found by walking
// from the nearer end, or ok false when the index is out of range.
func (b *budget) strIndex(s string, key Value) (Value, bool, error) {
	num, _ := numeric(key)
	if num.isFloat || !num.i.IsInt64() {
		return nil, false, nil
	}
	i := num.i.Int64()
	walk := i + 1 // characters to walk through
	if i < 0 {
		walk = -i
	}
	if err := b.runes(int(min(mulSat(walk, utf8.UTFMax), int64(len(s)))), "subscript"); err != nil {
		return nil, false, err
	}
	var r rune
	var w int
	if i >= 0 {
		off := 0
		for ; i > 0 && off < len(s); i-- {
			_, w := utf8.DecodeRuneInString(s[off:])
			off += w
		}
		if off >= len(s) {
			return nil, false, nil
		}
		r, w = utf8.DecodeRuneInString(s[off:])
		s = s[off:]
	} else {
		end := len(s)
		for ; i < -1 && end > 0; i++ {
			_, w := utf8.DecodeLastRuneInString(s[:end])
			end -= w
		}
		if end == 0 {
			return nil, false, nil
		}
		r, w = utf8.DecodeLastRuneInString(s[:end])
		s = s[end-w:]
	}
	if r == utf8.RuneError && w == 1 {
		return string(utf8.RuneError), true, nil // as []rune(s) has it
	}
	return s[:w], true, nil
}

// shortStr is str(v) for error messages: capped like shortRepr.
func shortStr(v Value) string {
	if s, ok := v.(string); ok {
		p := &printer{max: 200}
		p.WriteString(s)
		return p.sb.String()
	}
	p := &printer{max: 200}
	p.str(v)
	if s, err := p.result(); err == nil {
		return s
	}
	return "<" + typeName(v) + ">"
}

// index resolves a Python sequence index (negative from the end).
func index(key Value, n int) (int, bool) {
	num, ok := numeric(key)
	if !ok || num.isFloat || !num.i.IsInt64() {
		return 0, false
	}
	i := num.i.Int64()
	if i < 0 {
		i += int64(n)
	}
	return int(i), i >= 0 && i < int64(n)
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
		return &Func{Name: "loop.changed", Call: func(r *renderer, args []Value, _ []kwarg) (Value, error) {
			if l.hasLast {
				same, err := r.equal(&List{Items: args, Tuple: true}, &List{Items: l.changed, Tuple: true})
				if err != nil || same {
					return false, err
				}
			}
			l.changed, l.hasLast = args, true
			return true, nil
		}}
	}
	return Undefined{Name: fmt.Sprintf("'LoopContext object' has no attribute '%s'", shortStr(name))}
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
			return fmt.Errorf("%s() got an unexpected keyword argument '%s'", name, shortStr(kw.name))
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

func method(name string, fn func(r *renderer, args []Value, kwargs []kwarg) (Value, error)) *Func {
	return &Func{Name: name, Call: fn}
}

func unsafeMethod(typ, name string) *Func {
	return &Func{Name: name, Call: func(*renderer, []Value, []kwarg) (Value, error) {
		return nil, fmt.Errorf("access to attribute '%s' of '%s' object is unsafe (the sandbox is immutable)", name, typ)
	}}
}

func dictMethod(d *Dict, name string) Value {
	switch name {
	case "items":
		return method("items", func(r *renderer, args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs("items", args, kw, 0); err != nil {
				return nil, err
			}
			return r.dictItems(d)
		})
	case "keys", "values":
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 0); err != nil {
				return nil, err
			}
			if err := r.allocValues(d.Len(), "dict."+name); err != nil {
				return nil, err
			}
			if name == "keys" {
				return &List{Items: append([]Value(nil), d.keys...)}, nil
			}
			return &List{Items: append([]Value(nil), d.vals...)}, nil
		})
	case "get":
		return method("get", func(r *renderer, args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs("get", args, kw, 2); err != nil {
				return nil, err
			}
			if len(args) == 0 {
				return nil, errors.New("get expected at least 1 argument, got 0")
			}
			if v, ok, err := d.get(r.budget, args[0]); err != nil || ok {
				return v, err
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

// itemSize is the charge for one (key, value) tuple of dict.items(): its
// slot in the list, the tuple and the tuple's two slots.
const itemSize = valueSize + 32 + 2*valueSize

func (b *budget) dictItems(d *Dict) (*List, error) {
	if err := b.alloc(mulSat(int64(d.Len()), itemSize), "dict items"); err != nil {
		return nil, err
	}
	out := &List{Items: make([]Value, d.Len())}
	for i, k := range d.keys {
		out.Items[i] = &List{Items: []Value{k, d.vals[i]}, Tuple: true}
	}
	return out, nil
}

func listMethod(l *List, name string) Value {
	switch name {
	case "count", "index":
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) {
			if len(args) != 1 || len(kw) != 0 {
				return nil, fmt.Errorf("%s() takes exactly one argument", name)
			}
			n := int64(0)
			for i, it := range l.Items {
				if err := r.work(1, "list."+name); err != nil {
					return nil, err
				}
				eq, err := r.equal(it, args[0])
				if err != nil {
					return nil, err
				}
				if eq && name == "index" {
					return int64(i), nil
				}
				if eq {
					n++
				}
			}
			if name == "index" {
				return nil, fmt.Errorf("%s is not in list", shortRepr(args[0]))
			}
			return n, nil
		})
	case "append", "extend", "insert", "pop", "remove", "sort", "reverse", "clear", "copy":
		if l.Tuple {
			return nil
		}
		return unsafeMethod("list", name)
	}
	return nil
}

// stripFunc is the chars argument of str.strip and friends as a rune test
// (a set, so that stripping costs the same for any chars).
func (b *budget) stripFunc(args []Value, kw []kwarg, name string) (func(rune) bool, error) {
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
	if len(chars) <= 8 {
		return func(r rune) bool { return strings.ContainsRune(chars, r) }, nil
	}
	if err := b.runes(len(chars), name); err != nil {
		return nil, err
	}
	var ascii [utf8.RuneSelf]bool
	var other map[rune]bool
	for i := 0; i < len(chars); {
		if c := chars[i]; c < utf8.RuneSelf {
			ascii[c] = true
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(chars[i:])
		i += w
		if !other[r] {
			if err := b.alloc(valueSize, name); err != nil {
				return nil, err
			}
			if other == nil {
				other = map[rune]bool{}
			}
			other[r] = true
		}
	}
	return func(r rune) bool {
		if r < utf8.RuneSelf {
			return ascii[r]
		}
		return other[r]
	}, nil
}

// caseMap charges for f(s), a case mapping: per-character work, and a result
// at most twice as long as s (the reservation is settled afterwards).
func (b *budget) caseMap(s, op string, f func(string) string) (string, error) {
	if err := b.runes(len(s), op); err != nil {
		return "", err
	}
	reserve := mulSat(int64(len(s)), 2)
	if err := b.alloc(reserve, op); err != nil {
		return "", err
	}
	out := f(s)
	if d := reserve - int64(len(out)); d >= 0 {
		b.refund(d)
	} else if err := b.alloc(-d, op); err != nil {
		return "", err
	}
	return out, nil
}

// strList is a list of the parts (charged by the caller).
func strList(parts []string) *List {
	out := &List{Items: make([]Value, len(parts))}
	for i, p := range parts {
		out.Items[i] = p
	}
	return out
}

func strMethod(s, name string) Value {
	switch name {
	case "strip", "lstrip", "rstrip":
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) {
			f, err := r.stripFunc(args, kw, name)
			if err != nil {
				return nil, err
			}
			if err := r.runes(len(s), name); err != nil {
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
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 3); err != nil {
				return nil, err
			}
			if len(args) == 0 {
				return nil, fmt.Errorf("%s() takes at least 1 argument (0 given)", name)
			}
			sub := s
			if len(args) > 1 {
				var err error
				if sub, err = r.sliceString(s, [3]Value{args[1], argOr(args, 2, nil), nil}); err != nil {
					return nil, err
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
				if err := r.scan(len(cs), name); err != nil {
					return nil, err
				}
				if name == "startswith" && strings.HasPrefix(sub, cs) || name == "endswith" && strings.HasSuffix(sub, cs) {
					return true, nil
				}
			}
			return false, nil
		})
	case "split", "rsplit":
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) {
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
				parts, err := r.splitWhitespace(s, maxsplit, name == "rsplit")
				if err != nil {
					return nil, err
				}
				return strList(parts), nil
			}
			sep, err := strArg(sepV, "sep")
			if err != nil {
				return nil, err
			}
			if sep == "" {
				return nil, errors.New("empty separator")
			}
			if err := r.scan(len(s), "str."+name); err != nil {
				return nil, err
			}
			n := strings.Count(s, sep) + 1
			if maxsplit >= 0 {
				n = min(n, maxsplit+1)
			}
			if err := r.alloc(mulSat(int64(n), 2*valueSize), "str."+name); err != nil { // the []string and the list
				return nil, err
			}
			if name == "split" {
				return strList(strings.SplitN(s, sep, nIfMax(maxsplit))), nil
			}
			return strList(rsplitN(s, sep, maxsplit)), nil
		})
	case "splitlines":
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 1, "keepends"); err != nil {
				return nil, err
			}
			keep, _ := argAt(args, kw, 0, "keepends")
			parts, err := r.splitLines(s, truthy(keep))
			if err != nil {
				return nil, err
			}
			return strList(parts), nil
		})
	case "lower", "upper", "title", "capitalize":
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 0); err != nil {
				return nil, err
			}
			f := strings.ToLower
			switch name {
			case "upper":
				f = pyUpper
			case "title":
				f = pyTitle
			case "capitalize":
				f = pyCapitalize
			}
			return r.caseMap(s, "str."+name, f)
		})
	case "replace":
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) {
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
			return r.replace(s, old, nw, n, "str.replace")
		})
	case "find", "rfind", "index", "rindex", "count":
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) {
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
			if err := r.scan(len(s)+len(sub), "str."+name); err != nil {
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
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 1); err != nil {
				return nil, err
			}
			if len(args) != 1 {
				return nil, errors.New("join() takes exactly one argument")
			}
			items, err := r.iterate(args[0])
			if err != nil {
				return nil, err
			}
			if err := r.allocValues(len(items), "str.join"); err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				p, ok := it.(string)
				if !ok {
					return nil, fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = p
			}
			return r.join(parts, s, "str.join")
		})
	case "isdigit", "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace", "islower", "isupper":
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) {
			if err := checkArgs(name, args, kw, 0); err != nil {
				return nil, err
			}
			if err := r.runes(len(s), "str."+name); err != nil {
				return nil, err
			}
			return strPredicate(name, s), nil
		})
	case "format":
		return method(name, func(r *renderer, args []Value, kw []kwarg) (Value, error) { return r.strFormat(s, args, kw) })
	}
	return nil
}

// join is sep.join(parts), its length charged before it is made.
func (b *budget) join(parts []string, sep, op string) (string, error) {
	if err := b.work(int64(len(parts)), op); err != nil {
		return "", err
	}
	n := mulSat(int64(len(sep)), int64(max(len(parts)-1, 0)))
	for _, p := range parts {
		n = addSat(n, int64(len(p)))
	}
	if err := b.alloc(n, op); err != nil {
		return "", err
	}
	return strings.Join(parts, sep), nil
}

// replace is s.replace(old, new, count), its length charged before it is
// made.
func (b *budget) replace(s, old, nw string, count int, op string) (string, error) {
	if err := b.scan(len(s)+len(old), op); err != nil {
		return "", err
	}
	n := strings.Count(s, old) // for "" one more than the characters, as Go and Python replace
	if count >= 0 {
		n = min(n, count)
	}
	size := addSat(int64(len(s)), mulSat(int64(n), int64(len(nw))))
	if err := b.alloc(size, op); err != nil {
		return "", err
	}
	return strings.Replace(s, old, nw, count), nil
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
func (b *budget) splitWhitespace(s string, maxsplit int, fromRight bool) ([]string, error) {
	if err := b.runes(len(s), "str.split"); err != nil {
		return nil, err
	}
	var out []string
	add := func(p string) error {
		if err := b.alloc(2*valueSize, "str.split"); err != nil {
			return err
		}
		out = append(out, p)
		return nil
	}
	if !fromRight {
		for {
			s = strings.TrimLeftFunc(s, pyIsSpace)
			if s == "" {
				return out, nil
			}
			if maxsplit == 0 {
				return out, add(s)
			}
			i := strings.IndexFunc(s, pyIsSpace)
			if i < 0 {
				return out, add(s)
			}
			if err := add(s[:i]); err != nil {
				return nil, err
			}
			s = s[i:]
			maxsplit--
		}
	}
	for {
		s = strings.TrimRightFunc(s, pyIsSpace)
		if s == "" {
			break
		}
		if maxsplit == 0 {
			if err := add(s); err != nil {
				return nil, err
			}
			break
		}
		i := strings.LastIndexFunc(s, pyIsSpace)
		if i < 0 {
			if err := add(s); err != nil {
				return nil, err
			}
			break
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		if err := add(s[i+w:]); err != nil {
			return nil, err
		}
		s = s[:i]
		maxsplit--
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1C, 0x1D, 0x1E, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// splitLines is str.splitlines; each line is charged as it is cut.
func (b *budget) splitLines(s string, keep bool) ([]string, error) {
	if err := b.runes(len(s), "splitlines"); err != nil {
		return nil, err
	}
	var out []string
	for len(s) > 0 {
		if err := b.alloc(2*valueSize, "splitlines"); err != nil {
			return nil, err
		}
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
	return out, nil
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
func (b *budget) strFormat(s string, args []Value, kw []kwarg) (Value, error) {
	p := &printer{b: b, op: "str.format"}
	auto, manual := 0, false
	for i := 0; i < len(s) && p.err == nil; i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			p.WriteByte('{')
			i++
		case c == '}' && i+1 < len(s) && s[i+1] == '}':
			p.WriteByte('}')
			i++
		case c == '{':
			j := strings.IndexByte(s[i:], '}')
			if j < 0 {
				return nil, errors.New("single '{' encountered in format string")
			}
			field := s[i+1 : i+j]
			if strings.ContainsAny(field, ":!.[") {
				return nil, fmt.Errorf("format field {%s} is not supported", shortStr(field))
			}
			var v Value
			switch {
			case field == "":
				if manual {
					return nil, errors.New("cannot switch from manual field specification to automatic field numbering")
				}
				if auto >= len(args) {
					return nil, fmt.Errorf("replacement index %d out of range", auto)
				}
				v = args[auto]
				auto++
			case field[0] >= '0' && field[0] <= '9':
				if auto > 0 {
					return nil, errors.New("cannot switch from automatic field numbering to manual field specification")
				}
				manual = true
				n, err := strconv.Atoi(field)
				if err != nil || n >= len(args) {
					return nil, fmt.Errorf("replacement index %s out of range", shortStr(field))
				}
				v = args[n]
			default:
				if err := b.work(int64(len(kw)), "str.format"); err != nil {
					return nil, err
				}
				found := false
				for _, k := range kw {
					if k.name == field {
						v, found = k.val, true
					}
				}
				if !found {
					return nil, fmt.Errorf("KeyError: %s", shortRepr(field))
				}
			}
			p.str(v)
			i += j
		case c == '}':
			return nil, errors.New("single '}' encountered in format string")
		default:
			j := strings.IndexAny(s[i:], "{}")
			if j < 0 {
				j = len(s) - i
			}
			p.WriteString(s[i : i+j])
			i += j - 1
		}
	}
	return p.result()
}

// percentFormat is "fmt % args" with %s, %r, %d, %i, %f and %%.
func (b *budget) percentFormat(format string, arg Value) (Value, error) {
	var args []Value
	if l, ok := arg.(*List); ok && l.Tuple {
		args = l.Items
	} else {
		args = []Value{arg}
	}
	p := &printer{b: b, op: "'%' on str"}
	next := 0
	for i := 0; i < len(format) && p.err == nil; i++ {
		if format[i] != '%' {
			j := strings.IndexByte(format[i:], '%')
			if j < 0 {
				j = len(format) - i
			}
			p.WriteString(format[i : i+j])
			i += j - 1
			continue
		}
		i++
		if i >= len(format) {
			return nil, errors.New("incomplete format")
		}
		verb := format[i]
		if verb == '%' {
			p.WriteByte('%')
			continue
		}
		if next >= len(args) {
			return nil, errors.New("not enough arguments for format string")
		}
		v := args[next]
		next++
		switch verb {
		case 's':
			p.str(v)
		case 'r':
			p.repr(v)
		case 'd', 'i':
			n, ok := numeric(v)
			if !ok {
				return nil, fmt.Errorf("%%d format: a real number is required, not %s", typeName(v))
			}
			if n.isFloat {
				p.WriteString(strconv.FormatFloat(math.Trunc(n.f), 'f', 0, 64))
			} else {
				s, err := intText(n.i)
				if err != nil {
					return nil, err
				}
				p.WriteString(s)
			}
		case 'f':
			n, ok := numeric(v)
			if !ok {
				return nil, fmt.Errorf("%%f format: a real number is required, not %s", typeName(v))
			}
			p.WriteString(strconv.FormatFloat(n.float(), 'f', 6, 64))
		default:
			return nil, fmt.Errorf("unsupported format character '%c'", verb)
		}
	}
	if p.err == nil && next < len(args) {
		return nil, errors.New("not all arguments converted during string formatting")
	}
	return p.result()
}

// globals are the functions every template sees.
var globals = map[string]Value{}

func init() {
	globals["namespace"] = &Func{Name: "namespace", Call: func(r *renderer, args []Value, kw []kwarg) (Value, error) {
		ns := &Namespace{attrs: NewDict()}
		for _, a := range args {
			d, ok := a.(*Dict)
			if !ok {
				return nil, fmt.Errorf("namespace() positional argument must be a dict, not %s", typeName(a))
			}
			for i, k := range d.keys {
				if err := ns.attrs.set(r.budget, k, d.vals[i]); err != nil {
					return nil, err
				}
			}
		}
		for _, k := range kw {
			if err := ns.attrs.set(r.budget, k.name, k.val); err != nil {
				return nil, err
			}
		}
		return ns, nil
	}}
	globals["dict"] = &Func{Name: "dict", Call: func(r *renderer, args []Value, kw []kwarg) (Value, error) {
		d := NewDict()
		if len(args) > 1 {
			return nil, errors.New("dict expected at most 1 argument")
		}
		if len(args) == 1 {
			switch a := args[0].(type) {
			case *Dict:
				for i, k := range a.keys {
					if err := d.set(r.budget, k, a.vals[i]); err != nil {
						return nil, err
					}
				}
			default:
				items, err := r.iterate(a)
				if err != nil {
					return nil, err
				}
				for _, it := range items {
					pair, err := r.iterate(it)
					if err != nil || len(pair) != 2 {
						var le *LimitError
						if errors.As(err, &le) {
							return nil, err
						}
						return nil, errors.New("dictionary update sequence element has wrong length")
					}
					if err := d.set(r.budget, pair[0], pair[1]); err != nil {
						return nil, err
					}
				}
			}
		}
		for _, k := range kw {
			if err := d.set(r.budget, k.name, k.val); err != nil {
				return nil, err
			}
		}
		return d, nil
	}}
	globals["range"] = &Func{Name: "range", Call: func(r *renderer, args []Value, kw []kwarg) (Value, error) {
		if len(kw) > 0 || len(args) == 0 || len(args) > 3 {
			return nil, errors.New("range expects 1 to 3 integer arguments")
		}
		ints := make([]int64, len(args))
		for i, a := range args {
			n, err := intArg(a, "range() argument")
			if err != nil {
				return nil, err
			}
			ints[i] = int64(n)
		}
		start, stop, step := int64(0), int64(0), int64(1)
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
		// len(range(start, stop, step)) in unsigned arithmetic, which
		// cannot overflow.
		var n uint64
		switch {
		case step > 0 && start < stop:
			n = (uint64(stop)-uint64(start)-1)/uint64(step) + 1
		case step < 0 && stop < start:
			n = (uint64(start)-uint64(stop)-1)/uint64(-step) + 1
		}
		if n > maxRange {
			return nil, fmt.Errorf("Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
		}
		if err := r.allocValues(int(n), "range()"); err != nil {
			return nil, err
		}
		out := &List{Items: make([]Value, n)}
		for k := range out.Items {
			out.Items[k] = start + int64(k)*step
		}
		return out, nil
	}}
	globals["raise_exception"] = &Func{Name: "raise_exception", Call: func(r *renderer, args []Value, _ []kwarg) (Value, error) {
		msg := ""
		if len(args) > 0 {
			var err error
			if msg, err = r.str(args[0], "raise_exception"); err != nil {
				return nil, err
			}
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
		return r.strftime(now, f)
	}}
}

func (b *budget) strftime(t time.Time, f string) (string, error) {
	p := &printer{b: b, op: "strftime_now"}
	for i := 0; i < len(f) && p.err == nil; i++ {
		if f[i] != '%' || i+1 == len(f) {
			j := strings.IndexByte(f[i+1:], '%') + 1
			if j <= 0 {
				j = len(f) - i
			}
			p.WriteString(f[i : i+j])
			i += j - 1
			continue
		}
		i++
		switch f[i] {
		case 'Y':
			p.WriteString(fmt.Sprintf("%04d", t.Year()))
		case 'y':
			p.WriteString(fmt.Sprintf("%02d", t.Year()%100))
		case 'm':
			p.WriteString(fmt.Sprintf("%02d", int(t.Month())))
		case 'd':
			p.WriteString(fmt.Sprintf("%02d", t.Day()))
		case 'e':
			p.WriteString(fmt.Sprintf("%2d", t.Day()))
		case 'H':
			p.WriteString(fmt.Sprintf("%02d", t.Hour()))
		case 'I':
			p.WriteString(fmt.Sprintf("%02d", (t.Hour()+11)%12+1))
		case 'M':
			p.WriteString(fmt.Sprintf("%02d", t.Minute()))
		case 'S':
			p.WriteString(fmt.Sprintf("%02d", t.Second()))
		case 'p':
			p.WriteString(t.Format("PM"))
		case 'B':
			p.WriteString(t.Month().String())
		case 'b', 'h':
			p.WriteString(t.Month().String()[:3])
		case 'A':
			p.WriteString(t.Weekday().String())
		case 'a':
			p.WriteString(t.Weekday().String()[:3])
		case 'j':
			p.WriteString(fmt.Sprintf("%03d", t.YearDay()))
		case '%':
			p.WriteByte('%')
		default:
			return "", fmt.Errorf("strftime directive %%%c is not supported", f[i])
		}
	}
	return p.result()
}
