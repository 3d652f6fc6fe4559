package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/validation/benchrun"
	"github.com/tarfa-ai/tarfa/validation/iobench"
)

func init() { register(newBenchCommand) }

func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks whose results go into BENCHMARKS.md",
		Long: `Bench runs the benchmarks whose results BENCHMARKS.md reports. Each one
repeats every measurement --repeat times, interleaved with its baseline (A B A B …),
prints the minimum, median and maximum, and takes ratios from the medians of the
same run: on a shared machine read the ratios, not the absolute figures.`,
	}
	cmd.AddCommand(newBenchIOCommand())
	for _, f := range benchSubcommands {
		cmd.AddCommand(f())
	}
	return cmd
}

// benchSubcommands are added by other files.
var benchSubcommands []func() *cobra.Command

// Flag ranges of the bench commands.
const (
	maxBenchRepeat  = 1000
	maxBenchWorkers = 256
)

// checkRange refuses a flag value outside [lo, hi], naming the flag.
func checkRange[T int | int64](flag string, v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("--%s %v: want %v to %v", flag, v, lo, hi)
	}
	return nil
}

type benchIOOptions struct {
	scratch string
	workers int
	repeat  int
	warm    bool
	asJSON  bool
}

func newBenchIOCommand() *cobra.Command {
	var o benchIOOptions
	cmd := &cobra.Command{
		Use:   "io CHECKPOINT",
		Short: "Convert and verify throughput against a raw copy and a raw read of the same bytes",
		Long: `Bench io measures, on one Hugging Face checkpoint, --repeat rounds of
  raw copy of every shard into files (fsync, --workers in parallel)
  tarfa convert, tarfa convert --verify       (compared with the raw copy)
  raw read of the converted files, tarfa verify (compared with the raw read)
in that order in every round, and prints each one's seconds and GB/s (minimum,
median, maximum) and the ratio of its median to its baseline's.

Disk is compared with disk: before every run the page cache is dropped (sync, then
3 into /proc/sys/vm/drop_caches, which needs root; this drops the cache of the whole
machine), and the raw read uses O_DIRECT where the file system allows it. When the
cache cannot be dropped, every figure is measured warm (inputs read once, untimed,
before every run: memory compared with memory) and the output says why. --warm
adds the warm read pair to a cold run. The "cache" column says which applies.

Scratch files go into a new directory created inside --scratch (default: the
system's temporary directory) and removed at the end, also on an error or an
interrupt; nothing else there is touched. It needs room for two copies of the
checkpoint. Make a checkpoint with real Qwen3.5-122B-A10B layer shapes with
  tarfa synth --arch qwen3_5_moe --preset real --layers 2 --out DIR`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if err := checkRange("workers", o.workers, 1, maxBenchWorkers); err != nil {
				return err
			}
			if err := checkRange("repeat", o.repeat, 1, maxBenchRepeat); err != nil {
				return err
			}
			if o.scratch != "" {
				fi, err := os.Stat(o.scratch)
				if err != nil {
					return fmt.Errorf("--scratch: %w", err)
				}
				if !fi.IsDir() {
					return fmt.Errorf("--scratch %s: not a directory", o.scratch)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			update, finish := byteProgress(cmd.ErrOrStderr(), "bench io")
			res, err := iobench.Run(cmd.Context(), args[0], o.scratch, iobench.Options{
				Workers: o.workers, Repeat: o.repeat, Warm: o.warm, Progress: update})
			finish()
			if err != nil {
				return err
			}
			if o.asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			return printBenchIO(cmd.OutOrStdout(), res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.scratch, "scratch", "", "directory in which to create the scratch directory (default: the system's temporary directory)")
	f.IntVar(&o.workers, "workers", 2, fmt.Sprintf("files converted, copied and read in parallel (1 to %d)", maxBenchWorkers))
	f.IntVar(&o.repeat, "repeat", 5, fmt.Sprintf("rounds: times each figure is measured (1 to %d)", maxBenchRepeat))
	f.BoolVar(&o.warm, "warm", false, "also measure the read and verify with the files in the page cache")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	return cmd
}

func printBenchIO(w io.Writer, res *iobench.Result) error {
	printHost(w, res.Host, res.LoadBefore, res.LoadAfter)
	fmt.Fprintf(w, "method: %d rounds of %s\n", res.Repeat, strings.Join(res.Order, " → "))
	if !res.CacheDropped {
		fmt.Fprintf(w, "page cache NOT dropped (%s): every figure is warm\n", res.CacheError)
	}
	var rows [][]string
	for _, f := range res.Figures {
		ratio, pairs := "baseline", ""
		if f.Baseline != "" {
			ratio = fmt.Sprintf("%.2f", f.Ratio)
			pairs = fmt.Sprintf("%.2f–%.2f", f.PairRatio.Min, f.PairRatio.Max)
		}
		rows = append(rows, []string{f.Name, f.Cache, reports.Bytes(f.Bytes), spread(f.Seconds, "%.3g"), spread(f.GBps, "%.3g"), ratio, pairs})
	}
	if err := reports.Table(w, []string{"figure", "cache", "bytes", "seconds min / median / max", "GB/s min / median / max", "× baseline (medians)", "× per round"}, rows); err != nil {
		return err
	}
	for _, f := range res.Figures {
		if f.Baseline != "" {
			fmt.Fprintf(w, "baseline of %s: %s\n", f.Name, f.Baseline)
		}
		if f.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", f.Name, f.Note)
		}
	}
	return nil
}

func spread(s benchrun.Summary, format string) string {
	return fmt.Sprintf(format+" / "+format+" / "+format, s.Min, s.Median, s.Max)
}

func printHost(w io.Writer, h benchrun.Host, loadBefore, loadAfter float64) {
	fmt.Fprintf(w, "machine: %s, %d CPUs (GOMAXPROCS %d), %s RAM, %s %s/%s; load average %.2f before, %.2f after\n",
		orDefault(h.CPU, "unknown CPU"), h.CPUs, h.GOMAXPROCS, reports.Bytes(h.MemBytes), h.GoVersion, h.GOOS, h.GOARCH, loadBefore, loadAfter)
}

// orDefault is s, or d when s is empty.
func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
