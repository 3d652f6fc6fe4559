// Command gpuprobe compares the results of probe.cu (run on a GPU) with the
// canonical CPU arithmetic: gpuprobe [-all] RESULTS.json. Without -all it
// recomputes 8 of the 256 sweep chunks per function and the products with at
// most 4096 rows; with -all every float32 input and every product.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tarfa-ai/tarfa/validation/gpuprobe"
)

func main() {
	all := flag.Bool("all", false, "recompute every chunk and every product")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: gpuprobe [-all] RESULTS.json")
		os.Exit(2)
	}
	r, err := gpuprobe.Read(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuprobe:", err)
		os.Exit(1)
	}
	opt := gpuprobe.Options{Chunks: gpuprobe.SampleChunks, MaxRows: 4096}
	if *all {
		opt = gpuprobe.Options{}
	}
	start := time.Now()
	opt.Progress = func(what string) { fmt.Fprintf(os.Stderr, "\r%-40s %6.0fs", what, time.Since(start).Seconds()) }
	rep, err := gpuprobe.Compare(r, opt)
	fmt.Fprintln(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuprobe:", err)
		os.Exit(1)
	}
	fmt.Printf("%s (CUDA runtime %d): %d function chunks (%d inputs) and %d products (%d rows) compared in %.0fs\n",
		r.Device, r.CUDARuntime, rep.ChunksCompared, rep.InputsCompared, rep.DotsCompared, rep.RowsCompared, time.Since(start).Seconds())
	for _, m := range rep.Mismatches {
		fmt.Println("MISMATCH", m)
	}
	if len(rep.Mismatches) > 0 {
		os.Exit(3)
	}
	fmt.Println("bit-identical: every compared result")
}
