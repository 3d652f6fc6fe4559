package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Placement chooses where the routed experts that are not resident in a
// device backend's memory are computed: on the device (their bytes cross
// to it) or on the host CPU (the activations cross instead). It decides
// for every expert delivered as host bytes and, under a source with a
// device level, for every expert the device level does not hold and the
// source's RAM tier does, before a slot is taken for it
// (expertstream.HostPlacer): placed on the host, it is computed from its
// RAM copy and fills no slot; the source's reads still fill slots. Both compute
// the same bits (EXACTNESS.md), so a placement changes speed only; replay
// under any placement is bit-identical. With the CPU backend there is only
// one side and Placement is ignored.
type Placement string

const (
	// PlaceAuto places each expert where it is expected to finish sooner,
	// from measured costs: the host's time per weight byte and row against
	// the time the step's goroutine spends handing the expert's bytes to
	// the device (LoadExpert, FillSlot: a copy it waits for).
	PlaceAuto Placement = ""
	// PlaceDevice computes every expert on the device.
	PlaceDevice Placement = "device"
	// PlaceHost computes every expert that is not resident on the device on
	// the host.
	PlaceHost Placement = "host"
	// PlaceRandom places each expert on one side or the other at random
	// (a fixed seed): a test of placement independence.
	PlaceRandom Placement = "random"
	// PlaceBalance splits each layer's experts that need bytes moved (RAM
	// copies below the device level included) between the host and the
	// device's copies so that both finish together: an expert goes to the
	// side whose running total for the layer, with it added, is smaller —
	// the host's measured time for it, or its bytes at the measured
	// host-to-device copy rate (the backend's copy timing, where it times
	// its copies: bench decode, bench serve --device-time; else
	// devicePerByte). The host computes while the copies run (the source
	// delivers the experts placed on the host last).
	PlaceBalance Placement = "balance"
)

// Placements are the valid Placement names, for flags ("auto" for
// PlaceAuto).
var Placements = []string{"auto", string(PlaceDevice), string(PlaceHost), string(PlaceRandom), string(PlaceBalance)}

// ParsePlacement parses a Placements name.
func ParsePlacement(s string) (Placement, error) {
	switch s {
	case "auto", "":
		return PlaceAuto, nil
	case string(PlaceDevice), string(PlaceHost), string(PlaceRandom), string(PlaceBalance):
		return Placement(s), nil
	}
	return "", badPlacement(s)
}

func badPlacement(p string) error {
	return fmt.Errorf("engine: placement %q: want auto, device, host, random or balance", p)
}

func (p Placement) placer() (placer, error) {
	switch p {
	case PlaceAuto:
		return &autoPlacer{}, nil
	case PlaceDevice:
		return fixedPlacer(false), nil
	case PlaceHost:
		return fixedPlacer(true), nil
	case PlaceRandom:
		return &randomPlacer{r: rand.New(rand.NewPCG(1, 2))}, nil
	case PlaceBalance:
		return balancePlacer{}, nil
	}
	return nil, badPlacement(string(p))
}

// placer decides, for one delivered expert of bytes bytes evaluated for n
// rows, whether the host computes it. takesRAMCopies says whether it may
// also take an expert the RAM tier holds from the device level below it
// (expertstream.HostPlacer) rather than decide only for what the device
// level does not place.
type placer interface {
	mayUseHost() bool
	takesRAMCopies() bool
	onHost(st *placeState, bytes int64, n int) bool
}

type fixedPlacer bool

func (f fixedPlacer) mayUseHost() bool                    { return bool(f) }
func (f fixedPlacer) takesRAMCopies() bool                { return bool(f) }
func (f fixedPlacer) onHost(*placeState, int64, int) bool { return bool(f) }

type randomPlacer struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (p *randomPlacer) mayUseHost() bool     { return true }
func (p *randomPlacer) takesRAMCopies() bool { return true }
func (p *randomPlacer) onHost(*placeState, int64, int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.r.IntN(2) == 1
}

// autoPlacer compares the host's measured cost of computing the expert
// with the cost of moving it to the device.
type autoPlacer struct{}

func (autoPlacer) mayUseHost() bool { return true }

// takesRAMCopies is false: on the H200 the split computed on the host
// lost to the copy into a slot (0.021 against 0.0146 s/token, BENCHMARKS.md
// "Experts in RAM at the copy-and-hash limit"), and the cost model counts
// neither the device's idle time nor the per-layer read of the activations.
func (autoPlacer) takesRAMCopies() bool { return false }

func (autoPlacer) onHost(st *placeState, bytes int64, n int) bool {
	return st.hostCost(bytes, n) < st.deviceCost(bytes, n)
}

// balancePlacer is PlaceBalance: within a layer, each expert to the side
// that would finish it sooner after what that side already took.
type balancePlacer struct{}

func (balancePlacer) mayUseHost() bool     { return true }
func (balancePlacer) takesRAMCopies() bool { return true }

func (balancePlacer) onHost(st *placeState, bytes int64, n int) bool {
	h := float64(st.layerHost + st.hostCost(bytes, n))
	d := float64(st.layerCopy + st.copyCost(bytes))
	if h < d {
		st.layerHost = h
		return true
	}
	st.layerCopy = d
	return false
}

// placeState holds a step queue's cost measurements for the auto
// placement, exponentially weighted averages: the host's seconds per
// weight byte per row computed, and the seconds per byte the step's
// goroutine spent handing an expert to the device (LoadExpert: the copy
// it waits for from pinned memory, or the copy into the queue's pinned
// staging). For the balance placement, also the device's own copy time
// per byte (copyPerByte: the backend's counters, where it times its
// copies) and the current layer's totals so far on each side.
type placeState struct {
	hostPerByteRow float64 // seconds; 0 until measured
	devPerByte     float64 // seconds; 0 until measured

	copyPerByte          float64 // seconds; 0 until measured
	layerHost, layerCopy float64 // seconds of the current layer's experts placed so far
}

// beginLayer starts a layer's totals for the balance placement.
func (st *placeState) beginLayer() { st.layerHost, st.layerCopy = 0, 0 }

// copyRate takes the copy rate from the backend's counters of
// host-to-device copies so far (bytes and their device time; a backend
// that does not time its copies gives 0, which is "not measured").
func (st *placeState) copyRate(h2dBytes int64, h2dSeconds float64) {
	if h2dBytes > 0 {
		st.copyPerByte = h2dSeconds / float64(h2dBytes)
	}
}

// copyCost is the expected device time of copying an expert of bytes to
// the device: the measured copy rate, else devicePerByte.
func (st *placeState) copyCost(bytes int64) float64 { return bytesAt(st.copyPerByte, bytes) }

// devicePerByte is the assumed time to move one weight byte to the device
// until one is measured: a PCIe 4.0 x16 link with pinned buffers.
const devicePerByte = 1 / 25e9

// hostCost is the expected host time for an expert of bytes evaluated for n
// rows: the rows share each weight load, so the cost grows slowly with n.
func (st *placeState) hostCost(bytes int64, n int) float64 {
	if st.hostPerByteRow == 0 {
		return 0 // unmeasured: try the host once
	}
	return float64(st.hostPerByteRow*float64(bytes)) * rowFactor(n)
}

func (st *placeState) deviceCost(bytes int64, n int) float64 { return bytesAt(st.devPerByte, bytes) }

// bytesAt is the time of bytes at per seconds a byte, devicePerByte when
// per is 0 (not measured).
func bytesAt(per float64, bytes int64) float64 {
	if per == 0 {
		per = devicePerByte
	}
	return float64(per * float64(bytes))
}

// The products below are rounded explicitly, as everywhere in the engine
// (EXACTNESS.md, canon.TestNoFMA), although they only choose a placement.

// rowFactor models how a host expert's time grows with its rows: weight
// streaming for a few rows, arithmetic beyond.
func rowFactor(n int) float64 { return 1 + float64(float64(n-1)/8) }

func (st *placeState) hostDone(bytes int64, n int, d time.Duration) {
	v := d.Seconds() / float64(float64(bytes)*rowFactor(n))
	if st.hostPerByteRow == 0 {
		st.hostPerByteRow = v
	} else {
		st.hostPerByteRow = float64(0.8*st.hostPerByteRow) + float64(0.2*v)
	}
}

// deviceDone records the time LoadExpert took for an expert of bytes.
func (st *placeState) deviceDone(bytes int64, d time.Duration) {
	if bytes <= 0 {
		return
	}
	v := d.Seconds() / float64(bytes)
	if st.devPerByte == 0 {
		st.devPerByte = v
	} else {
		st.devPerByte = float64(0.8*st.devPerByte) + float64(0.2*v)
	}
}
