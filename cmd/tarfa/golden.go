package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/reports"
)

func init() {
	register(newGoldenCommand)
	register(newReplayCommand)
}

func newGoldenCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "golden", Short: "Record golden logits with the CPU reference"}
	var (
		model, prompts, out string
		threads             int
	)
	rec := &cobra.Command{
		Use:   "record --model DIR --prompts FILE --out G",
		Short: "Run the CPU reference and store tokens and full logits of every step",
		Long: `Record runs every prompt of a JSONL prompt file ({"prompt": text},
{"messages": [...]} or {"tokens": [...]}, with optional max_tokens, seed,
temperature, top_p, top_k, stop) on the CPU reference and writes G/golden.json and
G/logits.safetensors: the prompt tokens, the generated tokens, the full fp32 logits
of every step, a SHA-256 hash chain over the raw logits step by step, and the
manifest root of the model.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if prompts == "" || out == "" {
				return fmt.Errorf("--prompts FILE and --out G are required")
			}
			f, err := os.Open(prompts)
			if err != nil {
				return err
			}
			ps, err := golden.ParsePrompts(f, prompts)
			f.Close()
			if err != nil {
				return err
			}
			r, err := openRunner(cmd, model, threads, 1<<30)
			if err != nil {
				return err
			}
			defer r.Close()
			g, runs, err := r.Record(cmd.Context(), ps, version)
			if err != nil {
				return err
			}
			if err := golden.Write(out, g, runs); err != nil {
				return err
			}
			steps := 0
			for _, run := range runs {
				steps += len(run.Generated)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "recorded %d prompts, %d steps → %s (golden %s, model root %s)\n", len(runs), steps, out, g.ID(), g.ModelRoot)
			return nil
		},
	}
	rec.Flags().StringVar(&model, "model", "", "JNF model directory (default: the embedded default model)")
	rec.Flags().StringVar(&prompts, "prompts", "", "JSONL prompt file")
	rec.Flags().StringVar(&out, "out", "", "output golden directory")
	rec.Flags().IntVar(&threads, "threads", 0, "CPU threads")
	cmd.AddCommand(rec)
	return cmd
}

func newReplayCommand() *cobra.Command {
	var (
		model, gdir, backend string
		threads              int
		asJSON               bool
	)
	cmd := &cobra.Command{
		Use:   "replay --model DIR --golden G",
		Short: "Re-run a golden record and compare every step bit for bit",
		Long: `Replay regenerates every prompt of a golden record with the same tokens and
sampling settings and compares each step's logits with the recorded ones:
bit-identical steps, max |Δ|, top-1 agreement, KL divergence and the first
divergent step. The golden files are checked against their hash chain first.

Exit statuses: 0 every step bit-identical, 1 error, 3 any step not identical
(exact mode).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if gdir == "" {
				return fmt.Errorf("--golden G is required")
			}
			if backend != "cpu" {
				return fmt.Errorf("--backend %q: this build has only the cpu backend", backend)
			}
			if st, err := os.Stat(gdir); err != nil || !st.IsDir() {
				return fmt.Errorf("--golden %s: not a golden directory (tarfa golden record --out writes one)", gdir)
			}
			g, runs, err := golden.Read(gdir)
			if err != nil {
				return failVerification(err)
			}
			r, err := openRunner(cmd, model, threads, 1<<30)
			if err != nil {
				return err
			}
			defer r.Close()
			diffs, err := r.Replay(cmd.Context(), g, runs)
			if err != nil {
				return err
			}
			exact := true
			for _, d := range diffs {
				exact = exact && d.Exact()
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := json.NewEncoder(out).Encode(map[string]any{"exact": exact, "golden": g.ID(), "model_root": g.ModelRoot, "prompts": diffs}); err != nil {
					return err
				}
			} else {
				var rows [][]string
				for _, d := range diffs {
					first := "-"
					if d.FirstDivergent >= 0 {
						first = strconv.Itoa(d.FirstDivergent)
					}
					rows = append(rows, []string{strconv.Itoa(d.Index), strconv.Itoa(d.Steps), fmt.Sprintf("%d/%d", d.Identical, d.Steps),
						fmt.Sprintf("%.3g", d.MaxAbs), fmt.Sprintf("%d/%d", d.Top1Agree, d.Compared), fmt.Sprintf("%.3g", d.MaxKL), first, d.Note})
				}
				reports.Table(out, []string{"prompt", "steps", "bit-identical", "max |Δ|", "top-1", "max KL", "first divergent", "note"}, rows)
				fmt.Fprintf(out, "golden %s (%d prompts) · backend %s, %d threads (recorded on %s, %d threads): exact=%v\n", g.ID(), len(diffs), r.Engine.Backend().Name(), r.Threads, g.Backend, g.Threads, exact)
			}
			if !exact {
				return failVerification(fmt.Errorf("replay is not bit-identical to %s", gdir))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "JNF model directory (default: the embedded default model)")
	cmd.Flags().StringVar(&gdir, "golden", "", "golden directory")
	cmd.Flags().StringVar(&backend, "backend", "cpu", "backend to replay on")
	cmd.Flags().IntVar(&threads, "threads", 0, "CPU threads")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the comparison as JSON")
	return cmd
}
