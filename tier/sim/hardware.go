package sim

import (
	"fmt"
	"math"
)

// Hardware are the rates and costs of the time model (see the package
// documentation). GB is 10⁹ bytes.
type Hardware struct {
	StorageGBps      float64 `json:"storage_gbps"`       // read bandwidth of the expert store
	StorageLatencyUS float64 `json:"storage_latency_us"` // per read request, µs
	QueueDepth       int     `json:"queue_depth"`        // read requests in flight
	H2DGBps          float64 `json:"h2d_gbps"`           // host-to-device copy bandwidth
	HashGBpsPerCore  float64 `json:"hash_gbps_per_core"` // verification hash rate of one core
	HashCores        int     `json:"hash_cores"`         // cores hashing in parallel
	GPUExpertUS      float64 `json:"gpu_expert_us"`      // one expert for one token on the device, µs
	CPUExpertUS      float64 `json:"cpu_expert_us"`      // one expert for one token on the CPU, µs
	DenseMSPerLayer  float64 `json:"dense_ms_per_layer"` // non-expert work of one layer for one token, ms
	TokenMS          float64 `json:"token_ms"`           // per-token work outside the layers (LM head, sampling), ms
}

// Check validates h: every rate positive and finite, every cost
// non-negative and finite. Errors name the field.
func (h *Hardware) Check() error {
	for _, f := range []struct {
		name     string
		v        float64
		positive bool
	}{
		{"StorageGBps", h.StorageGBps, true},
		{"StorageLatencyUS", h.StorageLatencyUS, false},
		{"QueueDepth", float64(h.QueueDepth), true},
		{"H2DGBps", h.H2DGBps, true},
		{"HashGBpsPerCore", h.HashGBpsPerCore, true},
		{"HashCores", float64(h.HashCores), true},
		{"GPUExpertUS", h.GPUExpertUS, false},
		{"CPUExpertUS", h.CPUExpertUS, false},
		{"DenseMSPerLayer", h.DenseMSPerLayer, false},
		{"TokenMS", h.TokenMS, false},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || (f.positive && f.v == 0) {
			want := "non-negative"
			if f.positive {
				want = "positive"
			}
			return fmt.Errorf("sim: hardware %s = %v: want a %s finite number", f.name, f.v, want)
		}
	}
	return nil
}

// Work is what one layer of one token needs from the hierarchy.
type Work struct {
	Device, RAM, Storage int // experts found on the device, in the RAM tier, read from storage
	PageCache            int // read from the page cache: hashed (and copied), no storage read
	// Balance, with a device, splits the RAM tier's experts between the
	// host's compute and the copies so that both finish together (engine
	// PlaceBalance; Config.Balance).
	Balance bool
}

// Stages are the busy times of one layer (or their sums), in seconds.
type Stages struct {
	Dense   float64 `json:"dense"`
	Read    float64 `json:"read"`
	Hash    float64 `json:"hash"`
	Copy    float64 `json:"copy"`
	Compute float64 `json:"compute"`
	// Host is the host's compute of the experts Work.Balance gave it,
	// beside the copies.
	Host   float64 `json:"host,omitempty"`
	Fill   float64 `json:"fill"`
	Hidden float64 `json:"hidden"` // I/O hidden by prefetch
	// Streams is the time inside the hierarchy's Streams, from a layer's
	// request for its experts to the last one computed (without a device).
	Streams float64 `json:"streams,omitempty"`
	Total   float64 `json:"total"`
}

func (s *Stages) add(o Stages) {
	s.Dense += o.Dense
	s.Read += o.Read
	s.Hash += o.Hash
	s.Copy += o.Copy
	s.Compute += o.Compute
	s.Host += o.Host
	s.Fill += o.Fill
	s.Hidden += o.Hidden
	s.Streams += o.Streams
	s.Total += o.Total
}

func (s *Stages) scale(f float64) {
	s.Dense *= f
	s.Read *= f
	s.Hash *= f
	s.Copy *= f
	s.Compute *= f
	s.Host *= f
	s.Fill *= f
	s.Hidden *= f
	s.Streams *= f
	s.Total *= f
}

// LayerTime is the time model for one layer: w's experts of expertBytes
// each, on the device (device true) or the CPU, with slack seconds of idle
// I/O in the previous layer of which prefetch (a fraction of this layer's
// I/O) may use. It returns the layer's stages and the idle I/O time it
// leaves for the next layer.
func (h *Hardware) LayerTime(w Work, expertBytes int64, device bool, prefetch, slack float64) (Stages, float64) {
	B := float64(expertBytes)
	lat := h.StorageLatencyUS * 1e-6
	read1 := lat + B/(h.StorageGBps*1e9)
	hash1 := B / (h.HashGBpsPerCore * 1e9 * float64(h.HashCores))
	copy1, comp1 := 0.0, h.CPUExpertUS*1e-6
	if device {
		copy1, comp1 = B/(h.H2DGBps*1e9), h.GPUExpertUS*1e-6
	}
	nD, nR, nS, nP := float64(w.Device), float64(w.RAM), float64(w.Storage), float64(w.PageCache)
	nH := 0.0 // of the RAM tier's, computed on the host
	// Without a device there are no copies (and 0/0 below where the
	// host's time is 0).
	if device && w.Balance {
		// nH·cpu1 = (nR − nH + nS + nP)·copy1: both sides finish together
		// (continuous; the engine places whole experts), at most nR (no
		// RAM hits: none).
		cpu1 := h.CPUExpertUS * 1e-6
		nH = min(nR, (nR+nS+nP)*copy1/(cpu1+copy1))
	}
	var s Stages
	s.Dense = h.DenseMSPerLayer * 1e-3
	s.Read = nS*B/(h.StorageGBps*1e9) + lat*math.Ceil(nS/float64(h.QueueDepth))
	s.Hash = (nS + nP) * hash1
	s.Copy = (nR - nH + nS + nP) * copy1
	s.Compute = (nD + nR - nH + nS + nP) * comp1
	s.Host = nH * h.CPUExpertUS * 1e-6
	io := max(s.Read, s.Hash, s.Copy)
	s.Hidden = min(prefetch*io, max(slack, 0))
	var per []float64
	switch {
	case w.Storage > 0:
		per = []float64{read1, hash1, copy1, comp1}
	case w.PageCache > 0:
		per = []float64{hash1, copy1, comp1}
	case w.RAM > 0:
		per = []float64{copy1, comp1}
	}
	if len(per) > 0 {
		var sum, big float64
		for _, x := range per {
			sum += x
			big = max(big, x)
		}
		s.Fill = sum - big
	}
	s.Total = s.Dense + max(io-s.Hidden, s.Compute, s.Host) + s.Fill
	return s, s.Total - (io - s.Hidden)
}
