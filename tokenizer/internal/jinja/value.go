package jinja

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"slices"
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
//
// Lists and dicts are never changed once made (the sandbox is immutable), so
// only a Namespace can hold itself.
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
// *big.Int, float64, string or tuples of these.
type Dict struct {
	keys []Value
	vals []Value
	idx  map[any]int
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{idx: map[any]int{}} }

// Map keys of the values that are not their own key.
type (
	bigKey   string // a *big.Int beyond int64: sign and magnitude bytes
	tupleKey string // a tuple: its items' keys, each typed and length-prefixed
)

// errUnhashable marks a key Python cannot hash (a list, dict, ...).
type errUnhashable struct{ typ string }

func (e *errUnhashable) Error() string { return fmt.Sprintf("unhashable type: '%s'", e.typ) }

// hashKey maps equal Python keys (1, 1.0, True) to one Go map key. Building
// the key of a tuple is charged to b (which may be nil).
func hashKey(b *budget, k Value, depth int) (any, error) {
	switch k := k.(type) {
	case string:
		if len(k) >= scanPerStep { // Go hashes and compares the whole key
			if err := b.scan(len(k), "hashing a key"); err != nil {
				return nil, err
			}
		}
		return k, nil
	case nil, int64:
		return k, nil
	case bool:
		if k {
			return int64(1), nil
		}
		return int64(0), nil
	case float64:
		if k == math.Trunc(k) && !math.IsInf(k, 0) {
			if math.Abs(k) < 1<<62 {
				return int64(k), nil
			}
			i, _ := new(big.Float).SetFloat64(k).Int(nil) // equal to that big int
			return bigHash(b, i)
		}
		return k, nil
	case *big.Int:
		return bigHash(b, k)
	case *List:
		if !k.Tuple {
			break
		}
		if depth >= b.maxDepth() {
			return nil, b.depthErr("hashing a tuple")
		}
		var key []byte
		for _, it := range k.Items {
			h, err := hashKey(b, it, depth+1)
			if err != nil {
				return nil, err
			}
			var tag byte
			var payload string
			switch h := h.(type) {
			case nil:
				tag = 'n'
			case int64:
				tag, payload = 'i', strconv.FormatInt(h, 10)
			case float64:
				tag, payload = 'f', strconv.FormatUint(math.Float64bits(h), 16)
			case string:
				tag, payload = 's', h
			case bigKey:
				tag, payload = 'b', string(h)
			case tupleKey:
				tag, payload = 't', string(h)
			}
			if err := b.alloc(int64(len(payload))+11, "hashing a tuple"); err != nil {
				return nil, err
			}
			key = append(key, tag)
			key = binary.AppendUvarint(key, uint64(len(payload)))
			key = append(key, payload...)
		}
		return tupleKey(key), nil
	}
	return nil, &errUnhashable{typeName(k)}
}

func bigHash(b *budget, i *big.Int) (any, error) {
	if err := b.alloc(int64(len(i.Bits()))*8+1, "hashing an integer"); err != nil {
		return nil, err
	}
	sign := "+"
	if i.Sign() < 0 {
		sign = "-"
	}
	return bigKey(sign + string(i.Bytes())), nil
}

// Set sets d[k] = v, keeping the position of an existing key.
func (d *Dict) Set(k, v Value) error { return d.set(nil, k, v) }

// set is Set with the new entry charged to b (which may be nil).
func (d *Dict) set(b *budget, k, v Value) error {
	h, err := hashKey(b, k, 0)
	if err != nil {
		return err
	}
	if i, ok := d.idx[h]; ok {
		d.vals[i] = v
		return nil
	}
	if err := b.alloc(dictEntrySize, "dict entry"); err != nil {
		return err
	}
	d.idx[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

// Get returns d[k].
func (d *Dict) Get(k Value) (Value, bool) {
	v, ok, _ := d.get(nil, k)
	return v, ok
}

// get is Get charged to b; an unhashable key is not found, and err is only
// a budget's *LimitError.
func (d *Dict) get(b *budget, k Value) (Value, bool, error) {
	h, err := hashKey(b, k, 0)
	if err != nil {
		if _, unhashable := err.(*errUnhashable); unhashable {
			err = nil
		}
		return nil, false, err
	}
	i, ok := d.idx[h]
	if !ok {
		return nil, false, nil
	}
	return d.vals[i], true, nil
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

// pyIsSpace is Python's str.isspace for one rune (Unicode White_Space plus
// the information separators U+001C..U+001F).
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1C && r <= 0x1F)
}

// maxIntDigits is CPython's limit on int/str conversion
// (sys.int_info.default_max_str_digits): str() of a longer int, and int()
// of a longer string, raise ValueError.
const maxIntDigits = 4300

// errIntDigits is CPython's ValueError for such a conversion.
var errIntDigits = fmt.Errorf("Exceeds the limit (%d digits) for integer string conversion; use sys.set_int_max_str_digits() to increase the limit", maxIntDigits)

// intText is str(i), refusing (as CPython does) more than maxIntDigits
// digits; the bit-length test keeps the conversion itself cheap.
func intText(i *big.Int) (string, error) {
	if i.BitLen() > maxIntDigits*3322/1000+4 { // log2(10) = 3.3219...
		return "", errIntDigits
	}
	s := i.String()
	if len(strings.TrimPrefix(s, "-")) > maxIntDigits {
		return "", errIntDigits
	}
	return s, nil
}

// printer builds the text of values: str(), repr() and json.dumps(). Each
// write is charged to b before it is made; nesting is bounded by b's Depth
// and a Namespace that holds itself prints as Python prints a recursive
// dict ("{...}").
type printer struct {
	b      *budget // nil for error messages, which are capped instead
	op     string
	sb     strings.Builder
	max    int // > 0: stop after about max bytes, ending with "..."
	depth  int
	active []*Namespace // being printed, outermost first
	err    error
}

// errCapped stops a capped printer.
var errCapped = errors.New("capped")

func (p *printer) WriteString(s string) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	if p.max > 0 && p.sb.Len()+len(s) > p.max {
		cut := max(p.max-p.sb.Len(), 0)
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		p.sb.WriteString(s[:cut])
		p.sb.WriteString("...")
		p.err = errCapped
		return cut, p.err
	}
	if err := p.b.alloc(int64(len(s)), p.op); err != nil {
		p.err = err
		return 0, err
	}
	p.sb.Grow(len(s)) // doubles (append would grow big buffers by 1.25, copying more)
	return p.sb.WriteString(s)
}

func (p *printer) WriteByte(c byte) error {
	var buf [1]byte
	buf[0] = c
	_, err := p.WriteString(string(buf[:]))
	return err
}

func (p *printer) WriteRune(r rune) (int, error) {
	var buf [utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], r)
	return p.WriteString(string(buf[:n]))
}

// fail records err unless an error is already recorded.
func (p *printer) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

// result is the text, or the first error (a capped printer's text is
// complete up to its cap).
func (p *printer) result() (string, error) {
	if p.err != nil && p.err != errCapped {
		return "", p.err
	}
	return p.sb.String(), nil
}

// nest enters one level of a list, dict or namespace.
func (p *printer) nest() bool {
	if p.depth >= p.b.maxDepth() {
		p.fail(p.b.depthErr(p.op))
		return false
	}
	p.depth++
	return true
}

// str writes Python's str(v) as Jinja2 prints it ("" for Undefined).
func (p *printer) str(v Value) {
	switch v := v.(type) {
	case string:
		p.WriteString(v)
	case Undefined:
	case nil, bool, int64, *big.Int, float64:
		s, err := scalarText(v)
		if err != nil {
			p.fail(err)
			return
		}
		p.WriteString(s)
	default:
		p.repr(v)
	}
}

// scalarText is str() of None, a bool or a number.
func scalarText(v Value) (string, error) {
	switch v := v.(type) {
	case nil:
		return "None", nil
	case bool:
		if v {
			return "True", nil
		}
		return "False", nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case *big.Int:
		return intText(v)
	case float64:
		return floatRepr(v), nil
	}
	return "", fmt.Errorf("internal error: %T is not a scalar", v)
}

// repr writes Python's repr(v).
func (p *printer) repr(v Value) {
	switch v := v.(type) {
	case string:
		p.strRepr(v)
	case Undefined:
		p.WriteString("Undefined")
	case *List:
		if !p.nest() {
			return
		}
		defer func() { p.depth-- }()
		open, close := "[", "]"
		if v.Tuple {
			open, close = "(", ")"
		}
		p.WriteString(open)
		for i, it := range v.Items {
			if p.err != nil {
				return
			}
			if i > 0 {
				p.WriteString(", ")
			}
			p.repr(it)
		}
		if v.Tuple && len(v.Items) == 1 {
			p.WriteString(",")
		}
		p.WriteString(close)
	case *Dict:
		if !p.nest() {
			return
		}
		defer func() { p.depth-- }()
		p.WriteString("{")
		for i, k := range v.keys {
			if p.err != nil {
				return
			}
			if i > 0 {
				p.WriteString(", ")
			}
			p.repr(k)
			p.WriteString(": ")
			p.repr(v.vals[i])
		}
		p.WriteString("}")
	case *Namespace:
		for _, a := range p.active {
			if a == v {
				p.WriteString("<Namespace {...}>")
				return
			}
		}
		if !p.nest() {
			return
		}
		p.active = append(p.active, v)
		defer func() { p.depth--; p.active = p.active[:len(p.active)-1] }()
		p.WriteString("<Namespace ")
		p.repr(v.attrs)
		p.WriteString(">")
	case *Func:
		p.WriteString("<function " + v.Name + ">")
	case *Loop:
		p.WriteString(fmt.Sprintf("<LoopContext %d/%d>", v.index+1, len(v.items)))
	default:
		p.str(v)
	}
}

// strRepr writes Python's repr of a str.
func (p *printer) strRepr(s string) {
	quote := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		quote = '"'
	}
	p.WriteByte(quote)
	for len(s) > 0 && p.err == nil {
		// Runs that print as they are go out in one write.
		n := 0
		for n < len(s) {
			r, w := utf8.DecodeRuneInString(s[n:])
			if r == rune(quote) || r == '\\' || !(r == ' ' || unicode.IsPrint(r)) || r == utf8.RuneError && w == 1 {
				break
			}
			n += w
		}
		if n > 0 {
			p.WriteString(s[:n])
			s = s[n:]
			continue
		}
		r, w := utf8.DecodeRuneInString(s)
		s = s[w:]
		switch {
		case r == rune(quote) || r == '\\':
			p.WriteByte('\\')
			p.WriteRune(r)
		case r == '\n':
			p.WriteString(`\n`)
		case r == '\r':
			p.WriteString(`\r`)
		case r == '\t':
			p.WriteString(`\t`)
		case r == utf8.RuneError:
			p.WriteRune(r) // U+FFFD is printable in Python
		case r < 0x100:
			p.WriteString(fmt.Sprintf(`\x%02x`, r))
		case r < 0x10000:
			p.WriteString(fmt.Sprintf(`\u%04x`, r))
		default:
			p.WriteString(fmt.Sprintf(`\U%08x`, r))
		}
	}
	p.WriteByte(quote)
}

// str is Python's str(v) as Jinja2 prints it, charged to b as op.
func (b *budget) str(v Value, op string) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case Undefined:
		return "", nil
	case nil, bool:
		return scalarText(v)
	}
	p := &printer{b: b, op: op}
	p.str(v)
	return p.result()
}

// repr is Python's repr(v), charged to b as op.
func (b *budget) repr(v Value, op string) (string, error) {
	p := &printer{b: b, op: op}
	p.repr(v)
	return p.result()
}

// shortRepr is repr(v) cut to about 200 bytes, for error messages.
func shortRepr(v Value) string {
	p := &printer{max: 200}
	p.repr(v)
	s, err := p.result()
	if err != nil {
		return "<" + typeName(v) + ">"
	}
	return s
}

// strRepr is Python's repr of a short str (a token, a name).
func strRepr(s string) string {
	p := &printer{}
	p.strRepr(s)
	return p.sb.String()
}

// equal is Python's ==, with the work charged to b.
func (b *budget) equal(x, y Value) (bool, error) { return b.equalAt(x, y, 0) }

func (b *budget) equalAt(x, y Value, depth int) (bool, error) {
	if i, ok := x.(int64); ok {
		if j, ok := y.(int64); ok {
			return i == j, nil
		}
	}
	if nx, ok := numeric(x); ok {
		if ny, ok := numeric(y); ok {
			if err := b.bigWork("==", nx, ny); err != nil {
				return false, err
			}
			return numCompare(nx, ny) == 0, nil
		}
		return false, nil
	}
	switch x := x.(type) {
	case nil:
		return y == nil, nil
	case string:
		ys, ok := y.(string)
		if !ok || len(x) != len(ys) {
			return false, nil
		}
		if err := b.scan(len(x), "=="); err != nil {
			return false, err
		}
		return x == ys, nil
	case Undefined:
		_, ok := y.(Undefined)
		return ok, nil
	case *List:
		yl, ok := y.(*List)
		if !ok || yl.Tuple != x.Tuple || len(x.Items) != len(yl.Items) {
			return false, nil
		}
		if depth >= b.maxDepth() {
			return false, b.depthErr("comparing values")
		}
		for i := range x.Items {
			if err := b.work(1, "=="); err != nil {
				return false, err
			}
			if eq, err := b.equalAt(x.Items[i], yl.Items[i], depth+1); err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	case *Dict:
		yd, ok := y.(*Dict)
		if !ok || x.Len() != yd.Len() {
			return false, nil
		}
		if depth >= b.maxDepth() {
			return false, b.depthErr("comparing values")
		}
		for i, k := range x.keys {
			if err := b.work(1, "=="); err != nil {
				return false, err
			}
			v, ok, err := yd.get(b, k)
			if err != nil || !ok {
				return false, err
			}
			if eq, err := b.equalAt(x.vals[i], v, depth+1); err != nil || !eq {
				return false, err
			}
		}
		return true, nil
	}
	return x == y, nil
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

// bigWork charges going through the words of big integers (comparing them,
// converting them to float).
func (b *budget) bigWork(op string, nums ...number) error {
	var w int64
	for _, n := range nums {
		if !n.isFloat {
			w += words(n.i)
		}
	}
	if w <= 2 {
		return nil
	}
	return b.scan(int(min(w, math.MaxInt32))*8, op)
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

// compare orders x and y as Python's < does (-1, 0, 1, or 2 for NaN), an
// error for unorderable types; the work is charged to b.
func (b *budget) compare(x, y Value) (int, error) { return b.compareAt(x, y, 0) }

func (b *budget) compareAt(x, y Value, depth int) (int, error) {
	if i, ok := x.(int64); ok {
		if j, ok := y.(int64); ok {
			return cmpInt64(i, j), nil
		}
	}
	if nx, ok := numeric(x); ok {
		if ny, ok := numeric(y); ok {
			if err := b.bigWork("comparison", nx, ny); err != nil {
				return 0, err
			}
			return numCompare(nx, ny), nil
		}
	}
	switch x := x.(type) {
	case string:
		if ys, ok := y.(string); ok {
			if err := b.scan(min(len(x), len(ys)), "comparison"); err != nil {
				return 0, err
			}
			return strings.Compare(x, ys), nil
		}
	case *List:
		if yl, ok := y.(*List); ok && yl.Tuple == x.Tuple {
			if depth >= b.maxDepth() {
				return 0, b.depthErr("comparing values")
			}
			for i := 0; i < len(x.Items) && i < len(yl.Items); i++ {
				if err := b.work(1, "comparison"); err != nil {
					return 0, err
				}
				eq, err := b.equalAt(x.Items[i], yl.Items[i], depth+1)
				if err != nil {
					return 0, err
				}
				if !eq {
					return b.compareAt(x.Items[i], yl.Items[i], depth+1)
				}
			}
			return cmpInt(len(x.Items), len(yl.Items)), nil
		}
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(x), typeName(y))
}

func cmpInt(a, b int) int { return cmpInt64(int64(a), int64(b)) }

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// iterate returns the items Python's iter(v) yields; the list made for a
// string's characters is charged to b.
func (b *budget) iterate(v Value) ([]Value, error) {
	switch v := v.(type) {
	case *List:
		return v.Items, nil
	case *Dict:
		return v.keys, nil
	case string:
		n := utf8.RuneCountInString(v)
		if err := b.scan(len(v), "iterating a string"); err != nil {
			return nil, err
		}
		if err := b.allocValues(n, "iterating a string"); err != nil {
			return nil, err
		}
		out := make([]Value, 0, n)
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
func (b *budget) length(v Value) (int, error) {
	switch v := v.(type) {
	case string:
		if err := b.scan(len(v), "length"); err != nil {
			return 0, err
		}
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

// sortValues sorts in place with Python's ordering, stably, as sorted()
// does: key (which may be nil) is computed once per item, and the n·log n
// comparisons are charged before sorting.
func (b *budget) sortValues(items []Value, key func(Value) (Value, error), reverse bool) error {
	n := len(items)
	if err := b.work(mulSat(int64(n), int64(bits.Len(uint(n)))+1), "sorting"); err != nil {
		return err
	}
	if err := b.allocValues(3*n, "sorting"); err != nil {
		return err
	}
	keys := items
	if key != nil {
		keys = make([]Value, n)
		for i, it := range items {
			k, err := key(it)
			if err != nil {
				return err
			}
			keys[i] = k
		}
	}
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	var err error
	slices.SortFunc(perm, func(i, j int) int {
		if err == nil {
			c, e := b.compare(keys[i], keys[j])
			if e != nil {
				err = e
			}
			if c == -1 || c == 1 {
				if reverse {
					return -c
				}
				return c
			}
		}
		return cmpInt(i, j) // equal (or NaN): keep their order
	})
	if err != nil {
		return err
	}
	sorted := make([]Value, n)
	for k, i := range perm {
		sorted[k] = items[i]
	}
	copy(items, sorted)
	return nil
}
