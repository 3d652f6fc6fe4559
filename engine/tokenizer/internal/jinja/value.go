package jinja

import (
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values are Go representations of the Python objects a Jinja2 template sees:
//
//	nil          None
//	bool         bool
//	int64        int (*big.Int when it does not fit)
//	float64      float
//	string       str
//	*List        list or tuple
//	*Dict        dict (insertion-ordered)
//	*Namespace   jinja2 namespace()
//	Undefined    an undefined value
//	*Func        a callable (global function, bound method, macro)
//	*Loop        a for loop's "loop" object
type Value = any

// Undefined is jinja2.Undefined: printing it gives "", iterating it gives
// nothing, it is false, and most other operations on it are errors.
type Undefined struct {
	Name string // what was looked up, for error messages
}

// List is a Python list or tuple.
type List struct {
	Items []Value
	Tuple bool
}

// Dict is a Python dict with insertion order. Keys are nil, bool, int64,
// float64 or string.
type Dict struct {
	keys []Value
	vals []Value
	idx  map[any]int
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{idx: map[any]int{}} }

// hashKey maps equal Python keys (1, 1.0, True) to one Go map key.
func hashKey(k Value) (any, error) {
	switch k := k.(type) {
	case nil, string:
		return k, nil
	case bool:
		if k {
			return int64(1), nil
		}
		return int64(0), nil
	case int64:
		return k, nil
	case float64:
		if k == math.Trunc(k) && math.Abs(k) < 1<<62 {
			return int64(k), nil
		}
		return k, nil
	case *big.Int:
		return "\x00big:" + k.String(), nil
	case *List:
		if k.Tuple {
			parts := make([]string, len(k.Items))
			for i, it := range k.Items {
				h, err := hashKey(it)
				if err != nil {
					return nil, err
				}
				parts[i] = fmt.Sprintf("%T:%v", h, h)
			}
			return "\x00tuple:" + strings.Join(parts, "\x00"), nil
		}
	}
	return nil, fmt.Errorf("unhashable type: '%s'", typeName(k))
}

// Set sets d[k] = v, keeping the position of an existing key.
func (d *Dict) Set(k, v Value) error {
	h, err := hashKey(k)
	if err != nil {
		return err
	}
	if i, ok := d.idx[h]; ok {
		d.vals[i] = v
		return nil
	}
	d.idx[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

// Get returns d[k].
func (d *Dict) Get(k Value) (Value, bool) {
	h, err := hashKey(k)
	if err != nil {
		return nil, false
	}
	i, ok := d.idx[h]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

// Len is len(d).
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []Value { return d.keys }

// Namespace is the mutable object made by namespace(...).
type Namespace struct{ attrs *Dict }

// Func is a callable value.
type Func struct {
	Name string
	Call func(r *renderer, args []Value, kwargs []kwarg) (Value, error)
}

type kwarg struct {
	name string
	val  Value
}

func typeName(v Value) string {
	switch v := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *List:
		if v.Tuple {
			return "tuple"
		}
		return "list"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case Undefined:
		return "Undefined"
	case *Func:
		return "function"
	case *Loop:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

// truthy is Python's bool(v).
func truthy(v Value) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case *big.Int:
		return v.Sign() != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case *List:
		return len(v.Items) > 0
	case *Dict:
		return v.Len() > 0
	case Undefined:
		return false
	}
	return true
}

// pyIsSpace is Python's str.isspace for one rune (Unicode White_Space plus
// the information separators U+001C..U+001F).
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1C && r <= 0x1F)
}

// toStr is Python's str(v) as Jinja2 prints it ("" for Undefined).
func toStr(v Value) string {
	switch v := v.(type) {
	case string:
		return v
	case Undefined:
		return ""
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(v, 10)
	case *big.Int:
		return v.String()
	case float64:
		return floatRepr(v)
	}
	return repr(v)
}

// repr is Python's repr(v).
func repr(v Value) string {
	switch v := v.(type) {
	case string:
		return strRepr(v)
	case Undefined:
		return "Undefined"
	case *List:
		var sb strings.Builder
		open, close := "[", "]"
		if v.Tuple {
			open, close = "(", ")"
		}
		sb.WriteString(open)
		for i, it := range v.Items {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(repr(it))
		}
		if v.Tuple && len(v.Items) == 1 {
			sb.WriteString(",")
		}
		sb.WriteString(close)
		return sb.String()
	case *Dict:
		var sb strings.Builder
		sb.WriteString("{")
		for i, k := range v.keys {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(repr(k))
			sb.WriteString(": ")
			sb.WriteString(repr(v.vals[i]))
		}
		sb.WriteString("}")
		return sb.String()
	case *Namespace:
		return "<Namespace " + repr(v.attrs) + ">"
	case *Func:
		return "<function " + v.Name + ">"
	case *Loop:
		return fmt.Sprintf("<LoopContext %d/%d>", v.index+1, len(v.items))
	}
	return toStr(v)
}

// strRepr is Python's repr of a str.
func strRepr(s string) string {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	var sb strings.Builder
	sb.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(r)
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\r':
			sb.WriteString(`\r`)
		case r == '\t':
			sb.WriteString(`\t`)
		case r == ' ' || (unicode.IsPrint(r) && r != utf8.RuneError):
			sb.WriteRune(r)
		case r == utf8.RuneError:
			sb.WriteRune(r) // U+FFFD is printable in Python
		case r < 0x100:
			fmt.Fprintf(&sb, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&sb, `\u%04x`, r)
		default:
			fmt.Fprintf(&sb, `\U%08x`, r)
		}
	}
	sb.WriteByte(quote)
	return sb.String()
}

// floatRepr is Python's repr(float): the shortest round-tripping digits, in
// positional notation when the decimal exponent is in [-4, 16), with ".0"
// added to integral values.
func floatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	neg := strings.HasPrefix(e, "-")
	if neg {
		e = e[1:]
	}
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	decpt := exp + 1 // digits d1 d2 ... with the point after decpt digits
	var out string
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			out = "0." + strings.Repeat("0", -decpt) + digits
		case decpt >= len(digits):
			out = digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		default:
			out = digits[:decpt] + "." + digits[decpt:]
		}
	} else {
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		x := decpt - 1
		sign := "+"
		if x < 0 {
			sign, x = "-", -x
		}
		out += fmt.Sprintf("e%s%02d", sign, x)
	}
	if neg {
		out = "-" + out
	}
	return out
}

// pyEqual is Python's ==.
func pyEqual(a, b Value) bool {
	if na, ok := numeric(a); ok {
		if nb, ok := numeric(b); ok {
			return numCompare(na, nb) == 0
		}
		return false
	}
	switch a := a.(type) {
	case nil:
		return b == nil
	case string:
		bs, ok := b.(string)
		return ok && a == bs
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case *List:
		bl, ok := b.(*List)
		if !ok || bl.Tuple != a.Tuple || len(a.Items) != len(bl.Items) {
			return false
		}
		for i := range a.Items {
			if !pyEqual(a.Items[i], bl.Items[i]) {
				return false
			}
		}
		return true
	case *Dict:
		bd, ok := b.(*Dict)
		if !ok || a.Len() != bd.Len() {
			return false
		}
		for i, k := range a.keys {
			v, ok := bd.Get(k)
			if !ok || !pyEqual(a.vals[i], v) {
				return false
			}
		}
		return true
	}
	return a == b
}

// number is a Python number widened for arithmetic.
type number struct {
	isFloat bool
	i       *big.Int
	f       float64
}

func numeric(v Value) (number, bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return number{i: big.NewInt(1)}, true
		}
		return number{i: big.NewInt(0)}, true
	case int64:
		return number{i: big.NewInt(v)}, true
	case *big.Int:
		return number{i: v}, true
	case float64:
		return number{isFloat: true, f: v}, true
	}
	return number{}, false
}

func (n number) float() float64 {
	if n.isFloat {
		return n.f
	}
	f, _ := new(big.Float).SetInt(n.i).Float64()
	return f
}

func numCompare(a, b number) int {
	if !a.isFloat && !b.isFloat {
		return a.i.Cmp(b.i)
	}
	x, y := a.float(), b.float()
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	case x == y:
		return 0
	}
	return 2 // NaN: unordered
}

// intValue normalises a big integer to int64 when it fits.
func intValue(i *big.Int) Value {
	if i.IsInt64() {
		return i.Int64()
	}
	return i
}

// pyLess is Python's a < b, an error for unorderable types.
func pyCompare(a, b Value) (int, error) {
	if na, ok := numeric(a); ok {
		if nb, ok := numeric(b); ok {
			return numCompare(na, nb), nil
		}
	}
	switch a := a.(type) {
	case string:
		if bs, ok := b.(string); ok {
			return strings.Compare(a, bs), nil
		}
	case *List:
		if bl, ok := b.(*List); ok && bl.Tuple == a.Tuple {
			for i := 0; i < len(a.Items) && i < len(bl.Items); i++ {
				if pyEqual(a.Items[i], bl.Items[i]) {
					continue
				}
				return pyCompare(a.Items[i], bl.Items[i])
			}
			return cmpInt(len(a.Items), len(bl.Items)), nil
		}
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// iterate returns the items Python's iter(v) yields.
func iterate(v Value) ([]Value, error) {
	switch v := v.(type) {
	case *List:
		return v.Items, nil
	case *Dict:
		return v.keys, nil
	case string:
		out := make([]Value, 0, len(v))
		for _, r := range v {
			out = append(out, string(r))
		}
		return out, nil
	case Undefined:
		return nil, nil
	case *Namespace:
		return nil, fmt.Errorf("'Namespace' object is not iterable")
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}

// length is Python's len(v).
func length(v Value) (int, error) {
	switch v := v.(type) {
	case string:
		return utf8.RuneCountInString(v), nil
	case *List:
		return len(v.Items), nil
	case *Dict:
		return v.Len(), nil
	case Undefined:
		return 0, nil
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

// sortValues sorts in place with Python's ordering (stable).
func sortValues(items []Value, key func(Value) Value, reverse bool) error {
	var err error
	sort.SliceStable(items, func(i, j int) bool {
		a, b := items[i], items[j]
		if key != nil {
			a, b = key(a), key(b)
		}
		c, e := pyCompare(a, b)
		if e != nil && err == nil {
			err = e
		}
		if reverse {
			return c > 0
		}
		return c < 0
	})
	return err
}
