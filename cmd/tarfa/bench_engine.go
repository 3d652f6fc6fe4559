package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/validation/enginebench"
)

func init() { benchSubcommands = append(benchSubcommands, newBenchEngineCommand) }

// Flag ranges of bench engine.
const (
	maxBenchThreads    = 1024
	maxBenchTokens     = 1 << 20
	maxBenchSeconds    = 3600
	maxExpertCacheMiB  = 1 << 30 // 1 PiB
	defaultBenchMinSec = 2
)

type benchEngineOptions struct {
	threads        []int
	prompt, decode int
	cacheMiB       int64
	repeat         int
	minSeconds     float64
	asJSON         bool
}

func newBenchEngineCommand() *cobra.Command {
	var o benchEngineOptions
	cmd := &cobra.Command{
		Use:   "engine [DIR]",
		Short: "CPU reference prefill/decode tokens per second, with the bit-identity check beside it",
		Long: `Bench engine runs --repeat rounds with the --threads values interleaved
(1 2 1 2 …). For each thread count in each round it opens the model, warms it up
with one untimed generation, and repeats the same greedy generation of a fixed
synthetic prompt until its prefills and its decodes have each been timed for at
least --min-seconds, giving one prefill and one decode figure; then it closes the
model (one model is open at a time). It prints the minimum, median and maximum
tokens per second per thread count, the ratio of the medians to the first thread
count's, and a digest of every step's logits: every generation is compared bit
for bit with the first warm-up's.

By default verified experts stay in RAM after the warm-up (compute alone);
--expert-cache-mib 0 reads and verifies every expert on every use, as streaming
does. Without DIR the embedded default model is used; for real 122B layer shapes
convert a
  tarfa synth --arch qwen3_5_moe --preset real --layers N
checkpoint first.

Exit statuses: 0 ok and bit-identical, 1 error, 3 logits differ between runs.`,
		Args: cobra.MaximumNArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			for _, th := range o.threads {
				if err := checkRange("threads", th, 1, maxBenchThreads); err != nil {
					return err
				}
			}
			for _, c := range []struct {
				flag      string
				v, lo, hi int
			}{
				{"prompt-tokens", o.prompt, 1, maxBenchTokens},
				{"decode-tokens", o.decode, 2, maxBenchTokens},
				{"repeat", o.repeat, 1, maxBenchRepeat},
			} {
				if err := checkRange(c.flag, c.v, c.lo, c.hi); err != nil {
					return err
				}
			}
			if err := checkRange("expert-cache-mib", o.cacheMiB, -1, maxExpertCacheMiB); err != nil {
				return err
			}
			if !(o.minSeconds > 0 && o.minSeconds <= maxBenchSeconds) {
				return fmt.Errorf("--min-seconds %v: want more than 0, at most %d", o.minSeconds, maxBenchSeconds)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := modelDir(cmd, args)
			if err != nil {
				return err
			}
			ram := o.cacheMiB << 20
			if o.cacheMiB < 0 {
				ram = tier.Auto
			}
			// One cell is one thread count in one round.
			update, finish := itemProgress(cmd.ErrOrStderr(), "bench engine (cells)")
			res, err := enginebench.Run(cmd.Context(), dir, enginebench.Options{Threads: o.threads, PromptTokens: o.prompt,
				DecodeTokens: o.decode, RAMBudget: ram, Repeat: o.repeat,
				MinDuration: time.Duration(o.minSeconds * float64(time.Second)), Progress: update})
			finish()
			if err != nil {
				return err
			}
			if o.asJSON {
				if err := json.NewEncoder(cmd.OutOrStdout()).Encode(res); err != nil {
					return err
				}
			} else if err := printBenchEngine(cmd.OutOrStdout(), res); err != nil {
				return err
			}
			for _, f := range res.Figures {
				if !f.BitIdentical {
					return failVerification(fmt.Errorf("logits at %d threads differ from the reference (the first warm-up, at %d threads: %s)", f.Threads, res.Order[0], res.ReferenceDigest))
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.threads, "threads", nil, fmt.Sprintf("thread counts to compare, 1 to %d each (default: 1 and all cores)", maxBenchThreads))
	f.IntVar(&o.prompt, "prompt-tokens", 64, "prompt length")
	f.IntVar(&o.decode, "decode-tokens", 16, "tokens generated per generation (at least 2)")
	f.IntVar(&o.repeat, "repeat", 5, fmt.Sprintf("rounds: times each figure is measured (1 to %d)", maxBenchRepeat))
	f.Float64Var(&o.minSeconds, "min-seconds", defaultBenchMinSec, "seconds, at least, that the prefills and the decodes of each figure are timed")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	f.Int64Var(&o.cacheMiB, "expert-cache-mib", -1, "MiB of verified experts kept resident in the RAM tier (-1 = all, if they fit in half the available memory; 0 = read and verify every use)")
	return cmd
}

func printBenchEngine(w io.Writer, res *enginebench.Result) error {
	printHost(w, res.Host, res.LoadBefore, res.LoadAfter)
	cache := "all verified experts kept in RAM"
	switch {
	case res.RAMBudget == 0:
		cache = "every expert read and verified on every use"
	case res.RAMBudget > 0:
		cache = fmt.Sprintf("RAM tier of %s", reports.Bytes(res.RAMBudget))
	}
	fmt.Fprintf(w, "method: %d rounds, thread counts interleaved %v; each figure ≥ %g s of prefill and of decode; prompt %d tokens, %d generated; %s\n",
		res.Repeat, res.Order, res.MinSeconds, res.PromptTokens, res.DecodeTokens, cache)
	var rows [][]string
	for _, f := range res.Figures {
		rows = append(rows, []string{fmt.Sprint(f.Threads), spread(f.PrefillTokS, "%.4g"), fmt.Sprintf("%.2f", f.PrefillRatio),
			spread(f.DecodeTokS, "%.4g"), fmt.Sprintf("%.2f", f.DecodeRatio), fmt.Sprint(f.Generations),
			fmt.Sprintf("%.0f", f.ExpertsPerTok), f.LogitsDigest, fmt.Sprint(f.BitIdentical)})
	}
	return reports.Table(w, []string{"threads", "prefill tok/s min / median / max", "× first", "decode tok/s min / median / max", "× first",
		"generations", "experts/tok/layer", "logits digest", "bit-identical"}, rows)
}
