package engine

import (
	"container/list"
	"sync"

	"github.com/tarfa-ai/tarfa/attest"
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
	ve   *attest.VerifiedExpert
	size int64
}

func newExpertCache(limit int64) *expertCache {
	return &expertCache{limit: limit, lru: list.New(), byID: map[[2]int]*list.Element{}}
}

func (c *expertCache) get(l, e int) *attest.VerifiedExpert {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[[2]int{l, e}]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*cached).ve
}

func (c *expertCache) put(l, e int, ve *attest.VerifiedExpert) {
	if c == nil {
		return
	}
	n := int64(len(ve.Gate().Data) + len(ve.Up().Data) + len(ve.Down().Data))
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
