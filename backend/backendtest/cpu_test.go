package backendtest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/cpu"
	"github.com/tarfa-ai/tarfa/jnf"
)

// TestCPU runs the suite on the CPU backend with several thread counts,
// every operation forced onto its parallel path.
func TestCPU(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7} {
		t.Run(fmt.Sprintf("threads=%d", n), func(t *testing.T) {
			c := cpu.New(n)
			c.SetMinParallelWork(0)
			Run(t, c, Options{})
			// The same with host-memory slots: fill and bind give the bits
			// of LoadExpert.
			c.SetSlots(2)
			Run(t, c, Options{Slots: true})
		})
	}
}

// TestDevice runs the suite on the simulated device (it must itself be a
// conforming backend for the tests that use it to mean anything).
func TestDevice(t *testing.T) {
	Run(t, NewDevice(2, 3), Options{Slots: true})
	Run(t, NewDeviceWith(DeviceOptions{Threads: 1, Slots: 2, VerifyCopies: true}), Options{Slots: true})
}

// TestDeviceBadSlot: on the simulated device with VerifyCopies, a copy
// whose bytes differ from its digest fails the Sync naming the expert
// (jnf.ErrVerification), and its slot then holds nothing: SlotHolds is
// false and BindSlot refuses it until a good fill; a bit flipped in a
// filled slot later is found by ScrubDevice, which empties that slot too.
func TestDeviceBadSlot(t *testing.T) {
	be := NewDeviceWith(DeviceOptions{Threads: 1, Slots: 2, VerifyCopies: true})
	s := newSuite(t, be, Options{Short: true})
	pool := be.(backend.SlotPool)
	sl, err := pool.AllocSlot(2 * 3 * expertI * expertH)
	if err != nil {
		t.Fatal(err)
	}
	ve, err := s.ck.Expert(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	fill := func() error {
		q, _ := be.NewQueue()
		if err := q.(backend.SlotQueue).FillSlot(sl, ve.ID(), ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), expertI, expertH); err != nil {
			t.Fatal(err)
		}
		return q.Sync()
	}
	bind := func() error {
		q, _ := be.NewQueue()
		var x backend.Expert
		err := q.(backend.SlotQueue).BindSlot(&x, sl, ve.ID(), ve.Digest())
		q.ReleaseExpert(&x)
		return err
	}
	CorruptCopies(be, ve.Digest(), true)
	err = fill()
	if !errors.Is(err, jnf.ErrVerification) || !strings.Contains(err.Error(), ve.ID().String()) {
		t.Fatalf("a corrupted fill: Sync %v; want a verification error naming %v", err, ve.ID())
	}
	if pool.SlotHolds(sl, ve.Digest()) {
		t.Error("the slot whose copy failed its check still holds the expert")
	}
	if err := bind(); !errors.Is(err, jnf.ErrVerification) {
		t.Errorf("BindSlot of the slot whose copy failed: %v; want a refusal matching ErrVerification", err)
	}
	CorruptCopies(be, ve.Digest(), false)
	if err := fill(); err != nil {
		t.Fatalf("a good fill: %v", err)
	}
	if err := bind(); err != nil || !pool.SlotHolds(sl, ve.Digest()) {
		t.Fatalf("after a good fill: bind %v, holds %v", err, pool.SlotHolds(sl, ve.Digest()))
	}
	if n, err := be.(backend.DeviceScrubber).ScrubDevice(); err != nil || n != 2*3*expertI*expertH {
		t.Fatalf("scrub of a good slot: %d bytes, %v", n, err)
	}
	if !FlipResident(be, ve.Digest()) {
		t.Fatal("no slot holds the expert")
	}
	if _, err := be.(backend.DeviceScrubber).ScrubDevice(); !errors.Is(err, jnf.ErrVerification) || pool.SlotHolds(sl, ve.Digest()) {
		t.Fatalf("scrub after a flipped bit: %v, holds %v; want a verification error and an empty slot", err, pool.SlotHolds(sl, ve.Digest()))
	}
	if err := bind(); err == nil {
		t.Error("the slot a scrub found changed was bound")
	}
}
