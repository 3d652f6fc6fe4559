package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/validation/iobench"
)

func init() { register(newBenchCommand) }

func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks whose results go into BENCHMARKS.md",
	}
	cmd.AddCommand(newBenchIOCommand())
	for _, f := range benchSubcommands {
		cmd.AddCommand(f())
	}
	return cmd
}

// benchSubcommands are added by other files.
var benchSubcommands []func() *cobra.Command

func newBenchIOCommand() *cobra.Command {
	var scratch string
	var workers int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "io CHECKPOINT",
		Short: "Convert and verify throughput against raw read and copy of the same bytes",
		Long: `Bench io runs, on one checkpoint and in one process: a raw read of every shard,
a raw copy of every shard (with fsync), tarfa convert, tarfa convert --verify and
tarfa verify, and prints each phase's throughput and its ratio to the raw copy.
Make a multi-GB checkpoint with real 122B layer shapes with
  tarfa synth --arch qwen3_5_moe --preset real --layers 1 --out DIR`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if scratch == "" {
				d, err := os.MkdirTemp("", "tarfa-bench-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(d)
				scratch = d
			}
			res, err := iobench.Run(cmd.Context(), args[0], scratch, workers)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			var rows [][]string
			for _, p := range res.Phases {
				rows = append(rows, []string{p.Name, reports.Bytes(p.Bytes), fmt.Sprintf("%.2f", p.Seconds), fmt.Sprintf("%.3f", p.GBps()), fmt.Sprintf("%.2f", p.Ratio)})
			}
			return reports.Table(cmd.OutOrStdout(), []string{"phase", "bytes", "seconds", "GB/s", "× raw copy"}, rows)
		},
	}
	cmd.Flags().StringVar(&scratch, "scratch", "", "scratch directory (default: a temporary directory)")
	cmd.Flags().IntVar(&workers, "workers", 2, "convert workers")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
