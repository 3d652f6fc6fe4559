package jinja

import (
	"testing"
)

// TestStringIndexAndSlice checks character indexing and slicing, which walk
// the UTF-8 bytes instead of converting to runes, against []rune.
func TestStringIndexAndSlice(t *testing.T) {
	r := &renderer{budget: newBudget(Limits{})}
	for _, s := range []string{"", "a", "abc", "h\u00e9llo", "\U0001F600x\u00e9", "a\xffb\xe2\x82", "\xff"} {
		runes := []rune(s)
		n := len(runes)
		for i := -n - 2; i <= n+2; i++ {
			got, err := r.getitem(s, int64(i))
			if err != nil {
				t.Fatal(err)
			}
			j := i
			if j < 0 {
				j += n
			}
			if j >= 0 && j < n {
				if got != string(runes[j]) {
					t.Errorf("%q[%d] = %q; want %q", s, i, got, string(runes[j]))
				}
			} else if _, undef := got.(Undefined); !undef {
				t.Errorf("%q[%d] = %q; want undefined", s, i, got)
			}
		}
		for start := -n - 2; start <= n+2; start++ {
			for stop := -n - 2; stop <= n+2; stop++ {
				for _, step := range []int{1, 2, -1, -3} {
					for _, b := range [][3]Value{
						{int64(start), int64(stop), int64(step)},
						{int64(start), nil, int64(step)},
						{nil, int64(stop), int64(step)},
					} {
						got, err := r.sliceString(s, b)
						if err != nil {
							t.Fatal(err)
						}
						first, st, count, err := sliceIndices(n, b)
						if err != nil {
							t.Fatal(err)
						}
						var want []rune
						for k := range count {
							want = append(want, runes[first+k*st])
						}
						if got != string(want) {
							t.Errorf("%q[%v:%v:%v] = %q; want %q", s, b[0], b[1], b[2], got, string(want))
						}
					}
				}
			}
		}
	}
}

// TestSliceIndices checks sliceIndices against Python's slice.indices
// (values printed by CPython 3.11: slice(a, b, c).indices(5) and the length
// of range(*that)).
func TestSliceIndices(t *testing.T) {
	for _, c := range []struct {
		b                   [3]Value
		start, step, length int
	}{
		{[3]Value{nil, nil, nil}, 0, 1, 5},
		{[3]Value{nil, nil, int64(-1)}, 4, -1, 5},
		{[3]Value{int64(-100), int64(100), int64(2)}, 0, 2, 3},
		{[3]Value{int64(100), int64(-100), int64(-2)}, 4, -2, 3},
		{[3]Value{int64(3), int64(1), nil}, 3, 1, 0},
		{[3]Value{int64(-2), nil, nil}, 3, 1, 2},
		{[3]Value{nil, int64(-2), int64(-1)}, 4, -1, 1},
		{[3]Value{int64(1) << 62, nil, int64(-1) << 62}, 4, -1 << 62, 1},
	} {
		start, step, n, err := sliceIndices(5, c.b)
		if err != nil || start != c.start || step != c.step || n != c.length {
			t.Errorf("indices(5) of %v = %d, %d, %d, %v; want %d, %d, %d", c.b, start, step, n, err, c.start, c.step, c.length)
		}
	}
}
