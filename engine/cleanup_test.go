package engine

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/backend/backendtest"
)

// TestDroppedSessionAfterBackendClose is the pattern of `tarfa validate hf
// --backend cuda` that crashed on the H200: sessions run (Generate, through
// the session's own Batch, and Forward) and dropped without Close, the
// model and then the backend closed, and the garbage collector running the
// dropped sessions' cleanups after that. On the simulated device no call
// may reach the backend after its Close (a real device has released its
// context by then); a session kept past Model.Close is refused with a named
// error and its Close touches nothing.
func TestDroppedSessionAfterBackendClose(t *testing.T) {
	c := conformance[0]
	be := backendtest.NewDevice(1, 0)
	m := loadResident(t, c.ckpt, Options{Backend: be})
	prompt := readReference(t, c.fixture).Prompts[1]
	collected := make(chan struct{})
	func() {
		s := m.NewSession()
		if _, err := Generate(context.Background(), s, prompt, GenOptions{MaxTokens: 3}, nil); err != nil {
			t.Fatal(err)
		}
		f := m.NewSession()
		if _, err := f.Forward(prompt, false); err != nil {
			t.Fatal(err)
		}
		runtime.AddCleanup(s, func(ch chan struct{}) { close(ch) }, collected)
	}()
	kept := m.NewSession()
	if _, err := kept.Forward(prompt[:2], false); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := kept.Forward(prompt[2:3], false); err == nil || !strings.Contains(err.Error(), "model is closed") {
		t.Errorf("Forward after Model.Close: %v, want the model named closed", err)
	}
	if err := kept.Close(); err != nil {
		t.Errorf("Close after Model.Close: %v", err)
	}
	for i := 0; ; i++ {
		runtime.GC()
		select {
		case <-collected:
		case <-time.After(10 * time.Millisecond):
			if i < 300 {
				continue
			}
			t.Fatal("the dropped session was never collected (something keeps it reachable)")
		}
		break
	}
	// The engine's cleanups were queued with the one above: give them time.
	for range 5 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	if n := backendtest.CallsAfterClose(be); n != 0 {
		t.Errorf("%d calls reached the backend after its Close", n)
	}
	runtime.KeepAlive(kept)
}

// A session dropped without Close while its model lives is collected, and
// its cleanup frees its device memory: nothing the model keeps (its work,
// its solo Batch, the MoE step's consumer) may hold the session (a server
// that drops a request's session would otherwise leak its KV cache).
func TestDroppedSessionCollectedWhileModelLives(t *testing.T) {
	c := conformance[0]
	be := backendtest.NewDevice(1, 0)
	defer be.Close()
	m := loadResident(t, c.ckpt, Options{Backend: be})
	defer m.Close()
	prompt := readReference(t, c.fixture).Prompts[1]
	collected := make(chan struct{}, 2)
	func() {
		s := m.NewSession()
		if _, err := Generate(context.Background(), s, prompt, GenOptions{MaxTokens: 3}, nil); err != nil {
			t.Fatal(err)
		}
		f := m.NewSession()
		if _, err := f.Forward(prompt, true); err != nil {
			t.Fatal(err)
		}
		runtime.AddCleanup(s, func(ch chan struct{}) { ch <- struct{}{} }, collected)
		runtime.AddCleanup(f, func(ch chan struct{}) { ch <- struct{}{} }, collected)
	}()
	got := 0
	for i := 0; got < 2 && i < 300; i++ {
		runtime.GC()
		select {
		case <-collected:
			got++
		case <-time.After(10 * time.Millisecond):
		}
	}
	if got < 2 {
		t.Fatalf("%d of 2 dropped sessions collected while the model lives", got)
	}
	// Their states are freed by their cleanups, not left to Model.Close.
	for i := 0; i < 300; i++ {
		runtime.GC()
		m.sessions.mu.Lock()
		n := len(m.sessions.live)
		m.sessions.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("the dropped sessions' device state was never freed")
}
