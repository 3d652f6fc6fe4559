package engine

import (
	"container/list"
	"sync"

	"github.com/tarfa-ai/tarfa/weights"
)

// expertCache keeps verified experts (as the attestation layer returned
// them) in least-recently-used order within a byte budget. A nil cache
// caches nothing. It is safe for concurrent use.
type expertCache struct {
	mu    sync.Mutex
	limit int64 // < 0: unlimited
	size  int64
	lru   *list.List // front = most recent; values are *cached
	byID  map[[2]int]*list.Element
}

type cached struct {
	id   [2]int
	ve   weights.VerifiedExpert
	size int64
}

func newExpertCache(limit int64) *expertCache {
	return &expertCache{limit: limit, lru: list.New(), byID: map[[2]int]*list.Element{}}
}

func (c *expertCache) get(l, e int) (weights.VerifiedExpert, bool) {
	if c == nil {
		return weights.VerifiedExpert{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[[2]int{l, e}]
	if !ok {
		return weights.VerifiedExpert{}, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*cached).ve, true
}

func (c *expertCache) put(l, e int, ve weights.VerifiedExpert) {
	if c == nil {
		return
	}
	n := ve.Bytes()
	c.mu.Lock()
	defer c.mu.Unlock()
	id := [2]int{l, e}
	if _, ok := c.byID[id]; ok || (c.limit >= 0 && n > c.limit) {
		return
	}
	for c.limit >= 0 && c.size+n > c.limit {
		old := c.lru.Back()
		v := old.Value.(*cached)
		c.lru.Remove(old)
		delete(c.byID, v.id)
		c.size -= v.size
	}
	c.byID[id] = c.lru.PushFront(&cached{id: id, ve: ve, size: n})
	c.size += n
}

// snapshot lists the cached experts.
func (c *expertCache) snapshot() []weights.VerifiedExpert {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]weights.VerifiedExpert, 0, len(c.byID))
	for el := c.lru.Front(); el != nil; el = el.Next() {
		out = append(out, el.Value.(*cached).ve)
	}
	return out
}
