// Command charts draws the charts of bench decode results (package
// reports/charts) next to the JSON files they come from: for RESULT.json,
// RESULT-breakdown.png, RESULT-hits.png, RESULT-budget.png and, for a
// device backend, RESULT-split.png.
//
//	go run ./reports/cmd/charts validation/decodebench/results/*.json
//	go run ./reports/cmd/charts -check validation/decodebench/results/*.json
//
// With -check it writes nothing and fails when a committed chart differs
// from what its JSON draws (the charts are byte-identical across runs).
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tarfa-ai/tarfa/reports/charts"
)

func main() {
	check := flag.Bool("check", false, "compare with the committed PNGs instead of writing them")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: charts [-check] RESULT.json...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		if err := run(path, *check); err != nil {
			fmt.Fprintln(os.Stderr, "charts:", err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

func run(path string, check bool) error {
	if !strings.HasSuffix(path, ".json") {
		return fmt.Errorf("%s: want a .json bench decode result", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	res, err := charts.Parse(path, f)
	f.Close()
	if err != nil {
		return err
	}
	base := strings.TrimSuffix(path, ".json")
	cs, err := charts.Draw(filepath.Base(base), res)
	if err != nil {
		return err
	}
	for _, c := range cs {
		out := base + "-" + c.Name + ".png"
		if check {
			old, err := os.ReadFile(out)
			if err != nil {
				return err
			}
			if !bytes.Equal(old, c.PNG) {
				return fmt.Errorf("%s is not what %s draws: run go run ./reports/cmd/charts %s", out, path, path)
			}
			continue
		}
		if err := os.WriteFile(out, c.PNG, 0o644); err != nil {
			return err
		}
		fmt.Println(out)
	}
	return nil
}
