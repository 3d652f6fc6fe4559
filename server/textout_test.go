package server

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTextOutLong: a long response assembled whole (every token added,
// then taken at once) costs time in proportion to its length (130k
// tokens: well under a second; copying the text so far per token takes
// minutes).
func TestTextOutLong(t *testing.T) {
	const n = 1 << 17
	o := newTextOut(nil, []string{"never-there"})
	var want strings.Builder
	start := time.Now()
	for i := range n {
		if i%4096 == 0 && time.Since(start) > 10*time.Second {
			t.Fatalf("%v for the first %d tokens", time.Since(start), i)
		}
		o.add(i)
		if i > 0 {
			want.WriteByte(' ')
		}
		want.WriteString(strconv.Itoa(i))
	}
	if got := o.take(true); got != want.String() {
		t.Errorf("%d bytes of text, want %d", len(got), want.Len())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("%v for %d tokens", d, n)
	}
}
