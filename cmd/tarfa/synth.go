package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/validation/synth"
)

type synthOptions struct {
	o              synth.Options
	arch           string
	shard          int64
	noTok          bool
	out            string
	noWait, asJSON bool
	force          bool
	experts        int
	jnf            bool
	workers        int
}

// synthResult is synth's --json output.
type synthResult struct {
	Out     string  `json:"out"`
	Arch    string  `json:"arch"`
	Preset  string  `json:"preset"`
	Layout  string  `json:"layout"`
	Routing string  `json:"routing"`
	DType   string  `json:"dtype"` // bf16 or fp8
	Layers  int     `json:"layers"`
	Experts int     `json:"experts"`
	TopK    int     `json:"top_k"`
	Vocab   int     `json:"vocab"`
	Bytes   int64   `json:"bytes"` // tensor data
	Shards  int     `json:"shards"`
	Seconds float64 `json:"seconds"`
	// With --jnf: the JNF model written and its manifest root.
	Format string `json:"format"` // "hf" or "jnf"
	Root   string `json:"root,omitempty"`
}

func newSynthCommand() *cobra.Command {
	var s synthOptions
	cmd := &cobra.Command{
		Use:   "synth --arch qwen3_moe|qwen3_5_moe --preset tiny|real --out DIR",
		Short: "Write a deterministic synthetic Hugging Face checkpoint",
		Long: `Synth writes a complete Hugging Face-layout checkpoint (config.json, sharded
safetensors with model.safetensors.index.json, generation_config.json, and a small
real tokenizer in tokenizer.json format) with deterministic pseudo-random weights.

--preset tiny is a small model for tests; --preset real has the real per-layer
shapes of Qwen3.5-122B-A10B (qwen3_5_moe) or Qwen3-30B-A3B (qwen3_moe): use
--layers N to keep it to a few GB for I/O benchmarks (one real qwen3_5_moe layer
with its embedding and LM head is 7.5 GiB). --layout fused writes the official
Qwen3.5 release layout (text_config, model.language_model. prefix, fused 3D
experts, F32 A_log and norm, mtp.* and visual.* tensors to be ignored).
--dtype fp8 writes the same model in the layout of Qwen's official FP8 releases
(per-expert experts only): the attention, linear-attention (but in_proj_a/b),
shared-expert, dense-MLP and expert matrices as F8_E4M3 codes of the BF16 values,
each with a float32 weight_scale_inv per 128×128 block (scale 448/amax of the
block), and the quantization_config in config.json; every other tensor is the
BF16 checkpoint's.

Before writing, synth checks every option and that DIR's file system has room.
DIR must be new or empty; config.json is written last. Interrupted (Ctrl-C), synth
removes what it wrote; what a killed synth leaves (the files it recorded in
DIR/.tarfa.written before writing them, and their .tmp-* temporaries) is removed by
the next synth into DIR. Any other file in DIR (one named like a shard too) is
named and refused unless --force, which writes over the names synth writes and
leaves the rest. While it writes DIR it holds
DIR/.tarfa.lock: a second tarfa writing DIR waits for it (--no-wait: fails at once).

` + exitStatuses,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if s.out == "" {
				return fmt.Errorf("--out DIR is required")
			}
			f := cmd.Flags()
			if a := hf.Arch(s.arch); a != hf.Qwen3MoE && a != hf.Qwen35MoE {
				return fmt.Errorf("--arch %q: want %s or %s", s.arch, hf.Qwen3MoE, hf.Qwen35MoE)
			}
			if s.o.Preset != "tiny" && s.o.Preset != "real" {
				return fmt.Errorf("--preset %q: want tiny or real", s.o.Preset)
			}
			if s.o.Layout != hf.LayoutPerExpert && s.o.Layout != hf.LayoutFused {
				return fmt.Errorf("--layout %q: want %s or %s", s.o.Layout, hf.LayoutPerExpert, hf.LayoutFused)
			}
			if s.o.Routing != synth.RoutingUniform && s.o.Routing != synth.RoutingLocal {
				return fmt.Errorf("--routing %q: want %s or %s", s.o.Routing, synth.RoutingUniform, synth.RoutingLocal)
			}
			if s.o.DType != synth.DTypeBF16 && s.o.DType != synth.DTypeFP8 {
				return fmt.Errorf("--dtype %q: want %s or %s", s.o.DType, synth.DTypeBF16, synth.DTypeFP8)
			}
			if s.o.DType == synth.DTypeFP8 && s.o.Layout == hf.LayoutFused {
				return fmt.Errorf("--dtype %s with --layout %s: the FP8 releases store experts per expert; use --layout %s", synth.DTypeFP8, hf.LayoutFused, hf.LayoutPerExpert)
			}
			if f.Changed("experts") {
				if err := intFlag("experts", int64(s.experts), 1, hf.MaxExperts, "routed experts a layer; default: the preset's"); err != nil {
					return err
				}
				if s.o.Set == nil {
					s.o.Set = map[string]any{}
				}
				s.o.Set["num_experts"] = s.experts
			}
			if s.jnf && s.force {
				return fmt.Errorf("--jnf with --force: the conversion into DIR replaces only what a conversion wrote")
			}
			if err := intFlag("workers", int64(s.workers), 1, convert.MaxWorkers, "files converted in parallel, with --jnf"); err != nil {
				return err
			}
			if f.Changed("layers") {
				o := s.o
				o.Arch = hf.Arch(s.arch)
				// most is 0 when the options fail at one layer for another
				// reason (--experts below the preset's top-k): synth.Config's
				// own error then names it, before anything is written.
				if most, experts := maxSynthLayers(o); most == 0 {
					o.Layers = 1
					if _, _, err := synth.Config(o); err != nil {
						return fmt.Errorf("synth config: %w", err)
					}
				} else if most < hf.MaxLayers && s.o.Layers > most {
					return fmt.Errorf("--layers %d: want 1 to %d for the %s preset of %s (%d routed experts a layer; Tarfa accepts at most %d routed experts in all)",
						s.o.Layers, most, o.Preset, o.Arch, experts, hf.MaxRoutedExperts)
				}
				if err := intFlag("layers", int64(s.o.Layers), 1, hf.MaxLayers, "default: the preset's"); err != nil {
					return err
				}
			}
			if f.Changed("vocab") {
				if err := intFlag("vocab", int64(s.o.Vocab), 1, hf.MaxVocab, "default: the preset's"); err != nil {
					return err
				}
			}
			if f.Changed("shard-bytes") {
				if err := intFlag("shard-bytes", s.shard, 1, 1<<40, "shard size limit in bytes; default: the preset's"); err != nil {
					return err
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			o := s.o
			o.Arch, o.ShardBytes = hf.Arch(s.arch), s.shard
			if !s.noTok {
				if o, err = synth.WithTokenizer(o); err != nil {
					return err
				}
			}
			size, shards, err := synth.Size(o)
			if err != nil {
				return err
			}
			if s.jnf {
				return synthJNF(cmd, s, o, size, shards)
			}
			undo, err := makeOutDir("--out", s.out)
			if err != nil {
				return err
			}
			lock, err := lockDir(cmd, s.out, s.noWait)
			if err != nil {
				undo()
				return err
			}
			defer func() {
				lock.Unlock()
				if err != nil {
					undo()
				}
			}()
			if err := checkFree("--out", s.out, size+16<<20, "; write fewer layers (--layers N)"); err != nil {
				return err
			}
			start := time.Now()
			update, finish := byteProgress(cmd.ErrOrStderr(), "writing")
			err = synth.WriteContext(cmd.Context(), s.out, o, synth.WriteOptions{Progress: update, Force: s.force})
			finish()
			if err != nil {
				return interrupted(err, fmt.Sprintf("what was written to %s is removed; run the same command again", s.out))
			}
			_, cfg, _ := synth.Config(o)
			res := synthResult{Out: s.out, Arch: string(cfg.Arch), Preset: o.Preset, Layout: o.Layout, Routing: o.Routing, DType: o.DType, Layers: cfg.Layers,
				Experts: cfg.Experts, TopK: cfg.TopK, Vocab: cfg.Vocab, Bytes: size, Shards: shards, Seconds: time.Since(start).Seconds(), Format: "hf"}
			if s.asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %s %s%s, %d layers, %d experts top-%d, vocab %d, layout %s, %s routing; %s in %d shards (%s)\n",
				s.out, res.Arch, res.Preset, fp8Note(o.DType), res.Layers, res.Experts, res.TopK, res.Vocab, res.Layout, res.Routing, reports.Bytes(size), shards, reports.Rate(size, res.Seconds))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&s.arch, "arch", string(hf.Qwen35MoE), "qwen3_moe or qwen3_5_moe")
	f.StringVar(&s.o.Preset, "preset", "tiny", "tiny, or real (the real per-layer shapes)")
	f.Uint64Var(&s.o.Seed, "seed", 1, "weight seed")
	f.StringVar(&s.o.Layout, "layout", hf.LayoutPerExpert, "expert layout: per-expert or fused")
	f.StringVar(&s.o.DType, "dtype", synth.DTypeBF16, "bf16, or fp8: the same model with its attention, linear-attention, shared-expert and expert matrices in block FP8 (F8_E4M3 and a float32 weight_scale_inv per 128×128 block, quantization_config in config.json), the layout of Qwen's official FP8 releases")
	f.StringVar(&s.o.Routing, "routing", synth.RoutingUniform, "uniform (random routers), or local: weights that give routing the locality of real models (a stable half of each layer's experts for every token; the next layer's router on this layer's input predicts the rest)")
	real35, _ := maxSynthLayers(synth.Options{Arch: hf.Qwen35MoE, Preset: "real", Layout: hf.LayoutPerExpert})
	real3, _ := maxSynthLayers(synth.Options{Arch: hf.Qwen3MoE, Preset: "real", Layout: hf.LayoutPerExpert})
	f.IntVar(&s.o.Layers, "layers", 0, fmt.Sprintf("number of layers, 1 to %d; with --preset real 1 to %d (%d with --arch qwen3_moe), Tarfa's limit of %d routed experts (default: the preset's)",
		hf.MaxLayers, real35, real3, hf.MaxRoutedExperts))
	f.IntVar(&s.o.Vocab, "vocab", 0, "vocabulary size (default: the preset's)")
	f.Int64Var(&s.shard, "shard-bytes", 0, "shard size limit in bytes (default: the preset's)")
	f.BoolVar(&s.noTok, "no-tokenizer", false, "do not write tokenizer files")
	f.StringVar(&s.out, "out", "", "output directory (new or empty)")
	f.BoolVar(&s.noWait, "no-wait", false, noWaitHelp)
	f.BoolVar(&s.force, "force", false, "write into a DIR holding files synth did not write (those at the names synth writes are replaced)")
	f.BoolVar(&s.asJSON, "json", false, "print the result as JSON")
	f.IntVar(&s.experts, "experts", 0, "routed experts a layer (default: the preset's; top-k stays the preset's), e.g. --preset real --layers 48 --experts 32 for a full-depth model that fits a small disk")
	f.BoolVar(&s.jnf, "jnf", false, "write a JNF model (tarfa convert's output) instead, without writing the checkpoint: the shards' bytes are made as the conversion reads them, the same files and root as synth then convert; an interrupted run resumes like convert")
	f.IntVar(&s.workers, "workers", runtime.NumCPU(), "with --jnf: files converted in parallel")
	return cmd
}

// synthJNF writes the checkpoint's small files into a temporary directory
// beside DIR and converts it into DIR from the shards' bytes made on
// demand (synth.Shards), never written: the result is what tarfa convert
// makes of the written checkpoint (TestShardsConvert), at the disk space of
// one copy.
func synthJNF(cmd *cobra.Command, s synthOptions, o synth.Options, size int64, shards int) (err error) {
	if _, err := makeOutDir("--out", s.out); err != nil {
		return err
	}
	meta, err := os.MkdirTemp(filepath.Dir(filepath.Clean(s.out)), ".tarfa-synth-meta-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(meta)
	if err := synth.WriteContext(cmd.Context(), meta, o, synth.WriteOptions{NoShards: true}); err != nil {
		return err
	}
	open, err := synth.Shards(o)
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	start := time.Now()
	update, finish := byteProgress(stderr, "synth --jnf (made, hashed, written)")
	res, err := convert.Convert(cmd.Context(), meta, s.out, convert.Options{LastLayer: -1, Workers: s.workers, Shards: open,
		NoWait: s.noWait, Progress: update, Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Waiting: func(pid int) {
			fmt.Fprintf(stderr, "%s is writing %s, waiting… (Ctrl-C stops; --no-wait fails at once)\n", holder(pid), s.out)
		}})
	finish()
	if err != nil {
		return interrupted(err, fmt.Sprintf("the files finished in %s are kept; run the same command again to resume", s.out))
	}
	_, cfg, _ := synth.Config(o)
	r := synthResult{Out: s.out, Arch: string(cfg.Arch), Preset: o.Preset, Layout: o.Layout, DType: o.DType, Layers: cfg.Layers,
		Experts: cfg.Experts, TopK: cfg.TopK, Vocab: cfg.Vocab, Bytes: size, Shards: shards, Seconds: time.Since(start).Seconds(),
		Format: "jnf", Root: res.Manifest.Root}
	if s.asJSON {
		return writeJSON(cmd.OutOrStdout(), r)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: JNF of %s %s%s, %d layers, %d experts top-%d, vocab %d; %s (%s), root %s\n",
		s.out, r.Arch, r.Preset, fp8Note(o.DType), r.Layers, r.Experts, r.TopK, r.Vocab, reports.Bytes(size), reports.Rate(size, r.Seconds), r.Root)
	return nil
}

// fp8Note is what the summary line says of the dtype ("" for BF16).
func fp8Note(dtype string) string {
	if dtype == synth.DTypeFP8 {
		return " (block FP8)"
	}
	return ""
}

// maxSynthLayers is the most layers the preset of o can have (at most
// hf.MaxLayers: the configuration's other limits, the routed experts of
// the whole model above all, may allow fewer) and its experts a layer.
func maxSynthLayers(o synth.Options) (most, experts int) {
	ok := func(n int) bool {
		o.Layers = n
		_, cfg, err := synth.Config(o)
		if err == nil {
			experts = cfg.Experts
		}
		return err == nil
	}
	lo, hi := 1, hf.MaxLayers // ok(lo); the answer is in [lo, hi]
	if !ok(lo) {
		return 0, 0
	}
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	ok(lo)
	return lo, experts
}
