//go:build cuda && ptxdir

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
)

// A device-validation build (-tags cuda,ptxdir, never a release) loads the
// kernels' PTX from the directory TARFA_CUDA_PTX_DIR when it is set: PTX
// generated on the GPU machine (kernels/gen.sh there, with its nvcc) from
// the very sources this binary embeds, so that it can run there before it
// is committed. Each file must name the same sources with the same sha256
// as the embedded PTX (the header gen.sh writes), or the process stops:
// only a different compiler's output for the same code can come in this way.
//
// TARFA_CUDA_MATMUL_DEPTH and TARFA_CUDA_MATMUL_ROWS set Options.MatMulDepth
// and MatMulRows of every backend the process opens (kernel variants of the
// same bits, compared in one device call).
func init() {
	set, err := devKnobs(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ptxdir: %v\n", err)
		os.Exit(2)
	}
	devOptions = set
	dir := os.Getenv("TARFA_CUDA_PTX_DIR")
	if dir == "" {
		return
	}
	for _, f := range []struct {
		name string
		v    *string
	}{
		{"ops.compute_80.ptx", &ptx80}, {"ops.compute_90.ptx", &ptx90},
		{"fp8.compute_80.ptx", &ptxFP8_80}, {"fp8.compute_90.ptx", &ptxFP8_90},
	} {
		b, err := readPTX(filepath.Join(dir, f.name))
		if err != nil {
			fmt.Fprintf(os.Stderr, "ptxdir: %v\n", err)
			os.Exit(2)
		}
		if err := sameSources(b, *f.v); err != nil {
			fmt.Fprintf(os.Stderr, "ptxdir: %s: %v\n", f.name, err)
			os.Exit(2)
		}
		*f.v = b
		fmt.Fprintf(os.Stderr, "ptxdir: %s from %s (%s)\n", f.name, dir, ptxCompiler(b))
	}
}
