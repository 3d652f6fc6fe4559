package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/reports"
)

func newInspectCommand() *cobra.Command {
	var asJSON, followSymlinks bool
	cmd := &cobra.Command{
		Use:   "inspect DIR",
		Short: "Describe a Hugging Face checkpoint: architecture, experts, bytes per token",
		Long: `Inspect validates a Hugging Face checkpoint (config.json, safetensors shards and
index) and prints the arithmetic to know before converting it: layer types, expert
count and top-k, bytes per expert, routed-expert bytes read per decoded token, and
totals by category. Ignored tensors (mtp.*, visual.*) are listed, never dropped silently.

Files are read as tarfa convert reads them: regular files only, symbolic links
only with --follow-symlinks (see tarfa convert --help). A JNF directory, or a
directory with a checkpoint below it, is named as such.

` + exitStatuses,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ck, err := hf.OpenWith(args[0], hf.Options{FollowSymlinks: followSymlinks})
			if err != nil {
				return err
			}
			defer ck.Close()
			s := ck.Summarize()
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			b := func(n int64) string { return fmt.Sprintf("%s (%d bytes)", reports.Bytes(n), n) }
			rows := [][]string{
				{"architecture", fmt.Sprintf("%s (model_type %s)", s.Arch, s.ModelType)},
				{"layers", fmt.Sprintf("%d: %d full attention, %d linear attention; %d MoE", s.Layers, s.FullAttention, s.LinearAttention, s.SparseLayers)},
				{"experts", fmt.Sprintf("%d per MoE layer, top-%d, stored %s", s.Experts, s.TopK, s.Layout)},
				{"bytes per expert", b(s.ExpertBytes)},
				{"routed expert bytes per decoded token", b(s.RoutedPerToken)},
				{"active bytes per decoded token", b(s.ActivePerToken)},
				{"all routed experts", b(s.RoutedTotal)},
				{"total to convert", b(s.Total)},
				{"shards", fmt.Sprintf("%d files, %s", s.Shards, reports.Bytes(s.ShardBytes))},
			}
			if s.IgnoredTensors > 0 {
				rows = append(rows, []string{"ignored", fmt.Sprintf("%d tensors, %s", s.IgnoredTensors, reports.Bytes(s.Ignored))})
				for _, p := range s.IgnoredPrefixes {
					rows = append(rows, []string{"", p})
				}
			}
			if err := reports.Table(out, []string{"checkpoint", args[0]}, rows); err != nil {
				return err
			}
			var cats [][]string
			for _, c := range s.Categories {
				cats = append(cats, []string{c.Name, strconv.Itoa(c.Tensors), reports.Bytes(c.Bytes), fmt.Sprintf("%.2f%%", 100*float64(c.Bytes)/float64(s.Total))})
			}
			return reports.Table(out, []string{"category", "tensors", "bytes", "share"}, cats)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the summary as JSON")
	cmd.Flags().BoolVar(&followSymlinks, "follow-symlinks", false, followSymlinksHelp)
	return cmd
}
