package backendtest

import (
	"strings"
	"testing"
)

// TestDeviceCallsAfterClose: the simulated device refuses, and counts,
// every call made after its Close (on a real device they reach a released
// context), so that tests above the backend can check that none is made.
func TestDeviceCallsAfterClose(t *testing.T) {
	be := NewDevice(1, 0)
	q, err := be.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	b, err := be.Alloc(4)
	if err != nil {
		t.Fatal(err)
	}
	q.Write(b, []float32{1, 2, 3, 4})
	if err := q.Sync(); err != nil {
		t.Fatal(err)
	}
	if n := CallsAfterClose(be); n != 0 {
		t.Fatalf("%d calls after Close before Close", n)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	q.Zero(b)
	if err := q.Sync(); err == nil || !strings.Contains(err.Error(), "after Close") {
		t.Errorf("Zero and Sync after Close: %v", err)
	}
	if _, err := be.Alloc(4); err == nil || !strings.Contains(err.Error(), "Alloc after Close") {
		t.Errorf("Alloc after Close: %v", err)
	}
	if _, err := be.NewQueue(); err == nil || !strings.Contains(err.Error(), "NewQueue after Close") {
		t.Errorf("NewQueue after Close: %v", err)
	}
	be.Free(b)
	if err := q.Close(); err == nil {
		t.Error("Queue.Close after Close: no error")
	}
	// Zero, Sync, Alloc, NewQueue, Free, Queue.Close.
	if n := CallsAfterClose(be); n != 6 {
		t.Errorf("%d calls after Close counted, want 6", n)
	}
}
