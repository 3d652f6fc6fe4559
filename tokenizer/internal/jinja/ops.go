package jinja

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// compareOp evaluates one comparison operator.
func (b *budget) compareOp(op string, l, r Value) (bool, error) {
	switch op {
	case "==":
		return b.equal(l, r)
	case "!=":
		eq, err := b.equal(l, r)
		return !eq, err
	case "in", "not in":
		in, err := b.contains(r, l)
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
	c, err := b.compare(l, r)
	if err != nil {
		var le *LimitError
		if errors.As(err, &le) {
			return false, err
		}
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
func (b *budget) contains(container, item Value) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		if err := b.scan(len(c)+len(s), "'in'"); err != nil {
			return false, err
		}
		return strings.Contains(c, s), nil
	case *Dict:
		if _, err := hashKey(b, item, 0); err != nil {
			return false, err
		}
		_, ok, err := c.get(b, item)
		return ok, err
	case *List:
		for _, it := range c.Items {
			if err := b.work(1, "'in'"); err != nil {
				return false, err
			}
			if eq, err := b.equal(it, item); err != nil || eq {
				return eq, err
			}
		}
		return false, nil
	case Undefined:
		return false, nil
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
}

// arith evaluates + - * / // % ** with Python semantics.
func (b *budget) arith(op string, l, r Value) (Value, error) {
	if u, ok := l.(Undefined); ok {
		return nil, undefinedErr(u)
	}
	if u, ok := r.(Undefined); ok {
		return nil, undefinedErr(u)
	}
	if x, ok := l.(int64); ok {
		if y, ok := r.(int64); ok {
			if v, ok := smallArith(op, x, y); ok {
				return v, nil
			}
		}
	}
	ln, lok := numeric(l)
	rn, rok := numeric(r)
	if lok && rok {
		return b.numArith(op, ln, rn)
	}
	switch op {
	case "+":
		switch x := l.(type) {
		case string:
			if y, ok := r.(string); ok {
				if err := b.alloc(int64(len(x))+int64(len(y)), "'+'"); err != nil {
					return nil, err
				}
				return x + y, nil
			}
			return nil, fmt.Errorf("can only concatenate str (not \"%s\") to str", typeName(r))
		case *List:
			if y, ok := r.(*List); ok && x.Tuple == y.Tuple {
				if err := b.allocValues(len(x.Items)+len(y.Items), "'+'"); err != nil {
					return nil, err
				}
				items := append(append(make([]Value, 0, len(x.Items)+len(y.Items)), x.Items...), y.Items...)
				return &List{Items: items, Tuple: x.Tuple}, nil
			}
		}
	case "*":
		if s, n, ok := seqTimes(l, r); ok {
			return b.repeat(s, n)
		}
		if s, n, ok := seqTimes(r, l); ok {
			return b.repeat(s, n)
		}
	case "%":
		if s, ok := l.(string); ok {
			return b.percentFormat(s, r)
		}
	}
	return nil, fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

// smallArith is + - * of two int64 when the result fits (ok false
// otherwise, and for the other operators).
func smallArith(op string, x, y int64) (Value, bool) {
	switch op {
	case "+":
		s := x + y
		return s, (s > x) == (y > 0)
	case "-":
		d := x - y
		return d, (d < x) == (y > 0)
	case "*":
		if x == 0 || y == 0 {
			return int64(0), true
		}
		p := x * y
		return p, p/y == x && !(x == -1 && y == math.MinInt64) && !(y == -1 && x == math.MinInt64)
	}
	return nil, false
}

// seqTimes matches sequence * count; a count beyond int64 gives a nil
// sequence, which repeat refuses as Python does.
func seqTimes(s, n Value) (Value, int64, bool) {
	switch s.(type) {
	case string, *List:
	default:
		return nil, 0, false
	}
	switch n.(type) {
	case bool, int64, *big.Int:
	default:
		return nil, 0, false
	}
	num, _ := numeric(n)
	if !num.i.IsInt64() {
		return nil, 0, true
	}
	return s, num.i.Int64(), true
}

var errIndexSize = errors.New("cannot fit 'int' into an index-sized integer")

func (b *budget) repeat(s Value, n int64) (Value, error) {
	n = max(n, 0)
	switch s := s.(type) {
	case string:
		if err := b.alloc(mulSat(int64(len(s)), n), "'*' on str"); err != nil {
			return nil, err
		}
		if len(s) == 0 {
			return "", nil
		}
		return strings.Repeat(s, int(n)), nil
	case *List:
		if err := b.alloc(mulSat(mulSat(int64(len(s.Items)), n), valueSize), "'*' on "+typeName(s)); err != nil {
			return nil, err
		}
		out := &List{Tuple: s.Tuple}
		if len(s.Items) == 0 {
			return out, nil
		}
		out.Items = make([]Value, 0, len(s.Items)*int(n))
		for range n {
			out.Items = append(out.Items, s.Items...)
		}
		return out, nil
	}
	return nil, errIndexSize // seqTimes gives no sequence for a count beyond int64
}

// words is the size of i in machine words.
func words(i *big.Int) int64 { return int64(len(i.Bits())) }

// bigCost charges a big-integer operation making a result of up to wr words
// with the given work.
func (b *budget) bigCost(op string, wr, steps int64) error {
	if err := b.alloc(mulSat(wr, 8), "integer "+op); err != nil {
		return err
	}
	return b.work(steps/64+1, "integer "+op)
}

func (b *budget) numArith(op string, x, y number) (Value, error) {
	if !x.isFloat && !y.isFloat {
		a, c := x.i, y.i
		wa, wc := words(a), words(c)
		switch op {
		case "+", "-":
			if err := b.bigCost(op, max(wa, wc)+1, max(wa, wc)); err != nil {
				return nil, err
			}
			if op == "+" {
				return intValue(new(big.Int).Add(a, c)), nil
			}
			return intValue(new(big.Int).Sub(a, c)), nil
		case "*":
			if err := b.bigCost(op, wa+wc, mulSat(wa, wc)); err != nil {
				return nil, err
			}
			return intValue(new(big.Int).Mul(a, c)), nil
		case "/":
			if c.Sign() == 0 {
				return nil, errors.New("division by zero")
			}
			if err := b.bigWork("integer /", x, y); err != nil {
				return nil, err
			}
			return x.float() / y.float(), nil
		case "//", "%":
			if c.Sign() == 0 {
				return nil, errors.New("integer division or modulo by zero")
			}
			if err := b.bigCost(op, wa+1, mulSat(wa, wc)); err != nil {
				return nil, err
			}
			q, m := new(big.Int), new(big.Int)
			q.DivMod(a, c, m) // Euclidean: m >= 0
			if m.Sign() != 0 && c.Sign() < 0 {
				q.Add(q, big.NewInt(1))
				m.Add(m, c)
			}
			if op == "//" {
				return intValue(q), nil
			}
			return intValue(m), nil
		case "**":
			if c.Sign() < 0 {
				return pyPow(x.float(), y.float())
			}
			if a.CmpAbs(big.NewInt(1)) > 0 {
				// The result has about bits(a)*c bits, made by squarings
				// each costing up to its size squared.
				exp := int64(math.MaxInt64)
				if c.IsInt64() {
					exp = c.Int64()
				}
				wr := mulSat(int64(a.BitLen()), exp)/bits.UintSize + 1
				if err := b.bigCost(op, wr, mulSat(wr, wr)); err != nil {
					return nil, err
				}
			}
			return intValue(new(big.Int).Exp(a, c, nil)), nil
		}
	}
	if err := b.bigWork(op, x, y); err != nil {
		return nil, err
	}
	p, q := x.float(), y.float()
	switch op {
	case "+":
		return p + q, nil
	case "-":
		return p - q, nil
	case "*":
		return p * q, nil
	case "/":
		if q == 0 {
			return nil, errors.New("float division by zero")
		}
		return p / q, nil
	case "//", "%":
		if q == 0 {
			return nil, errors.New("float modulo")
		}
		d, m := floatDivMod(p, q)
		if op == "//" {
			return d, nil
		}
		return m, nil
	case "**":
		return pyPow(p, q)
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

// slice is obj[start:stop:step] for lists, tuples and strings.
func (r *renderer) slice(obj Value, s *sliceExpr) (Value, error) {
	var bounds [3]Value
	for i, e := range []expr{s.start, s.stop, s.step} {
		if e == nil {
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
		start, step, n, err := sliceIndices(len(o.Items), bounds)
		if err != nil {
			return nil, err
		}
		if err := r.allocValues(n, "slice"); err != nil {
			return nil, err
		}
		out := &List{Tuple: o.Tuple, Items: make([]Value, n)}
		for k := range n {
			out.Items[k] = o.Items[start+k*step]
		}
		return out, nil
	case string:
		return r.sliceString(o, bounds)
	case Undefined:
		return nil, undefinedErr(o)
	}
	return Undefined{Name: "slice"}, nil
}

// sliceString slices s by characters.
func (b *budget) sliceString(s string, bounds [3]Value) (string, error) {
	if err := b.scan(len(s), "slice"); err != nil {
		return "", err
	}
	runes := utf8.RuneCountInString(s)
	start, step, n, err := sliceIndices(runes, bounds)
	if err != nil {
		return "", err
	}
	valid := utf8.ValidString(s)               // else []rune replaces the invalid bytes
	if valid && step == 1 && runes == len(s) { // ASCII: a substring
		return s[start : start+n], nil
	}
	if err := b.runes(len(s), "slice"); err != nil {
		return "", err
	}
	if valid && step == 1 { // a substring
		from := runeOffset(s, start)
		return s[from : from+runeOffset(s[from:], n)], nil
	}
	if err := b.alloc(int64(len(s))*5, "slice"); err != nil { // the runes and the result
		return "", err
	}
	rs := []rune(s)
	out := make([]rune, n)
	for k := range n {
		out[k] = rs[start+k*step]
	}
	return string(out), nil
}

// runeOffset is the byte offset of the n-th character of s (len(s) past the
// end).
func runeOffset(s string, n int) int {
	for i := range s {
		if n == 0 {
			return i
		}
		n--
	}
	return len(s)
}

// sliceIndices is Python's slice(start, stop, step).indices(n): the first
// index, the step and the number of items.
func sliceIndices(n int, b [3]Value) (start, step, count int, err error) {
	const huge = 1 << 62 // beyond any length, safe to add and negate
	get := func(v Value) (int, bool, error) {
		if v == nil {
			return 0, false, nil
		}
		num, ok := numeric(v)
		if !ok || num.isFloat {
			return 0, false, fmt.Errorf("slice indices must be integers or None, not %s", typeName(v))
		}
		if !num.i.IsInt64() || num.i.Int64() > huge || num.i.Int64() < -huge {
			if num.i.Sign() < 0 {
				return -huge, true, nil
			}
			return huge, true, nil
		}
		return int(num.i.Int64()), true, nil
	}
	step, has, err := get(b[2])
	if err != nil {
		return 0, 0, 0, err
	}
	if !has {
		step = 1
	}
	if step == 0 {
		return 0, 0, 0, errors.New("slice step cannot be zero")
	}
	lower, upper := 0, n
	if step < 0 {
		lower, upper = -1, n-1
	}
	adjust := func(v Value, def int) (int, error) {
		i, has, err := get(v)
		if err != nil || !has {
			return def, err
		}
		if i < 0 {
			i += n
			return max(i, lower), nil
		}
		return min(i, upper), nil
	}
	first, last := lower, upper
	if step < 0 {
		first, last = upper, lower
	}
	if start, err = adjust(b[0], first); err != nil {
		return 0, 0, 0, err
	}
	stop, err := adjust(b[1], last)
	if err != nil {
		return 0, 0, 0, err
	}
	switch {
	case step > 0 && start < stop:
		count = (stop-start-1)/step + 1
	case step < 0 && stop < start:
		count = (start-stop-1)/(-step) + 1
	}
	return start, step, count, nil
}
