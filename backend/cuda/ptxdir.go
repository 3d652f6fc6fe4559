//go:build cuda && ptxdir

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A device-validation build (-tags cuda,ptxdir, never a release) loads the
// kernels' PTX from the directory TARFA_CUDA_PTX_DIR when it is set: PTX
// generated on the GPU machine (kernels/gen.sh there, with its nvcc) from
// the very sources this binary embeds, so that it can run there before it
// is committed. Each file must name the same sources with the same sha256
// as the embedded PTX (the header gen.sh writes), or the process stops:
// only a different compiler's output for the same code can come in this way.
func init() {
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
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			fmt.Fprintf(os.Stderr, "ptxdir: %v\n", err)
			os.Exit(2)
		}
		got, want := ptxSources(string(b)), ptxSources(*f.v)
		if got != want || want == "" {
			fmt.Fprintf(os.Stderr, "ptxdir: %s names sources\n%s\nwant those of the embedded PTX\n%s\n", f.name, got, want)
			os.Exit(2)
		}
		*f.v = string(b)
		fmt.Fprintf(os.Stderr, "ptxdir: %s from %s (%s)\n", f.name, dir, ptxCompiler(string(b)))
	}
}

// ptxSources is the "// source NAME sha256 HEX" lines of gen.sh's header.
func ptxSources(ptx string) string {
	var s []string
	for _, l := range strings.SplitN(ptx, "\n", 32) {
		if strings.HasPrefix(l, "// source ") {
			s = append(s, l)
		}
	}
	return strings.Join(s, "\n")
}

// ptxCompiler is the nvcc release gen.sh's first line names.
func ptxCompiler(ptx string) string {
	l, _, _ := strings.Cut(ptx, "\n")
	if _, v, ok := strings.Cut(l, " with nvcc "); ok {
		return "nvcc " + strings.TrimSuffix(v, ": do not edit.")
	}
	return "compiler not named"
}
