package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/verify"
)

func newInspectCommand() *cobra.Command {
	var asJSON, followSymlinks bool
	cmd := &cobra.Command{
		Use:   "inspect DIR",
		Short: "Describe a Hugging Face checkpoint or a JNF model: architecture, precision, experts, bytes per token",
		Long: `Inspect validates a Hugging Face checkpoint (config.json, safetensors shards and
index) and prints the arithmetic to know before converting it: layer types, the
precision of the weights (unquantised, or block FP8 with its block size), expert count
and top-k, bytes per expert (for FP8: weights + scales), routed-expert bytes read per
decoded token, and totals by category. Ignored tensors (mtp.*, visual.*) are listed,
never dropped silently.

Given a JNF directory (tarfa convert's output) it prints the same arithmetic from its
manifest and config.json (checked against the manifest's digest), with the roots; it
does not re-hash the records (tarfa verify does).

Files are read as tarfa convert reads them: regular files only, symbolic links
only with --follow-symlinks (see tarfa convert --help). A JNF directory, or a
directory with a checkpoint below it, is named as such.

` + exitStatuses,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ck, err := hf.OpenWith(args[0], hf.Options{FollowSymlinks: followSymlinks})
			var nc *hf.NotCheckpointError
			if errors.As(err, &nc) && isJNFDir(args[0]) {
				return inspectJNF(cmd.OutOrStdout(), args[0], asJSON)
			}
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
				{"precision", s.Precision},
				{"experts", fmt.Sprintf("%d per MoE layer, top-%d, stored %s", s.Experts, s.TopK, s.Layout)},
				{"bytes per expert", expertBytes(s.ExpertBytes, s.ExpertScaleBytes)},
				{"routed expert bytes per decoded token", expertBytes(s.RoutedPerToken, s.ExpertScaleBytes*int64(s.TopK)*int64(s.SparseLayers))},
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

// expertBytes shows n bytes of routed experts, split into weights and
// scales when scales > 0 (block FP8).
func expertBytes(n, scales int64) string {
	s := fmt.Sprintf("%s (%d bytes)", reports.Bytes(n), n)
	if scales > 0 {
		s += fmt.Sprintf(": %d weights + %d scales", n-scales, scales)
	}
	return s
}

// isJNFDir reports whether dir holds a JNF manifest.
func isJNFDir(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, verify.ManifestFile))
	return err == nil
}

// JNFSummary is what inspect says of a JNF model.
type JNFSummary struct {
	Arch             string `json:"arch"`
	ModelType        string `json:"model_type"`
	Precision        string `json:"precision"`
	Layout           string `json:"expert_layout"`
	Layers           int    `json:"layers"`
	LayersPresent    int    `json:"layers_present"`
	Complete         bool   `json:"complete"`
	MoELayers        int    `json:"moe_layers"`
	Experts          int    `json:"experts"`
	TopK             int    `json:"experts_per_token"`
	ExpertBytes      int64  `json:"bytes_per_expert"`
	ExpertScaleBytes int64  `json:"scale_bytes_per_expert"`
	RoutedPerToken   int64  `json:"routed_expert_bytes_per_token"`
	Tensors          int    `json:"tensors"`
	FP8Tensors       int    `json:"fp8_tensors"`
	ExpertRecords    int    `json:"expert_records"`
	Bytes            int64  `json:"record_bytes"`
	Root             string `json:"root"`
	WeightsRoot      string `json:"weights_root"`
}

// inspectJNF describes a JNF directory from its manifest and config.json,
// whose bytes must have the manifest's digest before they are parsed.
func inspectJNF(out io.Writer, dir string, asJSON bool) error {
	m, _, err := verify.LoadManifest(dir)
	if err != nil {
		return err
	}
	cb, err := jnf.ReadModelFileLimit(filepath.Join(dir, "config.json"), jnf.MaxConfigSize, "config.json")
	if err != nil {
		return err
	}
	if got := jnf.SHA256Bytes(cb).Hex(); got != m.ConfigSHA256 {
		return fmt.Errorf("%s: config.json has SHA-256 %s, the manifest records %s: %w", dir, got, m.ConfigSHA256, jnf.ErrVerification)
	}
	cfg, err := hf.ParseConfig(cb)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	s := JNFSummary{Arch: m.Arch, ModelType: m.ModelType, Precision: cfg.Precision(), Layout: m.Layout, Layers: m.Layers,
		LayersPresent: len(m.LayersHeld), Complete: m.Complete, MoELayers: cfg.NumSparseLayers(), Experts: cfg.Experts, TopK: cfg.TopK,
		Root: m.Root, WeightsRoot: m.WeightsRoot}
	for _, e := range m.Entries {
		switch e.Kind {
		case jnf.KindTensor:
			s.Tensors++
			s.Bytes += e.Length
			if e.DType == jnf.F8E4 {
				s.FP8Tensors++
			}
		case jnf.KindExpert:
			s.ExpertRecords++
			s.Bytes += e.Length
			if s.ExpertBytes == 0 {
				s.ExpertBytes = e.Length
				for _, p := range e.Parts[min(3, len(e.Parts)):] {
					s.ExpertScaleBytes += p.Length
				}
			}
		}
	}
	s.RoutedPerToken = int64(s.TopK) * int64(s.MoELayers) * s.ExpertBytes
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	complete := "complete"
	if !s.Complete {
		complete = "incomplete"
	}
	rows := [][]string{
		{"architecture", fmt.Sprintf("%s (model_type %s)", s.Arch, s.ModelType)},
		{"layers", fmt.Sprintf("%d, %d converted (%s); %d MoE", s.Layers, s.LayersPresent, complete, s.MoELayers)},
		{"precision", s.Precision},
		{"experts", fmt.Sprintf("%d per MoE layer, top-%d, converted from %s", s.Experts, s.TopK, s.Layout)},
		{"bytes per expert", expertBytes(s.ExpertBytes, s.ExpertScaleBytes)},
		{"routed expert bytes per decoded token", expertBytes(s.RoutedPerToken, s.ExpertScaleBytes*int64(s.TopK)*int64(s.MoELayers))},
		{"records", fmt.Sprintf("%d tensors (%d F8_E4M3), %d experts, %s", s.Tensors, s.FP8Tensors, s.ExpertRecords, reports.Bytes(s.Bytes))},
		{"root", s.Root},
		{"weights root", s.WeightsRoot},
	}
	return reports.Table(out, []string{"model", dir}, rows)
}
