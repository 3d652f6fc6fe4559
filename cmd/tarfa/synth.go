package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/validation/synth"
)

func init() { register(newSynthCommand) }

func newSynthCommand() *cobra.Command {
	var (
		o      synth.Options
		arch   string
		shard  int64
		noTok  bool
		outDir string
	)
	cmd := &cobra.Command{
		Use:   "synth --arch qwen3_moe|qwen3_5_moe --preset tiny|real --out DIR",
		Short: "Write a deterministic synthetic Hugging Face checkpoint",
		Long: `Synth writes a complete Hugging Face-layout checkpoint (config.json, sharded
safetensors with model.safetensors.index.json, generation_config.json, and a small
real tokenizer in tokenizer.json format) with deterministic pseudo-random weights.

--preset tiny is a small model for tests; --preset real has the real per-layer
shapes of Qwen3.5-122B-A10B (qwen3_5_moe) or Qwen3-30B-A3B (qwen3_moe): use
--layers N to keep it to a few GB for I/O benchmarks. --layout fused writes the
official Qwen3.5 release layout (text_config, model.language_model. prefix, fused
3D experts, F32 A_log and norm, mtp.* and visual.* tensors to be ignored).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if outDir == "" {
				return fmt.Errorf("--out DIR is required")
			}
			o.Arch, o.ShardBytes = hf.Arch(arch), shard
			var err error
			if !noTok {
				if o, err = synth.WithTokenizer(o); err != nil {
					return err
				}
			}
			if err := synth.Write(outDir, o); err != nil {
				return err
			}
			_, cfg, _ := synth.Config(o)
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s %s, %d layers, %d experts top-%d, vocab %d, layout %s\n",
				outDir, cfg.Arch, o.Preset, cfg.Layers, cfg.Experts, cfg.TopK, cfg.Vocab, orDefault(o.Layout, hf.LayoutPerExpert))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&arch, "arch", string(hf.Qwen35MoE), "qwen3_moe or qwen3_5_moe")
	f.StringVar(&o.Preset, "preset", "tiny", "tiny, or real (the real per-layer shapes)")
	f.Uint64Var(&o.Seed, "seed", 1, "weight seed")
	f.StringVar(&o.Layout, "layout", hf.LayoutPerExpert, "expert layout: per-expert or fused")
	f.IntVar(&o.Layers, "layers", 0, "number of layers (default: the preset's)")
	f.IntVar(&o.Vocab, "vocab", 0, "vocabulary size (default: the preset's)")
	f.Int64Var(&shard, "shard-bytes", 0, "shard size limit in bytes (default: the preset's)")
	f.BoolVar(&noTok, "no-tokenizer", false, "do not write tokenizer files")
	f.StringVar(&outDir, "out", "", "output directory")
	return cmd
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
