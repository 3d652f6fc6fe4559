package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/internal/flock"
	"github.com/tarfa-ai/tarfa/reports"
)

func newGoldenCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "golden", Short: "Record golden logits with the CPU reference"}
	cmd.AddCommand(newGoldenRecordCommand())
	return cmd
}

type goldenRecordOptions struct {
	model, prompts, out string
	threads             int
	force, noWait       bool
	asJSON              bool
	tier                tierFlags
}

// goldenRecordResult is golden record's --json output.
type goldenRecordResult struct {
	Out       string `json:"out"`
	Golden    string `json:"golden"`
	ModelRoot string `json:"model_root"`
	Prompts   int    `json:"prompts"`
	Steps     int    `json:"steps"`
}

func newGoldenRecordCommand() *cobra.Command {
	var o goldenRecordOptions
	cmd := &cobra.Command{
		Use:   "record [--model DIR] --prompts FILE --out G",
		Short: "Run the CPU reference and store tokens and full logits of every step",
		Long: `Record runs every prompt of a JSONL prompt file ({"prompt": text},
{"messages": [...]} or {"tokens": [...]}, with optional max_tokens, seed,
temperature, top_p, top_k, stop; seed, top_p and top_k only with a temperature
above 0) on the CPU reference and writes G/golden.json and G/logits.safetensors:
the prompt tokens, the generated tokens, the full fp32 logits of every step, a
SHA-256 hash chain over the raw logits step by step, and the manifest root of the
model.

Everything is checked before the model runs: the prompt file, that G is new, empty
or (with --force) a golden record to replace, that G can be written, and that
every prompt fits the model's context. While it writes G it holds G/.tarfa.lock: a
second tarfa writing G waits for it (--no-wait: fails at once).

` + exitStatuses,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if o.prompts == "" || o.out == "" {
				return fmt.Errorf("--prompts FILE and --out G are required")
			}
			if _, err := o.tier.options(); err != nil {
				return err
			}
			return threadsFlag(o.threads)
		},
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			ps, err := golden.ReadPromptFile(o.prompts)
			if err != nil {
				return fmt.Errorf("--prompts: %w", err)
			}
			if err := checkGoldenOut(o.out, o.force); err != nil {
				return err
			}
			undo, err := makeOutDir("--out", o.out)
			if err != nil {
				return err
			}
			lock, err := lockDir(cmd, o.out, o.noWait)
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
			// Checked again under the lock: another tarfa may have written it.
			if err := checkGoldenOut(o.out, o.force); err != nil {
				return err
			}
			r, _, err := openRunner(cmd, o.model, o.threads, &o.tier)
			if err != nil {
				return err
			}
			defer r.Close()
			update, finish := countProgress(cmd.ErrOrStderr(), "recording prompts")
			update(0, len(ps))
			g, runs, err := r.Record(cmd.Context(), ps, version, update)
			finish()
			if err != nil {
				return interrupted(err, "nothing was written; run the same command again")
			}
			if err := golden.Write(o.out, g, runs); err != nil {
				return err
			}
			res := goldenRecordResult{Out: o.out, Golden: g.ID(), ModelRoot: g.ModelRoot, Prompts: len(runs)}
			for _, run := range runs {
				res.Steps += len(run.Generated)
			}
			if o.asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "recorded %d prompts, %d steps → %s (golden %s, model root %s)\n", res.Prompts, res.Steps, o.out, res.Golden, res.ModelRoot)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", "", "JNF model directory (default: the embedded default model)")
	f.StringVar(&o.prompts, "prompts", "", "JSONL prompt file")
	f.StringVar(&o.out, "out", "", "output golden directory: new, empty, or a golden record to replace with --force")
	f.IntVar(&o.threads, "threads", 0, fmt.Sprintf("CPU threads, 0 (all cores) to %d", maxThreads))
	o.tier.add(cmd)
	f.BoolVar(&o.force, "force", false, "replace the golden record in --out")
	f.BoolVar(&o.noWait, "no-wait", false, noWaitHelp)
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	return cmd
}

// checkGoldenOut accepts a golden output directory that does not exist,
// is empty, or (with force) holds a golden record; anything else is refused
// before any work.
func checkGoldenOut(dir string, force bool) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--out %s: %w", dir, err)
	}
	isGolden := false
	for _, e := range ents {
		switch e.Name() {
		case golden.MetaFile, golden.LogitsFile:
			isGolden = true
		case flock.Name:
		default:
			return fmt.Errorf("--out %s is not empty and holds no golden record (it holds %s): record into a new or empty directory", dir, e.Name())
		}
	}
	if isGolden && !force {
		return fmt.Errorf("--out %s already holds a golden record: pass --force to replace it, or record into a new directory", dir)
	}
	return nil
}

type replayOptions struct {
	model, golden string
	threads       int
	asJSON        bool
	tier          tierFlags
}

// replayResult is replay's --json output.
type replayResult struct {
	Exact     bool                `json:"exact"`
	Golden    string              `json:"golden"`
	ModelRoot string              `json:"model_root"`
	Backend   string              `json:"backend"`
	Threads   int                 `json:"threads"`
	Prompts   []golden.PromptDiff `json:"prompts"`
}

func newReplayCommand() *cobra.Command {
	var o replayOptions
	cmd := &cobra.Command{
		Use:   "replay [--model DIR] --golden G",
		Short: "Re-run a golden record and compare every step bit for bit",
		Long: `Replay regenerates every prompt of a golden record with the same tokens and
sampling settings and compares each step's logits with the recorded ones:
bit-identical steps, max |Δ|, top-1 agreement, KL divergence and the first
divergent step. The golden files are checked against their hash chain first.

Exit statuses: 0 every step bit-identical; 1 error (no golden record in G, no
model); 3 verification failed: the golden files do not match their hash chain, the
record was made with another model (another manifest root), the model does not
verify, or any step is not bit-identical (exact mode); 130 interrupted.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if o.golden == "" {
				return fmt.Errorf("--golden G is required")
			}
			// The backend flags (--backend, --vram-budget, --placement) are
			// checked with the hierarchy's.
			if _, err := o.tier.options(); err != nil {
				return err
			}
			return threadsFlag(o.threads)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if st, err := os.Stat(o.golden); err != nil || !st.IsDir() {
				return fmt.Errorf("--golden %s: not a golden directory (tarfa golden record --out writes one)", o.golden)
			}
			if _, err := os.Stat(filepath.Join(o.golden, golden.MetaFile)); errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("--golden %s holds no golden record (no %s; tarfa golden record --out writes one)", o.golden, golden.MetaFile)
			}
			g, runs, err := golden.Read(o.golden)
			if err != nil {
				return err
			}
			r, _, err := openRunner(cmd, o.model, o.threads, &o.tier)
			if err != nil {
				return err
			}
			defer r.Close()
			update, finish := countProgress(cmd.ErrOrStderr(), "replaying prompts")
			update(0, len(runs))
			diffs, err := r.Replay(cmd.Context(), g, runs, update)
			finish()
			if err != nil {
				return err
			}
			exact := true
			for _, d := range diffs {
				exact = exact && d.Exact()
			}
			out := cmd.OutOrStdout()
			if o.asJSON {
				err := writeJSON(out, replayResult{Exact: exact, Golden: g.ID(), ModelRoot: g.ModelRoot,
					Backend: r.Engine.Backend().Name(), Threads: r.Threads, Prompts: diffs})
				if err != nil {
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
				fmt.Fprintf(out, "golden %s (%s) · backend %s, %s (recorded on %s, %s): exact=%v\n", g.ID(), plural(len(diffs), "prompt", "prompts"),
					r.Engine.Backend().Name(), plural(r.Threads, "thread", "threads"), g.Backend, plural(g.Threads, "thread", "threads"), exact)
			}
			if !exact {
				return failVerification(fmt.Errorf("replay is not bit-identical to %s", o.golden))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", "", "JNF model directory (default: the embedded default model)")
	f.StringVar(&o.golden, "golden", "", "golden directory")
	f.IntVar(&o.threads, "threads", 0, fmt.Sprintf("CPU threads, 0 (all cores) to %d", maxThreads))
	o.tier.add(cmd)
	f.BoolVar(&o.asJSON, "json", false, "print the comparison as JSON")
	return cmd
}
