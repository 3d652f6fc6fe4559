package main

import (
	"encoding/json"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/validation/enginebench"
)

func init() { benchSubcommands = append(benchSubcommands, newBenchEngineCommand) }

func newBenchEngineCommand() *cobra.Command {
	var (
		threads        []int
		prompt, decode int
		asJSON         bool
		cacheMiB       int64
	)
	cmd := &cobra.Command{
		Use:   "engine [DIR]",
		Short: "CPU reference prefill/decode tokens per second, with the bit-identity check beside it",
		Long: `Bench engine runs the same greedy generation (a fixed synthetic prompt) at each
--threads value, after one untimed warm-up run, and prints prefill and decode
tokens per second with a digest of every step's logits and whether they are
bit-identical to the first thread count's. By default verified experts stay in
RAM after the warm-up (compute alone); --expert-cache-mib 0 reads and verifies
every expert on every use, as streaming does. Without DIR the embedded default model
is used; for real 122B layer shapes convert a
  tarfa synth --arch qwen3_5_moe --preset real --layers N
checkpoint first.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := modelDir(cmd, args)
			if err != nil {
				return err
			}
			if len(threads) == 0 {
				threads = []int{1, runtime.GOMAXPROCS(0)}
			}
			cache := cacheMiB << 20
			if cacheMiB < 0 {
				cache = -1
			}
			res, err := enginebench.Run(cmd.Context(), dir, threads, prompt, decode, cache)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
			}
			var rows [][]string
			for _, r := range res {
				rows = append(rows, []string{fmt.Sprint(r.Threads), fmt.Sprintf("%d", r.PromptTokens), fmt.Sprintf("%.2f", r.PrefillTokS),
					fmt.Sprintf("%d", r.DecodeTokens), fmt.Sprintf("%.2f", r.DecodeTokS), fmt.Sprintf("%.0f", r.ExpertsPerTok), r.LogitsDigest, fmt.Sprint(r.BitIdentical)})
			}
			if err := reports.Table(cmd.OutOrStdout(), []string{"threads", "prompt", "prefill tok/s", "decode", "decode tok/s", "experts/tok/layer", "logits digest", "bit-identical"}, rows); err != nil {
				return err
			}
			for _, r := range res {
				if !r.BitIdentical {
					return failVerification(fmt.Errorf("logits at %d threads differ from %d threads", r.Threads, res[0].Threads))
				}
			}
			return nil
		},
	}
	cmd.Flags().IntSliceVar(&threads, "threads", nil, "thread counts to compare (default: 1 and all cores)")
	cmd.Flags().IntVar(&prompt, "prompt-tokens", 64, "prompt length")
	cmd.Flags().IntVar(&decode, "decode-tokens", 16, "tokens to generate")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().Int64Var(&cacheMiB, "expert-cache-mib", -1, "MiB of verified experts kept in RAM (-1 = all, 0 = read and verify every use)")
	return cmd
}
