package tier

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/weights"
)

// Heat is the expert-heat ledger of one model: how many token slots were
// routed to each expert over earlier runs. It is kept per model, keyed by
// manifest root, and saved atomically; the heat policy takes it as its prior
// and a warm start reads the hottest experts first.
type Heat struct {
	Format string    `json:"format"` // HeatFormat
	Root   string    `json:"root"`   // manifest root, hex
	Layers int       `json:"layers"`
	Expert int       `json:"experts"`
	Counts []float64 `json:"counts"` // by dense index: layer·experts + expert
	Runs   int64     `json:"runs"`
}

// HeatFormat identifies a heat ledger file.
const HeatFormat = "tarfa-expert-heat-v1"

// maxHeatFile bounds a heat ledger file: 32 bytes per expert at the most
// experts a model may have.
const maxHeatFile = 32 * policy.MaxExperts

// HeatPath is where the heat ledger of the model with root lives under dir.
func HeatPath(dir string, root jnf.Digest) string {
	return filepath.Join(dir, "heat", root.Hex()+".json")
}

// LoadHeat reads the heat ledger for ck under dir; a missing file is an
// empty ledger. A file for another model or of the wrong shape is an error.
func LoadHeat(dir string, ck *weights.Checkpoint) (*Heat, error) {
	cfg := ck.Config()
	h := &Heat{Format: HeatFormat, Root: ck.Root().Hex(), Layers: cfg.Layers, Expert: cfg.Experts, Counts: make([]float64, cfg.Layers*cfg.Experts)}
	p := HeatPath(dir, ck.Root())
	b, err := jnf.ReadFileLimit(p, maxHeatFile, "heat ledger")
	if errors.Is(err, fs.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return nil, err
	}
	var got Heat
	if err := jnf.DecodeJSON(b, &got); err != nil {
		return nil, fmt.Errorf("%s: %v", p, err)
	}
	if got.Format != HeatFormat || got.Root != h.Root || got.Layers != h.Layers || got.Expert != h.Expert || len(got.Counts) != len(h.Counts) {
		return nil, fmt.Errorf("%s: not the heat ledger of this model (format %q, root %s, %d×%d experts)", p, got.Format, got.Root, got.Layers, got.Expert)
	}
	for i, c := range got.Counts {
		if !(c >= 0) || math.IsInf(c, 0) {
			return nil, fmt.Errorf("%s: count %d is %v", p, i, c)
		}
	}
	return &got, nil
}

// Add counts a session's expert use (its ledger summary).
func (h *Heat) Add(s ledger.Summary) {
	for _, u := range s.Experts {
		if i := u.Layer*h.Expert + u.Expert; u.Layer >= 0 && u.Layer < h.Layers && u.Expert >= 0 && u.Expert < h.Expert {
			h.Counts[i] += float64(u.Tokens)
		}
	}
	h.Runs++
}

// Save writes the ledger atomically under dir.
func (h *Heat) Save(dir string) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	p := filepath.Join(dir, "heat", h.Root+".json")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return jnf.WriteFileAtomic(p, b, 0o644)
}

// Warm reads the hottest experts (policy.WarmOrder of heat) into the free
// slots of the RAM tier in the background, never evicting: a warm start,
// so the first tokens after a restart hit. It returns how many reads it
// started; Stream waits for a copy still loading as for any read.
func (h *Hierarchy) Warm(heat []float64) (int, error) {
	if h.cache == nil {
		return 0, nil
	}
	order, err := policy.WarmOrder(h.dims, heat, h.opt.Partition, h.cache.Capacity())
	if err != nil {
		return 0, err
	}
	var reqs []readReq
	h.mu.Lock()
	for _, id := range order {
		k := h.dims.Index(id)
		if h.refs[k].Length() == 0 {
			continue
		}
		if n, err := h.cache.Warm([]weights.ExpertID{id}, h.token*int64(h.dims.Layers)); err != nil || n == 0 {
			continue
		}
		b, err := h.ram.Get()
		if err != nil {
			break
		}
		e := &entry{id: id, k: k, buf: b, state: loading, prefetched: true, warm: true}
		h.resident[k] = e
		h.inflightP++
		reqs = append(reqs, readReq{ref: h.refs[k], buf: b, x: id.Expert, e: e, reply: h.prefetchQ})
	}
	h.mu.Unlock()
	h.count(func(s *Stats) { s.PrefetchIssued += int64(len(reqs)) })
	h.wwg.Add(1)
	go func() {
		defer h.wwg.Done()
		for i, r := range reqs {
			select {
			case h.preqs <- r:
			case <-h.closing:
				h.mu.Lock()
				for _, r := range reqs[i:] {
					r.e.state, r.e.err = failed, errors.New("tier: closed before the warm read")
					h.inflightP--
				}
				h.loaded.Broadcast()
				h.mu.Unlock()
				return
			}
		}
	}()
	return len(reqs), nil
}
