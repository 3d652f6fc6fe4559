package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/zeebo/blake3"

	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/weights"
)

func init() { benchSubcommands = append(benchSubcommands, newBenchHashCommand) }

// hashFigure is one measurement of bench hash: GB/s (10^9 bytes) over
// --repeat rounds.
type hashFigure struct {
	Mode    string  `json:"mode"`
	Jobs    int     `json:"jobs"`
	Min     float64 `json:"gbps_min"`
	Median  float64 `json:"gbps_median"`
	Max     float64 `json:"gbps_max"`
	PerCore float64 `json:"gbps_median_per_job"`
}

type hashResult struct {
	Bytes      int64        `json:"bytes"`
	Part       int64        `json:"part_bytes"`
	GOMAXPROCS int          `json:"gomaxprocs"`
	Repeat     int          `json:"repeat"`
	Figures    []hashFigure `json:"figures"`
}

// hashModes are bench hash's measurements, each of jobs goroutines.
var hashModes = []struct {
	name, what string
}{
	{"experts", "jobs experts at once, each hashed whole on one goroutine (github.com/zeebo/blake3: the hashers before)"},
	{"experts-tree", "jobs experts at once, each hashed whole on one goroutine (the tree's compressions, weights.Check in one part)"},
	{"parts", "one expert at a time, its parts hashed by jobs goroutines (weights.Check as the tier runs it)"},
}

func newBenchHashCommand() *cobra.Command {
	var (
		jobs   []int
		size   string
		part   string
		repeat int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "hash [--jobs 1,2,4,8,16]",
		Short: "BLAKE3 rates on expert-sized buffers: one core, N experts at once, one expert in parts on N cores",
		Long: `Bench hash measures how fast this machine verifies routed experts, on
buffers of --size bytes (default 18MiB, one expert of Qwen3.5-122B-A10B) in
memory: for each --jobs count N,
  experts       N experts hashed at once, each whole on its own goroutine
                (github.com/zeebo/blake3, as every hasher hashed one expert before)
  experts-tree  the same with the compressions weights.Check uses
  parts         one expert at a time in parts of --part bytes (default 1MiB)
                taken by N goroutines, as the tier's hashers take them
It prints the GB/s (10^9 bytes of experts hashed per second: minimum, median and
maximum of --repeat rounds) and the median per goroutine. The copy-and-hash bound
of a step is min(host-to-device rate, parts rate at the hashers' count).

` + exitStatuses,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if len(jobs) == 0 {
				return fmt.Errorf("--jobs: give at least one count")
			}
			for _, j := range jobs {
				if err := checkRange("jobs", j, 1, maxBenchWorkers); err != nil {
					return err
				}
			}
			return checkRange("repeat", repeat, 1, maxBenchRepeat)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := parseBytes(size)
			if err != nil || n < 1 || n > 1<<32 {
				return fmt.Errorf("--size %q: want 1 byte to 4GiB", size)
			}
			p, err := parseBytes(part)
			if err != nil || p < 1024 {
				return fmt.Errorf("--part %q: want at least 1KiB", part)
			}
			res := benchHash(n, p, jobs, repeat)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			return printHash(cmd.OutOrStdout(), res)
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&jobs, "jobs", []int{1, 2, 4, 8, 16}, fmt.Sprintf("goroutines to measure, 1 to %d each", maxBenchWorkers))
	f.StringVar(&size, "size", "18MiB", "bytes of one expert")
	f.StringVar(&part, "part", "1MiB", "bytes of one part (rounded down to a power of two of 1KiB chunks)")
	f.IntVar(&repeat, "repeat", 5, fmt.Sprintf("rounds of every measurement, 1 to %d", maxBenchRepeat))
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// benchHash runs every mode for every job count, repeat rounds each, the
// modes interleaved within a round. Each round of a mode hashes max(jobs,
// 4) experts' worth of bytes.
func benchHash(n, part int64, jobs []int, repeat int) hashResult {
	res := hashResult{Bytes: n, Part: part, GOMAXPROCS: runtime.GOMAXPROCS(0), Repeat: repeat}
	bufs := make([][]byte, slices.Max(jobs))
	for i := range bufs {
		bufs[i] = make([]byte, n)
		for j := range bufs[i] {
			bufs[i][j] = byte(j*7 + i)
		}
	}
	want := make([][32]byte, len(bufs))
	for i, b := range bufs {
		want[i] = blake3.Sum256(b)
	}
	rates := map[[2]int][]float64{}
	for range repeat {
		for _, j := range jobs {
			for m, mode := range hashModes {
				experts := max(j, 4)
				t0 := time.Now()
				switch mode.name {
				case "experts", "experts-tree":
					var wg sync.WaitGroup
					for g := range j {
						wg.Go(func() {
							for e := g; e < experts; e += j {
								b := bufs[e%len(bufs)]
								var got [32]byte
								if mode.name == "experts" {
									got = blake3.Sum256(b)
								} else {
									got = weights.SumInParts(b, 0, 1).Sum
								}
								if got != want[e%len(bufs)] {
									panic("bench hash: a digest differs from BLAKE3's")
								}
							}
						})
					}
					wg.Wait()
				case "parts":
					for e := range experts {
						if weights.SumInParts(bufs[e%len(bufs)], part, j).Sum != want[e%len(bufs)] {
							panic("bench hash: a digest differs from BLAKE3's")
						}
					}
				}
				k := [2]int{m, j}
				rates[k] = append(rates[k], float64(int64(experts)*n)/time.Since(t0).Seconds()/1e9)
			}
		}
	}
	for m, mode := range hashModes {
		for _, j := range jobs {
			r := rates[[2]int{m, j}]
			slices.Sort(r)
			med := r[len(r)/2]
			if len(r)%2 == 0 {
				med = (r[len(r)/2-1] + r[len(r)/2]) / 2
			}
			res.Figures = append(res.Figures, hashFigure{Mode: mode.name, Jobs: j, Min: r[0], Median: med, Max: r[len(r)-1], PerCore: med / float64(j)})
		}
	}
	return res
}

func printHash(w io.Writer, res hashResult) error {
	fmt.Fprintf(w, "BLAKE3 of %s buffers (parts of %s), GOMAXPROCS %d, %d rounds\n", reports.Bytes(res.Bytes), reports.Bytes(res.Part), res.GOMAXPROCS, res.Repeat)
	for _, m := range hashModes {
		fmt.Fprintf(w, "  %-12s %s\n", m.name, m.what)
	}
	var rows [][]string
	for _, f := range res.Figures {
		rows = append(rows, []string{f.Mode, fmt.Sprint(f.Jobs), fmt.Sprintf("%.3g", f.Min), fmt.Sprintf("%.3g", f.Median), fmt.Sprintf("%.3g", f.Max), fmt.Sprintf("%.3g", f.PerCore)})
	}
	return reports.Table(w, []string{"mode", "jobs", "GB/s min", "median", "max", "median per job"}, rows)
}
