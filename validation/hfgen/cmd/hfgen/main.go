// Command hfgen writes the synthetic checkpoints of package hfgen:
//
//	go run ./validation/hfgen/cmd/hfgen -out validation/testdata/synthref
//
// then, on a machine with torch + transformers:
//
//	python3 validation/hfgen/reference.py validation/testdata/synthref OUT
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tarfa-ai/tarfa/validation/hfgen"
)

func main() {
	out := flag.String("out", "validation/testdata/synthref", "output directory")
	flag.Parse()
	if err := hfgen.WriteAll(*out); err != nil {
		fmt.Fprintln(os.Stderr, "hfgen:", err)
		os.Exit(1)
	}
}
