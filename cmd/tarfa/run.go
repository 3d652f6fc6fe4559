package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/tier"
)

// genFlags are the model and sampling flags of the generating commands.
type genFlags struct {
	model       string
	threads     int
	maxTokens   int
	temperature float64
	topP        float64
	topK        int
	seed        uint64
	tier        tierFlags
}

func (g *genFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&g.model, "model", "", "JNF model directory (default: the embedded default model)")
	f.IntVar(&g.threads, "threads", 0, fmt.Sprintf("CPU threads, 0 (all cores) to %d; results are identical for every value", maxThreads))
	f.IntVar(&g.maxTokens, "max-tokens", 64, "most tokens to generate (generation also stops at the model's context limit)")
	f.Float64Var(&g.temperature, "temperature", 0, "sampling temperature (0 = greedy)")
	f.Float64Var(&g.topP, "top-p", 0, "nucleus sampling mass in (0, 1] (with --temperature; 0 = off)")
	f.IntVar(&g.topK, "top-k", 0, "sample among the K most likely tokens (with --temperature; 0 = off)")
	f.Uint64Var(&g.seed, "seed", 0, "sampling seed (with --temperature): same seed, same tokens")
	g.tier.add(cmd)
}

// check validates the flags before anything is opened.
func (g *genFlags) check(cmd *cobra.Command) error {
	if err := threadsFlag(g.threads); err != nil {
		return err
	}
	if err := intFlag("max-tokens", int64(g.maxTokens), 1, golden.MaxTokensLimit, "tokens to generate"); err != nil {
		return err
	}
	if _, err := g.tier.options(); err != nil {
		return err
	}
	if err := finiteFlag("temperature", g.temperature, 0, golden.MaxTemperature, "0 = greedy"); err != nil {
		return err
	}
	if g.topP != 0 {
		if err := finiteFlag("top-p", g.topP, 1e-9, 1, "nucleus mass; 0 = off"); err != nil {
			return err
		}
	}
	if g.topK < 0 {
		return fmt.Errorf("--top-k %d: want 0 (off) or more", g.topK)
	}
	if g.temperature == 0 {
		var set []string
		for _, name := range []string{"top-p", "top-k", "seed"} {
			if cmd.Flags().Changed(name) {
				set = append(set, "--"+name)
			}
		}
		if len(set) > 0 {
			verb := "apply"
			if len(set) == 1 {
				verb = "applies"
			}
			return fmt.Errorf("%s %s only when sampling: add --temperature T (above 0); without it decoding is greedy", strings.Join(set, ", "), verb)
		}
	}
	return nil
}

func (g *genFlags) sampling() golden.Sampling {
	return golden.Sampling{Temperature: g.temperature, TopP: g.topP, TopK: g.topK, Seed: g.seed}
}

// openRunner opens dir (the embedded default model when empty) for
// generation through the streaming hierarchy the flags describe, showing
// progress while the model is verified and loaded, and prints the banner.
// It returns the time the opening took.
func openRunner(cmd *cobra.Command, dir string, threads int, tf *tierFlags) (*runner.Runner, time.Duration, error) {
	start := time.Now()
	to, err := tf.options()
	if err != nil {
		return nil, 0, err
	}
	isDefault := dir == ""
	if isDefault {
		if dir, err = defaultModel(cmd); err != nil {
			return nil, 0, err
		}
	}
	opt := runner.Options{Threads: threads, Tier: to, Warm: tf.warm, Backend: tf.backend, VRAMBudget: tf.vramBytes, Placement: tf.place,
		DeviceVerify: tf.deviceVerify, Timing: tf.timing}
	if tf.heat {
		if cache, err := os.UserCacheDir(); err == nil {
			opt.HeatDir = filepath.Join(cache, "tarfa")
		}
	}
	tr, err := tf.openTrace()
	if err != nil {
		return nil, 0, err
	}
	if tr != nil {
		opt.Trace = tr
		cmd.PostRunE = chainPostRun(cmd.PostRunE, tr.Close)
	}
	update, done := phasedProgress(cmd.ErrOrStderr(), "opening and verifying "+dir)
	opt.Progress = update
	r, err := runner.Open(cmd.Context(), dir, opt)
	done()
	if err != nil {
		if tr != nil {
			tr.Close()
		}
		return nil, 0, openError(err)
	}
	banner(cmd, r)
	if isDefault {
		fmt.Fprintln(cmd.ErrOrStderr(), "embedded default model: a tiny Qwen3.5-MoE with random weights — the text is noise; what it shows is the verified pipeline (--model DIR for a converted checkpoint)")
	}
	return r, time.Since(start), nil
}

// chainPostRun runs f after a command's own PostRunE.
func chainPostRun(prev func(*cobra.Command, []string) error, f func() error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		var err error
		if prev != nil {
			err = prev(cmd, args)
		}
		if ferr := f(); err == nil {
			err = ferr
		}
		return err
	}
}

// banner states what runs: the mode (always exact here, with the
// checkpoint's precision when it is block-FP8), the model root, the
// backend and what is resident where.
func banner(cmd *cobra.Command, r *runner.Runner) {
	fmt.Fprintf(cmd.ErrOrStderr(), "tarfa · %s · model %s root %s · backend %s (%s)\n",
		modeBanner(r.Config.Quant), r.Config.Arch, r.Checkpoint.Root().Short(), r.Engine.Backend().Name(), plural(r.Threads, "thread", "threads"))
	if be := r.Engine.Backend(); be.Name() != "cpu" {
		fmt.Fprintf(cmd.ErrOrStderr(), "  %s\n", describeResidency(be.Residency()))
	}
	if r.Tier != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "  %s\n", r.Tier.Describe())
		if w := ramBudgetWarning(r.Tier.Options().RAMBudget, r.Tier.Stats().RAMCap, r.Tier.ExpertBytes(), tier.TotalMemory()); w != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "  warning: %s\n", w)
		}
	}
}

// modeBanner is the banner's mode: "EXACT mode", and for a block-FP8
// checkpoint the precision it is exact with respect to.
func modeBanner(q *hf.Quant) string {
	if q == nil {
		return "EXACT mode"
	}
	return fmt.Sprintf("EXACT mode, FP8 CHECKPOINT (%s, %d×%d blocks, %s activation scales)", q.Format, q.BlockN, q.BlockK, q.Activation)
}

// ramBudgetWarning says when a RAM-tier budget is more than the machine's
// memory (total; 0: unknown): harmless when the experts themselves fit
// (the tier holds capacity of them, of size bytes each), a risk of running
// out of memory when they do not.
func ramBudgetWarning(budget int64, capacity, size int, total int64) string {
	if total <= 0 || budget <= total {
		return ""
	}
	held := int64(capacity) * int64(size)
	w := fmt.Sprintf("--ram-budget %s is more than this machine's memory (%s)", reports.Bytes(budget), reports.Bytes(total))
	if held <= total/2 {
		return w + fmt.Sprintf("; the RAM tier holds at most %s here, which fits", reports.Bytes(held))
	}
	return w + fmt.Sprintf(": the RAM tier may grow to %s; give a smaller budget, or auto (half the available memory)", reports.Bytes(held))
}

// describeResidency says what a device backend keeps where.
func describeResidency(res backend.Residency) string {
	budget := "whole device"
	if res.Budget > 0 {
		budget = fmt.Sprintf("budget %.2f GiB", float64(res.Budget)/(1<<30))
	}
	s := fmt.Sprintf("device: %s, %s, %.2f GiB in use; weights %.2f GiB on the device (%d), %.2f GiB on the host (%d)",
		res.Device, budget, float64(res.InUse)/(1<<30), float64(res.DeviceWeights)/(1<<30), res.DeviceWeightCount,
		float64(res.HostWeights)/(1<<30), res.HostWeightCount)
	if len(res.HostResident) > 0 {
		s += ": " + strings.Join(res.HostResident, ", ")
	}
	if res.VerifyCopies {
		s += "; expert copies re-hashed on the device"
	}
	return s
}

// parseIDs parses token ids separated by commas or spaces.
func parseIDs(flag, s string) ([]int, error) {
	var ids []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%s: %q is not a token id (a whole number, 0 or more)", flag, f)
		}
		ids = append(ids, n)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: no token ids", flag)
	}
	return ids, nil
}

// runResult is run's --json output.
type runResult struct {
	Mode         string       `json:"mode"`
	Backend      string       `json:"backend"`
	Threads      int          `json:"threads"`
	ModelRoot    string       `json:"model_root"`
	Prompt       string       `json:"prompt"` // the rendered chat prompt ("" for --raw and --tokens)
	PromptTokens []int        `json:"prompt_tokens"`
	Tokens       []int        `json:"tokens"`
	Text         string       `json:"text"` // special tokens left out unless --special
	StopReason   string       `json:"stop_reason"`
	MaxTokens    int          `json:"max_tokens"` // after the context limit
	ContextLimit int          `json:"context_limit"`
	Sampling     samplingJSON `json:"sampling"`
	Timing       timingJSON   `json:"timing"`
	// ExpertLevels are the expert hierarchy's counts per level for this
	// process (the run's uses: the hierarchy starts empty).
	ExpertLevels *expertLevels `json:"expert_levels,omitempty"`
	// Placement counts where the routed-expert uses (one expert for the
	// tokens of one step) were computed: by the host beside a device
	// backend (--placement) and by the model's backend.
	Placement placementCounts `json:"placement"`
}

type placementCounts struct {
	Host   int64 `json:"host"`
	Device int64 `json:"device"`
}

// expertLevels is tier.Stats' per-level counters.
type expertLevels struct {
	Device tier.Level `json:"device"`
	RAM    tier.Level `json:"ram"`
	// PageCache: the RAM tier's misses the page cache served (read from
	// there and hashed, not admitted: tier.Stats.PageCacheUses); Storage
	// the rest.
	PageCache tier.Level `json:"page_cache"`
	Storage   tier.Level `json:"storage"`
	// Prefetch is what the hints did: reads started, those a use then
	// hit, those evicted unused, and their bytes; hinted experts not read
	// ahead (their rank does not pay, the page cache holds them, or their
	// layer was backed off),
	// probes, what the first Stream of their layer made of the reads ahead
	// (unused, lost of those: the hint came true but the copy was gone,
	// used late, the read time they hid and the read time of the unused),
	// and the hints scored and those that came true.
	Prefetch *prefetchCounts `json:"prefetch,omitempty"`
	// DevicePrefetch is what --device-prefetch did: experts copied into
	// device slots ahead of their layer, those the layer then bound, those
	// it did not, and hinted experts not copied (tier.Stats).
	DevicePrefetch *devicePrefetchCounts `json:"device_prefetch,omitempty"`
}

type devicePrefetchCounts struct {
	Copied  int64 `json:"copied"`
	Used    int64 `json:"used"`
	Unused  int64 `json:"unused"`
	Skipped int64 `json:"skipped"`
}

type prefetchCounts struct {
	Issued int64 `json:"issued"`
	Useful int64 `json:"useful"`
	Wasted int64 `json:"wasted"`
	Bytes  int64 `json:"bytes"`
	// The rest: tier.Stats' Prefetch… and Hints… counters.
	Skipped       int64   `json:"skipped"`
	Cached        int64   `json:"cached"`
	BackedOff     int64   `json:"backed_off"`
	Probes        int64   `json:"probes"`
	Unused        int64   `json:"unused"`
	Lost          int64   `json:"lost"`
	Late          int64   `json:"late"`
	SavedSeconds  float64 `json:"saved_seconds"`
	UnusedSeconds float64 `json:"unused_seconds"`
	HintsScored   int64   `json:"hints_scored"`
	HintsTrue     int64   `json:"hints_true"`
	ScoredByRank  []int64 `json:"hints_scored_by_rank,omitempty"`
	TrueByRank    []int64 `json:"hints_true_by_rank,omitempty"`
}

type samplingJSON struct {
	Greedy      bool    `json:"greedy"`
	Temperature float64 `json:"temperature"`
	TopP        float64 `json:"top_p"`
	TopK        int     `json:"top_k"`
	Seed        uint64  `json:"seed"`
}

type timingJSON struct {
	LoadSeconds    float64 `json:"load_seconds"`
	PrefillSeconds float64 `json:"prefill_seconds"`
	DecodeSeconds  float64 `json:"decode_seconds"`
	PrefillTokS    float64 `json:"prefill_tokens_per_second"`
	DecodeTokS     float64 `json:"decode_tokens_per_second"`
}

// Stop reasons of run.
const (
	stopEOS    = "eos"    // the model's end-of-sequence token
	stopLength = "length" // --max-tokens, or the model's context limit
)

type runOptions struct {
	gen     genFlags
	raw     bool
	tokens  string
	asJSON  bool
	system  string
	think   bool
	special bool
}

func newRunCommand() *cobra.Command {
	var o runOptions
	var ids []int
	cmd := &cobra.Command{
		Use:   "run [PROMPT | -]",
		Short: "Generate text, exactly, on the CPU reference or the CUDA backend",
		Long: `Run generates a continuation of PROMPT from a
verified JNF directory (--model; default: the embedded default model). PROMPT "-"
reads the prompt from standard input. The prompt is rendered with the model's chat
template as one user turn (after a --system turn, if given; --think false sets the
template's enable_thinking to false) unless --raw; --tokens gives token ids
directly. --backend cpu (the reference) and --backend cuda compute the same bits.

The text streams to stdout; on a terminal, control characters in it are shown
escaped (\x1b), and special tokens such as the end-of-turn token are left out
unless --special. A model without a tokenizer prints the generated ids. The
banner and a summary go to stderr: load time, prefill and decode tokens per
second and why generation stopped: eos (the model's end-of-sequence token) or
length (--max-tokens, or the model's context limit, which --max-tokens is cut
to). --json prints the same as one object.

Greedy by default; --temperature T samples deterministically, with --top-p,
--top-k and --seed.

` + exitStatuses,
		Args: oneText("PROMPT"),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if err := o.gen.check(cmd); err != nil {
				return err
			}
			switch {
			case o.tokens != "" && len(args) > 0:
				return fmt.Errorf("give a PROMPT or --tokens, not both")
			case o.tokens == "" && len(args) == 0:
				return fmt.Errorf("give a PROMPT (\"-\" reads it from standard input) or --tokens IDS")
			case (o.raw || o.tokens != "") && (o.system != "" || cmd.Flags().Changed("think")):
				return fmt.Errorf("--system and --think apply to the chat template, not to --raw or --tokens")
			}
			if o.tokens != "" {
				var err error
				ids, err = parseIDs("--tokens", o.tokens)
				return err
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			prompt := ""
			if len(args) > 0 {
				prompt = args[0]
			}
			if prompt == "-" {
				in := contextReader(cmd.Context(), cmd.InOrStdin())
				defer in.Close()
				if isTerminal(cmd.InOrStdin()) {
					fmt.Fprintln(cmd.ErrOrStderr(), "reading the prompt from standard input (end it with Ctrl-D)…")
				}
				b, err := jnf.ReadAllLimit(in, "standard input", jnf.MaxAuxFileSize, "prompt")
				if err != nil {
					return fmt.Errorf("reading the prompt: %w", err)
				}
				prompt = string(b)
			}
			return runRun(cmd, o, prompt, ids)
		},
	}
	o.gen.add(cmd)
	f := cmd.Flags()
	f.BoolVar(&o.raw, "raw", false, "encode the prompt as plain text, without the chat template")
	f.StringVar(&o.tokens, "tokens", "", "prompt as token ids, e.g. 1,2,3")
	f.BoolVar(&o.asJSON, "json", false, "print the result as one JSON object")
	f.StringVar(&o.system, "system", "", "a system turn before the prompt")
	f.Var(newBoolValue(&o.think, true), "think", "the chat template's enable_thinking: --think false or --think=false (passed only when given)")
	f.BoolVar(&o.special, "special", false, "print special tokens (such as the end-of-turn token) too")
	return cmd
}

func runRun(cmd *cobra.Command, o runOptions, prompt string, ids []int) error {
	r, load, err := openRunner(cmd, o.gen.model, o.gen.threads, &o.gen.tier)
	if err != nil {
		return err
	}
	defer r.Close()
	var rendered string
	switch {
	case ids != nil:
	case o.raw || r.Tok == nil:
		ids, err = r.EncodeText(prompt)
	default:
		var turns []map[string]string
		if o.system != "" {
			turns = append(turns, map[string]string{"role": "system", "content": o.system})
		}
		msgs, _ := json.Marshal(append(turns, map[string]string{"role": "user", "content": prompt}))
		var enable *bool
		if cmd.Flags().Changed("think") {
			enable = &o.think
		}
		ids, rendered, err = r.EncodeChat(msgs, enable)
	}
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("the prompt encodes to no tokens")
	}
	limit := r.ContextLimit()
	maxTokens := min(o.gen.maxTokens, r.MaxNewTokens(len(ids)))
	if maxTokens == 0 {
		return fmt.Errorf("the prompt is %d tokens, more than the model's context of %d positions", len(ids), limit)
	}
	stops := r.DefaultStops()

	out := cmd.OutOrStdout()
	var emit func(tok int) error
	flush := func() string { return "" }
	switch {
	case o.asJSON:
	case r.Tok == nil:
		// No tokenizer: the ids are the output.
		first := true
		emit = func(tok int) error {
			sep := " "
			if first {
				sep, first = "", false
			}
			_, err := fmt.Fprintf(out, "%s%d", sep, tok)
			return err
		}
	default:
		dec := r.Tok.NewStreamDecoder()
		dec.SkipSpecial = !o.special
		emit = func(tok int) error {
			s, err := dec.Next(tok)
			if err == nil && s != "" {
				_, err = io.WriteString(out, s)
			}
			return err
		}
		flush = dec.Flush
	}
	run, res, err := r.Generate(cmd.Context(), ids, maxTokens, stops, o.gen.sampling(), false, emit)
	if err != nil {
		return err
	}
	reason := stopLength
	if res.StopReason == engine.StopToken {
		reason = stopEOS
	}
	if o.asJSON {
		var text string
		if r.Tok != nil {
			if o.special {
				text, err = r.Tok.Decode(run.Generated)
			} else {
				text, err = r.Tok.DecodeSkipSpecial(run.Generated)
			}
			if err != nil {
				return err
			}
		}
		s := o.gen.sampling()
		var levels *expertLevels
		if r.Tier != nil {
			ts := r.Tier.Stats()
			levels = &expertLevels{Device: ts.Device, RAM: ts.RAM, PageCache: ts.PageCache, Storage: ts.Storage,
				Prefetch: &prefetchCounts{Issued: ts.PrefetchIssued, Useful: ts.PrefetchUseful, Wasted: ts.PrefetchWasted, Bytes: ts.PrefetchBytes,
					Skipped: ts.PrefetchSkipped, Cached: ts.PrefetchCached, BackedOff: ts.PrefetchBackedOff, Probes: ts.PrefetchProbes,
					Unused: ts.PrefetchUnused, Lost: ts.PrefetchLost, Late: ts.PrefetchLate, SavedSeconds: ts.PrefetchSavedSeconds, UnusedSeconds: ts.PrefetchUnusedSeconds,
					HintsScored: ts.HintsScored, HintsTrue: ts.HintsTrue, ScoredByRank: ts.HintsScoredByRank, TrueByRank: ts.HintsTrueByRank}}
			if r.Tier.Options().DevicePrefetch {
				levels.DevicePrefetch = &devicePrefetchCounts{Copied: ts.DevicePrefetched, Used: ts.DevicePrefetchUsed,
					Unused: ts.DevicePrefetchUnused, Skipped: ts.DevicePrefetchSkipped}
			}
		}
		est := r.Engine.Stats()
		return writeJSON(out, runResult{
			ExpertLevels: levels,
			Placement:    placementCounts{Host: est.ExpertsOnHost, Device: est.ExpertsOnDevice},
			Mode:         r.Mode(), Backend: r.Engine.Backend().Name(), Threads: r.Threads, ModelRoot: r.Checkpoint.Root().Hex(),
			Prompt: rendered, PromptTokens: ids, Tokens: run.Generated, Text: text, StopReason: reason,
			MaxTokens: maxTokens, ContextLimit: limit,
			Sampling: samplingJSON{Greedy: s.Temperature == 0, Temperature: s.Temperature, TopP: s.TopP, TopK: s.TopK, Seed: s.Seed},
			Timing:   timing(load, len(ids), len(run.Generated), res),
		})
	}
	// The text ends with a newline before the summary on stderr.
	if _, err := fmt.Fprintln(out, flush()); err != nil {
		return err
	}
	tm := timing(load, len(ids), len(run.Generated), res)
	why := reason
	switch {
	case reason == stopEOS:
		if r.Tok != nil {
			if name, err := r.Tok.Token(run.Generated[len(run.Generated)-1]); err == nil {
				why += " (" + name + ")"
			}
		}
	case maxTokens < o.gen.maxTokens:
		why += fmt.Sprintf(" (the model's context of %d positions is full; --max-tokens %d was cut to %d)", limit, o.gen.maxTokens, maxTokens)
	default:
		why += fmt.Sprintf(" (--max-tokens %d)", maxTokens)
	}
	st := r.Engine.Stats()
	fmt.Fprintf(cmd.ErrOrStderr(), "%d prompt + %d generated tokens · load %.2fs · prefill %.1f tok/s · decode %.1f tok/s · %s · stop: %s · routed experts per token and MoE layer: %d (config top-k %d)\n",
		len(ids), len(run.Generated), tm.LoadSeconds, tm.PrefillTokS, tm.DecodeTokS, samplingWords(o.gen.sampling()), why,
		st.ExpertEvals[firstSparse(r)]/max(st.Tokens, 1), st.TopK)
	if r.Tier != nil {
		if ts := r.Tier.Stats(); ts.Device.Capacity > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "expert levels: device %d of %d uses hit (%.1f%%, %d slots), RAM %d of %d, page cache %d, storage %d reads\n",
				ts.Device.Hits, ts.Device.Uses, 100*ts.Device.HitRate(), ts.Device.Capacity, ts.RAM.Hits, ts.RAM.Uses, ts.PageCache.Hits, ts.Storage.Uses)
		}
	}
	return nil
}

func timing(load time.Duration, prompt, generated int, res engine.GenResult) timingJSON {
	t := timingJSON{LoadSeconds: load.Seconds(), PrefillSeconds: res.Prefill.Seconds(), DecodeSeconds: res.Decode.Seconds()}
	if t.PrefillSeconds > 0 {
		t.PrefillTokS = float64(prompt) / t.PrefillSeconds
	}
	// The first token comes from the prefill's logits; each further one
	// costs one decode step.
	if t.DecodeSeconds > 0 && generated > 1 {
		t.DecodeTokS = float64(generated-1) / t.DecodeSeconds
	}
	return t
}

func samplingWords(s golden.Sampling) string {
	if s.Temperature == 0 {
		return "greedy"
	}
	w := []string{fmt.Sprintf("temperature %g", s.Temperature)}
	if s.TopP != 0 {
		w = append(w, fmt.Sprintf("top-p %g", s.TopP))
	}
	if s.TopK != 0 {
		w = append(w, fmt.Sprintf("top-k %d", s.TopK))
	}
	return "sampled (" + strings.Join(append(w, fmt.Sprintf("seed %d", s.Seed)), ", ") + ")"
}

func firstSparse(r *runner.Runner) int {
	if i := slices.Index(r.Config.Sparse, true); i >= 0 {
		return i
	}
	return 0
}
