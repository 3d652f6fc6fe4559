//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"gorgonia.org/cu"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/weights"
	"github.com/tarfa-ai/tarfa/weights/weightstest"
)

// The copy side of the copy-and-hash limit (issue 22 item 2), measured on
// the GPU machine by validation/cudarun/copyhash.sh:
//
//	cuda.test -test.run '^$' -test.bench 'H2D|LoadExpert' -test.benchtime 40x

// BenchmarkH2D is the host-to-device copy rate of one buffer of each size
// (an 18 MiB expert among them) from memory of each kind: cuMemHostAlloc'd
// (the queues' own staging), mmap'd and registered with cuMemHostRegister
// (the tier's staging and RAM-tier buffers: Backend.Pin), and pageable Go
// memory (the driver stages it). Each copy is waited for, as LoadExpert
// waits for a direct copy.
func BenchmarkH2D(b *testing.B) {
	be, err := New(Options{})
	if err != nil {
		b.Skipf("no CUDA backend: %v", err)
	}
	defer be.Close()
	cb := be.(*Backend)
	if err := cb.enter(); err != nil {
		b.Fatal(err)
	}
	defer cb.leave()
	s, err := cu.MakeStream(cu.NonBlocking)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	for _, n := range []int{1 << 20, 4 << 20, 18 << 20, 64 << 20} {
		d, err := cu.MemAlloc(int64(n))
		if err != nil {
			b.Fatal(err)
		}
		for _, kind := range []string{"alloc", "registered", "pageable"} {
			var p unsafe.Pointer
			var free func()
			switch kind {
			case "alloc":
				if p, err = hostAlloc(n); err != nil {
					b.Fatal(err)
				}
				free = func() { cu.MemFreeHost(p) }
			case "registered":
				mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
				if err != nil {
					b.Fatal(err)
				}
				p = unsafe.Pointer(unsafe.SliceData(mem))
				if err := hostRegister(p, n); err != nil {
					b.Fatal(err)
				}
				free = func() { hostUnregister(p); unix.Munmap(mem) }
			case "pageable":
				mem := make([]byte, n)
				p = unsafe.Pointer(unsafe.SliceData(mem))
				free = func() { _ = mem }
			}
			src := unsafe.Slice((*byte)(p), n)
			for i := range src {
				src[i] = byte(i)
			}
			b.Run(fmt.Sprintf("%s/%dMiB", kind, n>>20), func(b *testing.B) {
				// A sub-benchmark runs on a goroutine of its own: make the
				// context current on its thread.
				if err := cb.enter(); err != nil {
					b.Fatal(err)
				}
				defer cb.leave()
				b.SetBytes(int64(n))
				t0 := time.Now()
				for b.Loop() {
					if err := cu.MemcpyHtoDAsync(d, p, int64(n), s); err != nil {
						b.Fatal(err)
					}
					if err := s.Synchronize(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/time.Since(t0).Seconds()/1e9, "GB/s")
			})
			free()
		}
		cu.MemFree(d)
	}
}

// BenchmarkLoadExpert is LoadExpert of one 18 MiB expert of Qwen3.5-122B
// shapes (3 × 1024 × 3072 BF16), verified in an arena buffer that the
// backend pinned (the tier's buffers: a direct copy, waited for) or not
// (the bytes copied into the queue's pinned staging on the caller's
// goroutine first), with its release: what the step's goroutine spends per
// expert that crosses to the device.
func BenchmarkLoadExpert(b *testing.B) {
	const I, H = 1024, 3072
	be, err := New(Options{})
	if err != nil {
		b.Skipf("no CUDA backend: %v", err)
	}
	defer be.Close()
	r := rand.New(rand.NewPCG(7, 8))
	m := &weightstest.Model{Config: []byte(testConfig), Tensors: map[string]jnf.TensorView{"small": bf16Tensor(r, 64, 256)},
		Experts: map[weights.ExpertID][3]jnf.TensorView{{Layer: 0, Expert: 0}: {bf16Tensor(r, I, H), bf16Tensor(r, I, H), bf16Tensor(r, H, I)}}}
	ck := weightstest.Open(b, m)
	ref, err := ck.ExpertRef(0, 0)
	if err != nil {
		b.Fatal(err)
	}
	for _, pinned := range []bool{true, false} {
		b.Run(map[bool]string{true: "pinned", false: "unpinned"}[pinned], func(b *testing.B) {
			a, err := weights.NewArena(int(ref.ReadLength()), ref.ReadLength()+int64(weights.PageSize))
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			if pinned {
				a.SetPinner(be.(backend.Pinner))
			}
			buf, err := a.Get()
			if err != nil {
				b.Fatal(err)
			}
			defer buf.Release()
			if buf.Pinned() != pinned {
				b.Fatalf("pinned %v, want %v", buf.Pinned(), pinned)
			}
			f, err := os.Open(ref.Path())
			if err != nil {
				b.Fatal(err)
			}
			_, err = f.ReadAt(buf.Bytes()[:ref.ReadLength()], ref.Offset())
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			ve, err := ref.Verify(buf)
			if err != nil {
				b.Fatal(err)
			}
			q, err := be.NewQueue()
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			b.SetBytes(ve.Bytes())
			t0 := time.Now()
			for b.Loop() {
				var x backend.Expert
				if err := q.LoadExpert(&x, ve.ID(), ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), I, H); err != nil {
					b.Fatal(err)
				}
				q.ReleaseExpert(&x)
			}
			if err := q.Sync(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(ve.Bytes())*float64(b.N)/time.Since(t0).Seconds()/1e9, "GB/s")
			b.Logf("direct copies so far %d", be.(*Backend).meter.direct.Load())
		})
	}
}
