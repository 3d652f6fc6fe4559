package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/engine/runner"
	"github.com/tarfa-ai/tarfa/golden"
)

func init() { register(newRunCommand) }

type genFlags struct {
	model       string
	threads     int
	maxTokens   int
	temperature float64
	topP        float64
	topK        int
	seed        uint64
	cacheMiB    int64
}

func (g *genFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&g.model, "model", "", "JNF model directory (default: the embedded default model)")
	f.IntVar(&g.threads, "threads", 0, "CPU threads (0 = all; results are identical for every value)")
	f.IntVar(&g.maxTokens, "max-tokens", 64, "most tokens to generate")
	f.Float64Var(&g.temperature, "temperature", 0, "sampling temperature (0 = greedy)")
	f.Float64Var(&g.topP, "top-p", 0, "nucleus sampling mass (0 = off)")
	f.IntVar(&g.topK, "top-k", 0, "sample among the K most likely tokens (0 = off)")
	f.Uint64Var(&g.seed, "seed", 0, "sampling seed (same seed, same tokens)")
	f.Int64Var(&g.cacheMiB, "expert-cache-mib", 1024, "MiB of verified experts kept in RAM (0 = re-read and re-hash every use)")
}

func (g *genFlags) open(cmd *cobra.Command) (*runner.Runner, error) {
	return openRunner(cmd, g.model, g.threads, g.cacheMiB<<20)
}

// openRunner opens dir (the embedded default model when empty) for
// generation and prints the banner.
func openRunner(cmd *cobra.Command, dir string, threads int, cacheBytes int64) (*runner.Runner, error) {
	isDefault := dir == ""
	if isDefault {
		var err error
		if dir, err = defaultModel(cmd); err != nil {
			return nil, err
		}
	}
	r, err := runner.Open(cmd.Context(), dir, runner.Options{Threads: threads, ExpertCacheBytes: cacheBytes})
	if err != nil {
		return nil, err
	}
	banner(cmd, r)
	if isDefault {
		fmt.Fprintln(cmd.ErrOrStderr(), "embedded default model: a tiny Qwen3.5-MoE with random weights — the text is noise; what it shows is the verified pipeline (--model DIR for a converted checkpoint)")
	}
	return r, nil
}

// banner states what runs: the mode (always exact here), the model root and the backend.
func banner(cmd *cobra.Command, r *runner.Runner) {
	fmt.Fprintf(cmd.ErrOrStderr(), "tarfa · EXACT mode · model %s root %s · backend %s (%d threads)\n",
		r.Config.Arch, r.Checkpoint.Root().Short(), r.Engine.Backend().Name(), r.Threads)
}

func parseIDs(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("--tokens: %q is not a token id", f)
		}
		ids = append(ids, n)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("--tokens: no ids")
	}
	return ids, nil
}

func newRunCommand() *cobra.Command {
	var (
		g      genFlags
		raw    bool
		tokens string
		asJSON bool
		system string
		think  bool
	)
	cmd := &cobra.Command{
		Use:   "run [PROMPT]",
		Short: "Generate text with the exact CPU reference engine",
		Long: `Run generates a continuation of PROMPT with the CPU reference engine from a
verified JNF directory (--model; default: the embedded default model). The prompt
is rendered with the model's chat template as one user turn (after a --system
turn, if given; --think=false sets the template's enable_thinking to false) unless
--raw; --tokens gives token ids directly. Output streams to stdout; the banner and statistics go
to stderr. Greedy by default; --temperature/--top-p/--top-k/--seed sample
deterministically.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := g.open(cmd)
			if err != nil {
				return err
			}
			defer r.Close()
			if (raw || tokens != "") && (system != "" || cmd.Flags().Changed("think")) {
				return fmt.Errorf("--system and --think apply to the chat template, not to --raw or --tokens")
			}
			var ids []int
			var rendered string
			switch {
			case tokens != "":
				if ids, err = parseIDs(tokens); err != nil {
					return err
				}
			case len(args) == 0:
				return fmt.Errorf("give a PROMPT or --tokens")
			case raw || r.Tok == nil:
				ids, err = r.EncodeText(args[0])
			default:
				var turns []map[string]string
				if system != "" {
					turns = append(turns, map[string]string{"role": "system", "content": system})
				}
				msgs, _ := json.Marshal(append(turns, map[string]string{"role": "user", "content": args[0]}))
				var enable *bool
				if cmd.Flags().Changed("think") {
					enable = &think
				}
				ids, rendered, err = r.EncodeChat(msgs, enable)
			}
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var dec interface {
				Next(int) (string, error)
				Flush() string
			}
			if r.Tok != nil && !asJSON {
				dec = r.Tok.NewStreamDecoder()
			}
			start := time.Now()
			run, err := r.Generate(cmd.Context(), ids, g.maxTokens, r.DefaultStops(),
				golden.Sampling{Temperature: g.temperature, TopP: g.topP, TopK: g.topK, Seed: g.seed}, false,
				func(tok int) error {
					if dec == nil {
						return nil
					}
					s, err := dec.Next(tok)
					if err == nil {
						fmt.Fprint(out, s)
					}
					return err
				})
			if err != nil {
				return err
			}
			secs := time.Since(start).Seconds()
			if dec != nil {
				fmt.Fprintln(out, dec.Flush())
			}
			st := r.Engine.Stats()
			if asJSON {
				text := ""
				if r.Tok != nil {
					text, _ = r.Tok.Decode(run.Generated)
				}
				return json.NewEncoder(out).Encode(map[string]any{"prompt_tokens": ids, "prompt": rendered, "tokens": run.Generated, "text": text,
					"model_root": r.Checkpoint.Root().Hex(), "mode": "exact", "backend": r.Engine.Backend().Name()})
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d prompt + %d generated tokens in %.2fs; routed experts per token and MoE layer: %d (config top-k %d)\n",
				len(ids), len(run.Generated), secs, st.ExpertEvals[firstSparse(r)]/max(st.Tokens, 1), st.TopK)
			return nil
		},
	}
	g.add(cmd)
	cmd.Flags().BoolVar(&raw, "raw", false, "encode the prompt as plain text, without the chat template")
	cmd.Flags().StringVar(&tokens, "tokens", "", "prompt as token ids, e.g. 1,2,3")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().StringVar(&system, "system", "", "a system turn before the prompt")
	cmd.Flags().BoolVar(&think, "think", true, "the chat template's enable_thinking (passed only when set)")
	return cmd
}

func firstSparse(r *runner.Runner) int {
	for l, s := range r.Config.Sparse {
		if s {
			return l
		}
	}
	return 0
}
