package policy

import (
	"fmt"
	"sort"
)

// WarmOrder is the order in which an empty tier of capacity experts should
// be filled at start from a heat ledger (heat: a use count per expert, by
// dense index): the hottest first, ties by lower index. With PerLayer the
// set is the hottest of each layer up to that layer's share of the capacity
// (as NewCache splits it), still in order of heat, so that a fill cut short
// has loaded the hottest experts. The result has at most capacity experts;
// experts of zero heat are never included.
func WarmOrder(d Dims, heat []float64, part Partition, capacity int) ([]ExpertID, error) {
	if err := d.Check(); err != nil {
		return nil, err
	}
	if err := checkHeat(d, heat); err != nil {
		return nil, fmt.Errorf("policy: warm order: %w", err)
	}
	if capacity < 0 {
		return nil, fmt.Errorf("policy: warm order: capacity %d is negative", capacity)
	}
	idx := make([]int, 0, d.N())
	for i, h := range heat {
		if h > 0 {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool { return heat[idx[a]] > heat[idx[b]] })
	var share func(layer int) int
	switch part {
	case Global:
		share = func(int) int { return capacity }
	case PerLayer:
		share = func(l int) int {
			n := capacity / d.Layers
			if l < capacity%d.Layers {
				n++
			}
			return n
		}
	default:
		return nil, fmt.Errorf("policy: warm order: unknown partition %v", part)
	}
	taken := make([]int, d.Layers)
	var out []ExpertID
	for _, i := range idx {
		if len(out) == capacity {
			break
		}
		id := d.ID(i)
		l := id.Layer
		if part == Global {
			l = 0
		}
		if taken[l] >= share(id.Layer) {
			continue
		}
		taken[l]++
		out = append(out, id)
	}
	return out, nil
}
