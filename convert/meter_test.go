package convert

import (
	"sync"
	"testing"
)

// Workers add to one meter at once: what it reports never runs backwards
// and ends at the sum.
func TestMeterNeverRunsBackwards(t *testing.T) {
	var last int64
	bad := 0
	m := &meter{fn: func(done, _ int64) {
		if done < last {
			bad++
		}
		last = done
	}}
	m.grow(8 * 20000)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20000 {
				m.add(1)
			}
		})
	}
	wg.Wait()
	if bad > 0 || last != 8*20000 {
		t.Errorf("progress ran backwards %d times; ended at %d, want %d", bad, last, 8*20000)
	}
}
