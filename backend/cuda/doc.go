// Package cuda is Tarfa's CUDA backend: backend's operations as CUDA
// kernels that compute exactly the bits of the CPU reference (EXACTNESS.md,
// kernels/canon.cuh), on gorgonia.org/cu (driver API: context, streams,
// events, module loaded from PTX, launches) with a small cgo shim for
// pinned host memory and the free-memory query.
//
// The backend is built only with -tags cuda: gorgonia.org/cu's init exits
// the process on a machine without a GPU, so the default build (and CI)
// has a stub whose New says the binary was built without CUDA. Build on a
// machine without the CUDA toolkit with the headers and stub libcuda of
// Debian's nvidia-cuda-dev (../shared/ECOSYSTEM.md):
//
//	CGO_CFLAGS=-I$SDK/usr/include CGO_LDFLAGS=-L$SDK/usr/lib/x86_64-linux-gnu/stubs \
//	    go build -tags cuda ./cmd/tarfa
//
// The kernels are CUDA C in kernels/*.cu; kernels/gen.sh regenerates the
// embedded PTX (compute_80 and compute_90, --fmad=false, no fast math) with
// nvcc, and TestPTXIsCurrent checks that the PTX was generated from the
// sources as they are (TestPTXCanonical, that it has no fused
// multiply-add, approximate or flush-to-zero arithmetic, tensor-core or
// atomic instruction). The CUDA tests (TestCUDA and the budget tests, the
// conformance suite of backend/backendtest on the device) need a GPU:
//
//	go test -c -tags cuda -o cuda.test ./backend/cuda   # here
//	TARFA_TEST_DISALLOW_SKIP=1 ./cuda.test -test.v     # on the GPU machine
//
// # Block-FP8
//
// Block-FP8 matrices (a fine-grained FP8 checkpoint's: EXACTNESS.md,
// "Block-FP8 linear layers (W8A8)") are computed by the kernels of a module
// of their own, kernels/fp8.cu over kernels/fp8.cuh: fp8_quantize (one
// warp per row and group of the activations) and matmul_fp8 (one warp per
// weight row and 8 tokens, each group's sum exact in 64-bit integers).
// backend/cuda/fp8host runs the same warp functions on the host against
// canon in every test run, and the conformance suite and the block-FP8
// golden replays ran them on an H200 (validation/cudarun). A
// dense block-FP8 matrix is uploaded as its codes and float32 scales; a
// routed expert's slot holds its record's bytes (codes, then the scales as
// stored, two segments for the device hash), so the copy is verified and
// scrubbed against the record's digest like any other.
//
// # Memory
//
// --vram-budget (Options.VRAMBudget) bounds what the driver reports in use
// (cuMemGetInfo: total − free, the context and its local memory included).
// Weights are uploaded while the budget less Options.Reserve has room; the
// rest, and the embedding table whenever a budget is set, stay on the host
// and are computed there by the CPU reference (same bits). Routed experts
// are kept between uses in the pool's expert slots (backend.SlotPool:
// SlotCapacity is what the budget leaves after what is in use and the
// reserve), which the expert hierarchy allocates, fills (FillSlot: the copy
// waits for every queue's last use of the slot, its free events) and binds
// (BindSlot): which expert a slot holds, and when it is replaced, is the
// tier's device level's decision under its policy, not the backend's. The
// experts it has no slot for pass through two transient slots per queue
// (LoadExpert). Small allocations share 2 MiB slabs (the driver takes 2 MiB
// for every cuMemAlloc).
//
// # Counters and pinned slots
//
// The backend counts its copies, kernels and expert loads (backend.Meter);
// with Options.Timing it also times every kernel and host-to-device copy
// with a pair of CUDA events (for tarfa bench decode and bench serve
// --device-time), and sums the kernels' device time by the name of the
// operation that launched them (Counters.KernelTimes). Pin
// (backend.Pinner) registers host memory with the driver
// (cuMemHostRegister): the streaming tier's staging and RAM-tier buffers,
// when given to it (tier.Options.Pinner), so that an expert read into one
// is copied to the device from there, without the staging copy through the
// queue's pinned buffers (LoadExpert and FillSlot then wait for that copy before they
// return).
//
// # Verification on the device
//
// Routed experts reach LoadExpert verified: the hierarchy hashed them on
// the host against the manifest. With Options.VerifyCopies (tarfa's
// --device-verify, on by default) every copy into device memory is hashed
// again where the kernels read it, by BLAKE3 kernels (kernels/blake3.cuh:
// one thread per 1 KiB chunk, then one launch per level of parents) on a
// stream of its own, and compared with the digest at the queue's next
// synchronisation: a copy that differs fails the step with a *CopyError
// (jnf.ErrVerification) before any output of it is returned, and empties
// its slot (SlotHolds false; BindSlot refuses it until a good fill).
// ScrubDevice (backend.DeviceScrubber, which engine.Model.Scrub and so
// every scrub pass calls) re-hashes every filled slot of the pool in the
// same way. TestVerifyCopies, TestSlotFillBind and TestScrubDevice cover
// fill, bind and the emptied slot on the device. The kernels' arithmetic is
// checked against github.com/zeebo/blake3 on the host by backend/cuda/b3host
// (the same C, compiled by the C compiler) and on the device by
// TestDeviceBLAKE3; TestVerifyCopies and TestScrubDevice inject the faults.
// Dense weights on the device are not re-hashed (their digests cover
// records that norm scales are widened from).
package cuda
