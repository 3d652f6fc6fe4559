package tier

import (
	"context"
	"sync"
	"testing"

	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
)

type countC struct {
	mu sync.Mutex
	n  map[int]int
}

func (c *countC) Consume(e int, _ expertstream.Placed, tier ledger.Tier) error {
	c.mu.Lock()
	c.n[e]++
	c.mu.Unlock()
	return nil
}

// TestConcurrentStreamsConsumeEachExpertOnce: many Streams at once over a
// small RAM tier and fewer staging buffers than they need together: each
// consumes each of its experts exactly once.
func TestConcurrentStreamsConsumeEachExpertOnce(t *testing.T) {
	ck := openCk(t, testModel(t))
	size := int64(jnf.AlignUp(ck.ExpertBytes(0, 0)))
	h, _ := New(ck, Options{RAMBudget: 6 * size, StagingBudget: 3 * size, Readers: 4})
	defer h.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range 50 {
				c := &countC{n: map[int]int{}}
				xs := []int{(i + it) % 16, (i + it + 3) % 16, (i*7 + it) % 16, (i + 11) % 16}
				uniq := map[int]bool{}
				var ys []int
				for _, x := range xs {
					if !uniq[x] {
						uniq[x] = true
						ys = append(ys, x)
					}
				}
				if err := h.Stream(context.Background(), it%4, ys, c); err != nil {
					t.Error(err)
					return
				}
				for _, x := range ys {
					if c.n[x] != 1 {
						t.Errorf("g%d it%d: expert %d consumed %d times (%v)", i, it, x, c.n[x], ys)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

type nopC struct{}

func (nopC) Consume(int, expertstream.Placed, ledger.Tier) error { return nil }
