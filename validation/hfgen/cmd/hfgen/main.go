// Command hfgen writes the synthetic checkpoints of package hfgen:
//
//	go run ./validation/hfgen/cmd/hfgen -out validation/testdata/synthref -fp8-out validation/testdata/synthref-fp8
//
// then, on a machine with torch + transformers (a CUDA GPU with triton for
// the FP8 checkpoints' FineGrainedFP8 path):
//
//	python3 validation/hfgen/reference.py validation/testdata/synthref OUT
//	python3 validation/hfgen/reference.py validation/testdata/synthref-fp8 OUT
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tarfa-ai/tarfa/validation/hfgen"
)

func main() {
	out := flag.String("out", "validation/testdata/synthref", "output directory of the BF16 checkpoints")
	fp8 := flag.String("fp8-out", "validation/testdata/synthref-fp8", "output directory of the FP8 checkpoints")
	flag.Parse()
	if err := hfgen.WriteAll(*out); err != nil {
		fmt.Fprintln(os.Stderr, "hfgen:", err)
		os.Exit(1)
	}
	if err := hfgen.WriteFP8(*fp8); err != nil {
		fmt.Fprintln(os.Stderr, "hfgen:", err)
		os.Exit(1)
	}
}
