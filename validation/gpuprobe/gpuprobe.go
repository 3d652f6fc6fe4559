// Package gpuprobe checks that CUDA code can reproduce Tarfa's canonical
// arithmetic bit for bit, before and beside the CUDA backend: probe.cu runs
// the device functions of backend/cuda/kernels/canon.cuh on a GPU over every
// float32 input (exp, sigmoid, SiLU, softplus, rsqrt) and on BF16 matrix-vector
// products of real Qwen3.5-122B shapes, and prints aggregates; Compare
// recomputes them here with canon.
//
// An aggregate is the wrapping 64-bit sum over results i of
// mix64(i<<32 | bits(result i)), NaN results counted as 0x7fc00000 (NaN
// payloads are not canonical; NaN-ness is). Any single differing result
// changes it (barring a 2^-64 coincidence), and chunks of 2^24 inputs say
// where.
package gpuprobe

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"

	"github.com/tarfa-ai/tarfa/canon"
)

// Results is what probe.cu prints.
type Results struct {
	Device      string           `json:"device"`
	CUDARuntime int              `json:"cuda_runtime"`
	Sweep       map[string]Sweep `json:"sweep"`
	SweepMs     float64          `json:"sweep_ms"`
	Dots        []Dot            `json:"dots"`
}

// Sweep holds the aggregates of one function over the 256 chunks of 2^24
// consecutive float32 bit patterns, and the number of NaN results.
type Sweep struct {
	Chunks []string `json:"chunks"`
	NaN    uint64   `json:"nan"`
}

// Dot is one matrix-vector product: rows × k generated BF16 weights times a
// generated float32 vector.
type Dot struct {
	Rows  int      `json:"rows"`
	K     int      `json:"k"`
	WSeed uint64   `json:"w_seed"`
	XSeed uint64   `json:"x_seed"`
	Agg   string   `json:"agg"`
	Ms    float64  `json:"ms"`
	Y     []uint32 `json:"y,omitempty"`
}

// Read parses a results file.
func Read(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for name, s := range r.Sweep {
		if Functions()[name] == nil {
			return nil, fmt.Errorf("%s: unknown function %q", path, name)
		}
		if len(s.Chunks) != 256 {
			return nil, fmt.Errorf("%s: %s has %d chunks, want 256", path, name, len(s.Chunks))
		}
	}
	return &r, nil
}

// Functions returns the canonical float32 functions the probe sweeps, by
// the names probe.cu uses (a new map on each call).
func Functions() map[string]func(float32) float32 {
	return map[string]func(float32) float32{
		"exp":      canon.Exp,
		"sigmoid":  canon.Sigmoid,
		"silu":     canon.SiLU,
		"softplus": canon.Softplus,
		"rsqrt":    canon.Rsqrt,
	}
}

func mix64(z uint64) uint64 {
	z += 0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func leaf(i uint64, v float32) uint64 {
	b := math.Float32bits(v)
	if v != v {
		b = 0x7fc00000
	}
	return mix64(i<<32 | uint64(b))
}

// genBits is value number i of stream seed: ±0 one time in 64, otherwise a
// random sign and mantissa with an exponent in 2^-20 … 2^7.
func genBits(seed, i uint64) uint32 {
	u := mix64(seed*0x9E3779B97F4A7C15 + i)
	sign := uint32(u&1) << 31
	if (u>>40)&63 == 0 {
		return sign
	}
	e := 107 + uint32((u>>1)%28)
	mant := uint32(u>>8) & 0x7fffff
	return sign | e<<23 | mant
}

// SweepChunk is the aggregate of f over the float32 bit patterns
// c<<24 … c<<24 + 2^24 − 1, and the number of NaN results.
func SweepChunk(f func(float32) float32, c int) (agg, nans uint64) {
	workers := runtime.GOMAXPROCS(0)
	var mu sync.Mutex
	var wg sync.WaitGroup
	const n = 1 << 24
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s, z uint64
			for j := w * n / workers; j < (w+1)*n/workers; j++ {
				i := uint64(c)<<24 | uint64(j)
				v := f(math.Float32frombits(uint32(i)))
				s += leaf(i, v)
				if v != v {
					z++
				}
			}
			mu.Lock()
			agg += s
			nans += z
			mu.Unlock()
		}()
	}
	wg.Wait()
	return agg, nans
}

// MatVec computes the probe's product for d with canon's CPU kernels and
// returns every row and the aggregate.
func MatVec(d Dot) ([]float32, uint64) {
	x := make([]float32, d.K)
	for i := range x {
		x[i] = math.Float32frombits(genBits(d.XSeed, uint64(i)))
	}
	xT := make([]float32, d.K)
	canon.Interleave(xT, x)
	y := make([]float32, d.Rows)
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			row := make([]uint16, d.K)
			for r := w; r < d.Rows; r += workers {
				base := uint64(r) * uint64(d.K)
				for i := range row {
					row[i] = uint16(genBits(d.WSeed, base+uint64(i)) >> 16)
				}
				y[r] = canon.DotBF16X(row, x, xT)
			}
		}()
	}
	wg.Wait()
	var agg uint64
	for i, v := range y {
		agg += leaf(uint64(i), v)
	}
	return y, agg
}

// Mismatch is one aggregate that differs from the CPU's.
type Mismatch struct {
	What      string
	GPU, CPU  string
	FirstRows []string // for dots with rows: the first differing rows
}

func (m Mismatch) String() string {
	return fmt.Sprintf("%s: GPU %s, CPU %s %v", m.What, m.GPU, m.CPU, m.FirstRows)
}

// Options selects what Compare recomputes.
type Options struct {
	Chunks  []int // sweep chunks to recompute (nil: all 256)
	MaxRows int   // skip dot shapes with more rows (0: none)
	// Progress, if set, is called after each recomputed item.
	Progress func(what string)
	// Functions replaces Functions() (tests use it to show that a change is
	// caught).
	Functions map[string]func(float32) float32
}

// Report counts what was compared.
type Report struct {
	ChunksCompared int // (function, chunk) pairs
	InputsCompared uint64
	DotsCompared   int
	RowsCompared   int
	Mismatches     []Mismatch
}

// Compare recomputes the selected aggregates of r on the CPU.
func Compare(r *Results, opt Options) (*Report, error) {
	rep := &Report{}
	fns := opt.Functions
	if fns == nil {
		fns = Functions()
	}
	chunks := opt.Chunks
	if chunks == nil {
		for c := range 256 {
			chunks = append(chunks, c)
		}
	}
	for _, name := range []string{"exp", "sigmoid", "silu", "softplus", "rsqrt"} {
		s, ok := r.Sweep[name]
		if !ok {
			return nil, fmt.Errorf("results have no sweep of %s", name)
		}
		var nans uint64
		for _, c := range chunks {
			agg, z := SweepChunk(fns[name], c)
			nans += z
			if got := fmt.Sprintf("%016x", agg); got != s.Chunks[c] {
				rep.Mismatches = append(rep.Mismatches, Mismatch{What: fmt.Sprintf("%s chunk %#02x (inputs %#08x…)", name, c, c<<24), GPU: s.Chunks[c], CPU: got})
			}
			rep.ChunksCompared++
			rep.InputsCompared += 1 << 24
			if opt.Progress != nil {
				opt.Progress(fmt.Sprintf("%s chunk %d", name, c))
			}
		}
		if len(chunks) == 256 && nans != s.NaN {
			rep.Mismatches = append(rep.Mismatches, Mismatch{What: name + " NaN results", GPU: fmt.Sprint(s.NaN), CPU: fmt.Sprint(nans)})
		}
	}
	for _, d := range r.Dots {
		if opt.MaxRows > 0 && d.Rows > opt.MaxRows {
			continue
		}
		y, agg := MatVec(d)
		if got := fmt.Sprintf("%016x", agg); got != d.Agg {
			m := Mismatch{What: fmt.Sprintf("matvec %d×%d", d.Rows, d.K), GPU: d.Agg, CPU: got}
			for i, b := range d.Y {
				if b != math.Float32bits(y[i]) && len(m.FirstRows) < 5 {
					m.FirstRows = append(m.FirstRows, fmt.Sprintf("row %d GPU %#08x CPU %#08x", i, b, math.Float32bits(y[i])))
				}
			}
			rep.Mismatches = append(rep.Mismatches, m)
		}
		rep.DotsCompared++
		rep.RowsCompared += d.Rows
		if opt.Progress != nil {
			opt.Progress(fmt.Sprintf("matvec %d×%d", d.Rows, d.K))
		}
	}
	return rep, nil
}

// SampleChunks are the chunks a quick comparison recomputes: ±0 and the
// subnormals, and the exponents around 1, 2…8, 32…128 of both signs, where
// the functions do their real work.
var SampleChunks = []int{0x00, 0x3f, 0x40, 0x42, 0x80, 0xbf, 0xc0, 0xc2}
