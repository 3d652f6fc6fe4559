package engine

import (
	"math"
	"testing"
	"time"
)

// TestAutoPlacementMeasuresBothSides: the auto placement compares the
// host's measured time with the measured time of handing an expert to the
// device (LoadExpert), not with an assumed link: a device side measured
// slower than the host moves experts to the host, one measured faster
// keeps them on the device.
func TestAutoPlacementMeasuresBothSides(t *testing.T) {
	const bytes = 18 << 20
	var p autoPlacer
	var st placeState
	if !p.onHost(&st, bytes, 1) {
		t.Fatal("the host is not tried while unmeasured")
	}
	st.hostDone(bytes, 1, 500*time.Microsecond) // 38 GB/s on the host
	if !p.onHost(&st, bytes, 1) {
		t.Fatal("the assumed 25 GB/s link is slower than 38 GB/s of host compute: want the host")
	}
	for range 20 {
		st.deviceDone(bytes, 300*time.Microsecond) // a direct copy at 63 GB/s
	}
	if p.onHost(&st, bytes, 1) {
		t.Errorf("device measured at %.1f GB/s, host at 38: want the device", 1/st.devPerByte/1e9)
	}
	for range 40 {
		st.deviceDone(bytes, 2*time.Millisecond) // a staging copy at 9 GB/s
	}
	if !p.onHost(&st, bytes, 1) {
		t.Errorf("device measured at %.1f GB/s, host at 38: want the host", 1/st.devPerByte/1e9)
	}
	st.deviceDone(0, time.Nanosecond) // nothing to learn from
	if !p.onHost(&st, bytes, 1) {
		t.Error("an empty expert changed the measurement")
	}
}

// TestBalancePlacementSplitsALayer: with the host twice as slow as the
// copy for an expert, the balance placement puts a third of a layer's
// experts on the host, each side finishing at the same time; a new layer
// starts from zero, and the backend's measured copy rate replaces the
// assumed one.
func TestBalancePlacementSplitsALayer(t *testing.T) {
	const bytes = 1 << 20
	var p balancePlacer
	st := &placeState{}
	st.beginLayer()
	st.copyRate(0, 0) // nothing copied yet: the assumed rate stays
	copyS := st.copyCost(bytes)
	st.hostPerByteRow = 2 * devicePerByte // one row: rowFactor 1
	for layer := range 2 {
		var onHost []int
		for e := range 9 {
			if p.onHost(st, bytes, 1) {
				onHost = append(onHost, e)
			}
		}
		if len(onHost) != 3 || math.Abs(st.layerHost-6*copyS) > 1e-12 || math.Abs(st.layerCopy-6*copyS) > 1e-12 {
			t.Errorf("layer %d: %v on the host, the host's total %.3g s and the copies' %.3g s; want 3 on the host, both %.3g s",
				layer, onHost, st.layerHost, st.layerCopy, 6*copyS)
		}
		st.beginLayer()
	}
	// Copies measured at a tenth of the assumed rate: the host (now five
	// times faster) takes most of a layer.
	st.beginLayer()
	st.copyRate(1e9, 10*devicePerByte*1e9)
	n := 0
	for range 12 {
		if p.onHost(st, bytes, 1) {
			n++
		}
	}
	if n != 10 {
		t.Errorf("copies ten times slower than assumed: %d of 12 on the host, want 10", n)
	}
}
