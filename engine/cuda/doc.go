// Package cuda is Tarfa's CUDA backend: engine/backend's operations as CUDA
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
// nvcc, and a test checks that the PTX was generated from the sources as
// they are. With -tags cudaemu (and no cuda tag) the same backend runs on
// an emulated device: the kernels compiled as host C++ and run one block at
// a time, every thread a coroutine, so that the kernels and the backend's
// Go code can be tested bit for bit without a GPU.
package cuda
