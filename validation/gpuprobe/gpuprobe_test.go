package gpuprobe

import (
	"math"
	"strings"
	"testing"
)

// TestH200Results re-checks, on any CPU, the results probe.cu produced on an
// NVIDIA H200 (testdata/h200.json, see run.sh): the sample chunks of every
// function and every matrix-vector product, including the 248320×3072 LM
// head, must be bit-identical to canon. (All 2^32 inputs were
// compared once with cmd/gpuprobe -all; EXACTNESS.md records it.)
func TestH200Results(t *testing.T) {
	r, err := Read("testdata/h200.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Device, "H200") || len(r.Dots) != 8 {
		t.Fatalf("results from %q with %d products", r.Device, len(r.Dots))
	}
	rep, err := Compare(r, Options{Chunks: SampleChunks})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rep.Mismatches {
		t.Error(m)
	}
	if rep.ChunksCompared != 5*len(SampleChunks) || rep.DotsCompared != 8 || rep.RowsCompared != 252821 {
		t.Errorf("compared %d chunks, %d products, %d rows", rep.ChunksCompared, rep.DotsCompared, rep.RowsCompared)
	}
}

// TestCompareDetectsDifferences: the aggregates see a function that is off
// by one ulp on some inputs, and a product whose weights differ in one bit.
func TestCompareDetectsDifferences(t *testing.T) {
	r, err := Read("testdata/h200.json")
	if err != nil {
		t.Fatal(err)
	}
	fns := Functions()
	exp := fns["exp"]
	fns["exp"] = func(x float32) float32 {
		v := exp(x)
		if x > 1.5 && x < 1.5001 {
			v = math.Nextafter32(v, 0)
		}
		return v
	}
	r.Dots = r.Dots[:3]
	r.Dots[2].WSeed++ // other weights: other rows
	rep, err := Compare(r, Options{Chunks: []int{0x3f}, Functions: fns})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range rep.Mismatches {
		got = append(got, m.What)
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "exp chunk 0x3f") || got[1] != "matvec 64×270" || len(rep.Mismatches[1].FirstRows) == 0 {
		t.Errorf("mismatches %q (%v)", got, rep.Mismatches)
	}
}
