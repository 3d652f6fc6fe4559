package weights

import (
	"errors"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/jnf"
)

func TestArenaBudget(t *testing.T) {
	a, err := NewArena(10000, 3*16384)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.BufferSize()%PageSize != 0 || a.BufferSize() < 10000 || a.Capacity() != 3*16384/a.BufferSize() {
		t.Fatalf("size %d capacity %d", a.BufferSize(), a.Capacity())
	}
	var bufs []*Buffer
	for range a.Capacity() {
		b, err := a.Get()
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	if _, err := a.Get(); !errors.Is(err, ErrBudget) {
		t.Fatalf("over budget: %v", err)
	}
	if a.Mapped() > 3*16384 || a.InUse() != a.Capacity() {
		t.Errorf("mapped %d in use %d", a.Mapped(), a.InUse())
	}
	bufs[0].Release()
	if err := bufs[0].Release(); err == nil {
		t.Error("released twice")
	}
	if b, err := a.Get(); err != nil || b != bufs[0] {
		t.Errorf("a released buffer is not reused: %v", err)
	}
	if _, err := NewArena(8192, 4096); !errors.Is(err, ErrBudget) {
		t.Errorf("budget below one buffer: %v", err)
	}
}

// TestVerifyInArena: an expert read into an arena buffer is minted in
// place, sealed read-only (a write faults), invalidated by Release, and a
// tampered read is refused.
func TestVerifyInArena(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	c := open(t, dir)
	ref, err := c.ExpertRef(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewArena(int(ref.ReadLength()), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	read := func(b *Buffer) {
		f, err := os.Open(ref.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.ReadAt(b.Bytes()[:ref.ReadLength()], ref.Offset()); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := a.Get()
	read(b)
	e, err := ref.Verify(b)
	if err != nil {
		t.Fatal(err)
	}
	want, err := c.Expert(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID() != (ExpertID{2, 3}) || e.Down().Values().Data() != want.Down().Values().Data() || !e.Digest().Equal(ref.Digest()) || !b.Sealed() {
		t.Fatalf("arena expert %v differs from the checkpoint's", e.ID())
	}
	if err := e.Recheck(); err != nil {
		t.Fatal(err)
	}
	// A write to a sealed buffer faults.
	func() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmtAny(r), "invalid memory address") {
				t.Errorf("writing a sealed buffer: recovered %v, want a fault", r)
			}
		}()
		b.Bytes()[5] ^= 1
	}()
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmtAny(r), "released") {
				t.Errorf("a value used after its buffer was released: recovered %v", r)
			}
		}()
		e.Gate()
	}()
	// Tampered bytes: refused, the buffer left writable.
	b, _ = a.Get()
	read(b)
	b.Bytes()[100] ^= 0x40
	var mm *jnf.MismatchError
	if _, err := ref.Verify(b); !errors.As(err, &mm) || b.Sealed() || !strings.Contains(err.Error(), "model.layers.2.mlp.experts.3") {
		t.Errorf("tampered read: %v (sealed %v)", err, b.Sealed())
	}
	b.Release()
	var zero ExpertRef
	func() {
		defer func() { recover() }()
		zero.Verify(b)
		t.Error("a zero ExpertRef verified")
	}()
}

func fmtAny(v any) string {
	if e, ok := v.(error); ok {
		return e.Error()
	}
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// recPinner records what it pinned and unpinned; it refuses to pin when
// refuse is set.
type recPinner struct {
	refuse          bool
	pinned, unpined int
}

func (p *recPinner) Pin(mem []byte) (func() error, error) {
	if p.refuse {
		return nil, errors.New("no pinned memory")
	}
	p.pinned++
	return func() error { p.unpined++; return nil }, nil
}

// TestArenaPinner: every buffer the arena maps is pinned once and unpinned
// before it is unmapped (at Close for free ones, at Release after Close for
// the others); a buffer the pinner refuses is used unpinned.
func TestArenaPinner(t *testing.T) {
	a, err := NewArena(PageSize, 3*int64(PageSize))
	if err != nil {
		t.Fatal(err)
	}
	var p recPinner
	a.SetPinner(&p)
	b1, _ := a.Get()
	b2, _ := a.Get()
	if !b1.Pinned() || !b2.Pinned() || p.pinned != 2 {
		t.Fatalf("pinned %v %v, %d pins", b1.Pinned(), b2.Pinned(), p.pinned)
	}
	if err := b1.Release(); err != nil {
		t.Fatal(err)
	}
	if b, _ := a.Get(); b != b1 || p.pinned != 2 {
		t.Errorf("a recycled buffer was pinned again (%d pins)", p.pinned)
	}
	p.refuse = true
	b3, err := a.Get()
	if err != nil || b3.Pinned() {
		t.Fatalf("refused pin: %v, pinned %v", err, b3.Pinned())
	}
	b3.Bytes()[0] = 1 // usable
	b3.Release()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if p.unpined != 0 {
		t.Errorf("%d unpinned at Close, none of the pinned buffers was free", p.unpined)
	}
	b1.Release()
	b2.Release()
	if p.unpined != 2 {
		t.Errorf("%d of 2 pinned buffers unpinned", p.unpined)
	}
}

// TestViewAfterRelease: a View taken from a value minted in an arena buffer
// outlives neither the buffer's Release nor its reuse for another read:
// Data panics, naming the record, instead of returning recycled bytes. A
// view of memory of its own (Checkpoint.Expert) is not affected.
func TestViewAfterRelease(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	c := open(t, dir)
	refA, err := c.ExpertRef(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	refB, err := c.ExpertRef(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewArena(int(max(refA.ReadLength(), refB.ReadLength())), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	verify := func(ref ExpertRef) (*Buffer, VerifiedExpert) {
		t.Helper()
		b, err := a.Get()
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(ref.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.ReadAt(b.Bytes()[:ref.ReadLength()], ref.Offset()); err != nil {
			t.Fatal(err)
		}
		e, err := ref.Verify(b)
		if err != nil {
			t.Fatal(err)
		}
		return b, e
	}
	own, err := c.Expert(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	ownDown := own.Down().Values()
	b, e := verify(refA)
	down := e.Down().Values()
	if down.Data() != ownDown.Data() {
		t.Fatal("the arena view differs from the checkpoint's")
	}
	mustPanic := func(what string) {
		t.Helper()
		defer func() {
			r := recover()
			if r == nil || !strings.Contains(fmtAny(r), "released") || !strings.Contains(fmtAny(r), "model.layers.2.mlp.experts.3: ") {
				t.Errorf("%s: recovered %v, want a panic naming the record", what, r)
			}
		}()
		_ = down.Data()
	}
	if err := b.Release(); err != nil {
		t.Fatal(err)
	}
	mustPanic("Data of a view after its buffer's Release")
	// The arena hands the same buffer to the next read.
	b2, e2 := verify(refB)
	if b2 != b {
		t.Fatal("the arena did not recycle the buffer")
	}
	mustPanic("Data of a view after its buffer was reused")
	if down.Name() != "model.layers.2.mlp.experts.3.down_proj" || down.Dims() != 2 {
		t.Errorf("the view's metadata: %s, %d dims", down.Name(), down.Dims())
	}
	if e2.Gate().Values().Data() == "" || ownDown.Data() == "" {
		t.Error("live views lost their data")
	}
	b2.Release()
	if ownDown.Data() == "" {
		t.Error("a view of memory of its own is affected by an arena's Release")
	}
}

// TestArenaLazyPinner: with a lazy pinner Get maps without pinning; Pin
// pins once (a recycled buffer stays pinned), a refused buffer is used
// unpinned and asked again; every pinned buffer is unpinned before it is
// unmapped; without a lazy pinner Pin does nothing.
func TestArenaLazyPinner(t *testing.T) {
	a, err := NewArena(PageSize, 3*int64(PageSize))
	if err != nil {
		t.Fatal(err)
	}
	var p recPinner
	a.SetLazyPinner(&p)
	b1, _ := a.Get()
	if b1.Pinned() || p.pinned != 0 {
		t.Fatalf("Get pinned with a lazy pinner (%d pins)", p.pinned)
	}
	if !b1.Pin() || !b1.Pin() || p.pinned != 1 {
		t.Fatalf("Pin: pinned %v, %d pins, want 1", b1.Pinned(), p.pinned)
	}
	b1.Release()
	if b, _ := a.Get(); b != b1 || !b.Pin() || p.pinned != 1 {
		t.Errorf("a recycled buffer was pinned again (%d pins)", p.pinned)
	}
	p.refuse = true
	b2, _ := a.Get()
	if b2.Pin() || b2.Pinned() {
		t.Fatal("a refused pin reported pinned")
	}
	p.refuse = false
	if !b2.Pin() || p.pinned != 2 {
		t.Errorf("a refused buffer was not pinned when asked again (%d pins)", p.pinned)
	}
	b1.Release()
	b2.Release()
	if err := a.Close(); err != nil || p.unpined != 2 {
		t.Errorf("Close: %v, %d of 2 unpinned", err, p.unpined)
	}
	plain, _ := NewArena(PageSize, int64(PageSize))
	defer plain.Close()
	b, _ := plain.Get()
	if b.Pin() {
		t.Error("Pin pinned without a pinner")
	}
	b.Release()
}

// syncPinner is a recPinner safe for the spare keeper's goroutine; with
// gate set, each Pin waits for a value on it.
type syncPinner struct {
	mu              sync.Mutex
	pinned, unpined int
	gate            chan struct{}
	entered         chan struct{}
}

func (p *syncPinner) Pin(mem []byte) (func() error, error) {
	if p.entered != nil {
		p.entered <- struct{}{}
	}
	if p.gate != nil {
		<-p.gate
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pinned++
	return func() error { p.mu.Lock(); p.unpined++; p.mu.Unlock(); return nil }, nil
}

func (p *syncPinner) counts() (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pinned, p.unpined
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestArenaKeepSpare: the keeper maps and pins n free buffers ahead of Get
// (a lazy pinner too), maps another after each Get, never more than max
// buffers or the budget in all, and Close unpins every one.
func TestArenaKeepSpare(t *testing.T) {
	a, err := NewArena(PageSize, 5*int64(PageSize))
	if err != nil {
		t.Fatal(err)
	}
	p := &syncPinner{}
	a.SetLazyPinner(p)
	a.KeepSpare(2, 3)
	free := func() int { return int(a.Mapped()/int64(PageSize)) - a.InUse() }
	waitFor(t, "two spares", func() bool { return free() == 2 })
	if n, _ := p.counts(); n != 2 {
		t.Fatalf("%d pins for 2 spares", n)
	}
	b1, err := a.Get()
	if err != nil || !b1.Pinned() {
		t.Fatalf("Get: %v, pinned %v: want a spare, pinned ahead", err, b1 != nil && b1.Pinned())
	}
	// Mapped counts a buffer the keeper is still mapping; wait until it is
	// free, or b3's Get below maps a buffer of its own.
	waitFor(t, "a spare mapped after the Get", func() bool { return free() == 2 })
	if m := a.Mapped(); m != 3*int64(PageSize) {
		t.Fatalf("mapped %d bytes after one Get: want 3 buffers", m)
	}
	b2, _ := a.Get()
	b3, _ := a.Get()
	time.Sleep(20 * time.Millisecond) // the keeper must not map a fourth (max 3)
	if m := a.Mapped(); m != 3*int64(PageSize) || !b2.Pinned() || !b3.Pinned() {
		t.Fatalf("mapped %d bytes (want 3 buffers), pinned %v %v", m, b2.Pinned(), b3.Pinned())
	}
	b4, err := a.Get() // Get itself may still map up to the budget
	if err != nil || b4.Pinned() {
		t.Fatalf("Get past the keeper's max: %v, pinned %v (lazy: not yet)", err, b4.Pinned())
	}
	for _, b := range []*Buffer{b1, b2, b3, b4} {
		b.Release()
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n, u := p.counts(); n != 3 || u != 3 {
		t.Errorf("%d pins, %d unpins: want 3 and 3", n, u)
	}
}

// TestArenaKeepSpareClose: Close while the keeper is pinning a spare waits
// for it, and the spare is unpinned and unmapped, not left behind.
func TestArenaKeepSpareClose(t *testing.T) {
	a, err := NewArena(PageSize, 4*int64(PageSize))
	if err != nil {
		t.Fatal(err)
	}
	p := &syncPinner{gate: make(chan struct{}), entered: make(chan struct{})}
	a.SetPinner(p)
	a.KeepSpare(1, 4)
	<-p.entered // the keeper is in Pin
	closed := make(chan error)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while the keeper was pinning", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(p.gate)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n, u := p.counts(); n != 1 || u != 1 || a.Mapped() != 0 {
		t.Errorf("after Close: %d pins, %d unpins, %d bytes mapped", n, u, a.Mapped())
	}
	if _, err := a.Get(); err == nil {
		t.Error("Get after Close")
	}
}

// TestArenaGetWaitsForTheKeeper: when the budget's last buffer is the one
// the keeper is mapping, Get waits for it and gets it, instead of failing
// for want of budget; and a Get waiting so when the arena is closed fails,
// mapping nothing.
func TestArenaGetWaitsForTheKeeper(t *testing.T) {
	for _, closeFirst := range []bool{false, true} {
		a, err := NewArena(PageSize, int64(PageSize))
		if err != nil {
			t.Fatal(err)
		}
		p := &syncPinner{gate: make(chan struct{}), entered: make(chan struct{}, 4)}
		a.SetPinner(p)
		a.KeepSpare(1, 1)
		<-p.entered // the keeper holds the budget's only buffer, pinning it
		got := make(chan error)
		go func() {
			b, err := a.Get()
			if err == nil && !b.Pinned() {
				err = errors.New("got a buffer the keeper did not pin")
			}
			got <- err
		}()
		select {
		case err := <-got:
			t.Fatalf("Get returned (%v) while the keeper was mapping the last buffer", err)
		case <-time.After(20 * time.Millisecond):
		}
		closed := make(chan error)
		if closeFirst {
			go func() { closed <- a.Close() }()
			time.Sleep(20 * time.Millisecond)
		}
		close(p.gate)
		err = <-got
		if closeFirst {
			if err == nil {
				t.Error("Get waiting when the arena closed: got a buffer")
			}
			if cerr := <-closed; cerr != nil {
				t.Fatal(cerr)
			}
			if a.Mapped() != 0 {
				t.Errorf("%d bytes mapped after Close", a.Mapped())
			}
			continue
		}
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		a.Close()
	}
}

// TestArenaKeepSpareBudget: the keeper maps no more than the budget allows,
// whatever n and max ask for.
func TestArenaKeepSpareBudget(t *testing.T) {
	a, err := NewArena(PageSize, 2*int64(PageSize))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.KeepSpare(5, 10)
	waitFor(t, "the budget's two spares", func() bool { return a.Mapped() == 2*int64(PageSize) })
	time.Sleep(20 * time.Millisecond)
	if m := a.Mapped(); m != 2*int64(PageSize) {
		t.Errorf("%d bytes mapped, budget %d", m, 2*PageSize)
	}
}

// Close right after KeepSpare returns at once, with no spare left mapped,
// even when the keeper has not begun to run (it once ranged over the wake
// channel that Close had already set to nil, and Close waited for it for
// ever).
func TestArenaCloseBesideANewKeeper(t *testing.T) {
	for i := range 2000 {
		a, err := NewArena(PageSize, 4*int64(PageSize))
		if err != nil {
			t.Fatal(err)
		}
		a.KeepSpare(1, 2)
		done := make(chan error, 1)
		go func() { done <- a.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Close right after KeepSpare (try %d): not returned in 10 s", i)
		}
		if m := a.Mapped(); m != 0 {
			t.Fatalf("try %d: %d bytes still mapped after Close", i, m)
		}
	}
}
