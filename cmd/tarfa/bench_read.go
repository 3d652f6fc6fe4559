package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/validation/decodebench"
)

func init() { benchSubcommands = append(benchSubcommands, newBenchReadCommand) }

func newBenchReadCommand() *cobra.Command {
	var (
		jobs           []int
		buffered       bool
		noDrop, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "read DIR [--jobs 1,4,16,32]",
		Short: "The storage bound: every routed expert record of a JNF model read once with O_DIRECT, N reads in flight",
		Long: `Bench read reads every routed expert record of the JNF model in DIR once
for each --jobs count (reads in flight, each its own goroutine with a
page-aligned buffer), in file order, with O_DIRECT (--buffered: through the page
cache), and nothing else: no hashing, no copy. Before each read the page
cache is dropped (sync, then 3 into /proc/sys/vm/drop_caches: root), unless
--no-drop; a drop that fails is said, and the figures are then warm. It prints
seconds and GB/s (10^9 bytes) for each count and the fastest, the storage bound
a streaming run is compared with.

` + exitStatuses,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if len(jobs) == 0 {
				return fmt.Errorf("--jobs: give at least one count")
			}
			for _, j := range jobs {
				if err := checkRange("jobs", j, 1, maxReaders); err != nil {
					return err
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := decodebench.ReadBound(cmd.Context(), args[0], jobs, !buffered, noDrop)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			w := cmd.OutOrStdout()
			printHost(w, res.Host, res.LoadBefore, res.LoadAfter)
			fmt.Fprintf(w, "%d routed expert records, %s per read of all\n", res.Experts, reports.Bytes(res.Bytes))
			if !res.CacheDropped {
				fmt.Fprintf(w, "page cache NOT dropped (%s)\n", res.CacheNote)
			}
			var rows [][]string
			for _, f := range res.Figures {
				rows = append(rows, []string{fmt.Sprint(f.Jobs), fmt.Sprint(f.Direct), fmt.Sprintf("%.3f", f.Seconds), fmt.Sprintf("%.3g", f.GBps)})
			}
			if err := reports.Table(w, []string{"reads in flight", "O_DIRECT", "seconds", "GB/s"}, rows); err != nil {
				return err
			}
			fmt.Fprintf(w, "storage bound: %.3g GB/s (%d in flight)\n", res.Best.GBps, res.Best.Jobs)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&jobs, "jobs", []int{1, 4, 16, 32}, fmt.Sprintf("reads in flight to measure, 1 to %d each", maxReaders))
	f.BoolVar(&buffered, "buffered", false, "read through the page cache (no O_DIRECT)")
	f.BoolVar(&noDrop, "no-drop", false, "do not drop the page cache before each read")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
