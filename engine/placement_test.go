package engine

import (
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
