package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/tier/sim"
	"github.com/tarfa-ai/tarfa/tier/trace"
)

// simTraceFlags choose the routing trace of tarfa sim and tarfa sim policies.
type simTraceFlags struct {
	path, synthetic, heat, save string
	tokens, layers, experts     int
	topK, maxTokens             int
}

func (f *simTraceFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.path, "trace", "", "routing trace to replay (JSONL, package tier/trace)")
	fs.StringVar(&f.synthetic, "synthetic", "", "synthetic trace instead: zipf:s=S,reuse=P[,shift=N,seed=N,stream=N]")
	fs.IntVar(&f.tokens, "tokens", 1000, "tokens of the synthetic trace")
	fs.IntVar(&f.layers, "layers", 48, "MoE layers (synthetic; checked against a --trace header if given)")
	fs.IntVar(&f.experts, "experts", 256, "routed experts per layer (synthetic; checked against a --trace header if given)")
	fs.IntVar(&f.topK, "top-k", 8, "experts per token per layer (synthetic; checked against a --trace header if given)")
	fs.IntVar(&f.maxTokens, "max-tokens", 100000, "refuse a --trace of more tokens")
	fs.StringVar(&f.heat, "heat", "", `heat ledger for the heat and static policies and --warm-start: "previous[:N]" (the use counts of another run of a synthetic trace's model, stream seed + 1, of N tokens, default as many as the trace) or a trace FILE whose use counts are the heat`)
	fs.StringVar(&f.save, "save-trace", "", "write the trace used to FILE (a new file: an existing one is refused)")
}

// load validates the flags and returns the trace and the heat ledger (nil
// if --heat is not given).
func (f *simTraceFlags) load(cmd *cobra.Command) (*trace.Trace, []float64, error) {
	if (f.path == "") == (f.synthetic == "") {
		return nil, nil, fmt.Errorf("give exactly one of --trace FILE and --synthetic SPEC")
	}
	for _, v := range []struct {
		name   string
		n, max int
	}{{"--layers", f.layers, trace.MaxLayers}, {"--experts", f.experts, trace.MaxExperts}, {"--top-k", f.topK, min(trace.MaxTopK, f.experts)}, {"--max-tokens", f.maxTokens, 1 << 30}} {
		if v.n < 1 || v.n > v.max {
			return nil, nil, fmt.Errorf("%s %d: want 1 to %d", v.name, v.n, v.max)
		}
	}
	var tr *trace.Trace
	if f.synthetic != "" {
		g, err := trace.ParseSynthetic(f.synthetic)
		if err != nil {
			return nil, nil, fmt.Errorf("--synthetic: %w", err)
		}
		if f.tokens < 1 || int64(f.tokens)*int64(f.layers)*int64(f.topK) > trace.MaxSynthesize {
			return nil, nil, fmt.Errorf("--tokens %d: want 1 to %d for %d layers × top-%d", f.tokens, trace.MaxSynthesize/(f.layers*f.topK), f.layers, f.topK)
		}
		if tr, err = trace.Synthesize(g, f.layers, f.experts, f.topK, f.tokens); err != nil {
			return nil, nil, err
		}
	} else {
		if cmd.Flags().Changed("tokens") {
			return nil, nil, fmt.Errorf("--tokens is for --synthetic; a --trace has its own")
		}
		var err error
		if tr, err = readTrace(f.path, f.maxTokens); err != nil {
			return nil, nil, err
		}
		h := tr.Header
		for _, c := range []struct {
			name      string
			flag, got int
		}{{"layers", f.layers, h.Layers}, {"experts", f.experts, h.Experts}, {"top-k", f.topK, h.TopK}} {
			if cmd.Flags().Changed(c.name) && c.flag != c.got {
				return nil, nil, fmt.Errorf("--%s %d, but the trace %s has %d", c.name, c.flag, f.path, c.got)
			}
		}
		if tr.Tokens() == 0 {
			return nil, nil, fmt.Errorf("--trace %s: no tokens", f.path)
		}
	}
	var heat []float64
	switch prevTokens, isPrev, err := parsePrevious(f.heat, tr.Tokens()); {
	case err != nil:
		return nil, nil, err
	case f.heat == "":
	case isPrev:
		g := tr.Header.Generator
		if g == nil {
			return nil, nil, fmt.Errorf(`--heat previous needs a --synthetic trace; give a trace FILE for a measured one`)
		}
		prev := *g
		prev.Stream++
		if int64(prevTokens)*int64(tr.Header.Layers)*int64(tr.Header.TopK) > trace.MaxSynthesize {
			return nil, nil, fmt.Errorf("--heat %s: too many tokens", f.heat)
		}
		pt, err := trace.Synthesize(prev, tr.Header.Layers, tr.Header.Experts, tr.Header.TopK, prevTokens)
		if err != nil {
			return nil, nil, err
		}
		heat = pt.Counts()
	default:
		ht, err := readTrace(f.heat, f.maxTokens)
		if err != nil {
			return nil, nil, fmt.Errorf("--heat: %w", err)
		}
		if ht.Header.Layers != tr.Header.Layers || ht.Header.Experts != tr.Header.Experts {
			return nil, nil, fmt.Errorf("--heat %s: %d layers × %d experts, the trace has %d × %d", f.heat, ht.Header.Layers, ht.Header.Experts, tr.Header.Layers, tr.Header.Experts)
		}
		heat = ht.Counts()
	}
	if f.save != "" {
		if err := writeTrace(f.save, tr); err != nil {
			return nil, nil, err
		}
	}
	return tr, heat, nil
}

// parsePrevious parses --heat previous[:N] (N tokens, default tokens).
func parsePrevious(v string, tokens int) (int, bool, error) {
	rest, ok := strings.CutPrefix(v, "previous")
	switch {
	case !ok:
		return 0, false, nil
	case rest == "":
		return tokens, true, nil
	case !strings.HasPrefix(rest, ":"):
		return 0, false, nil // a file name that starts with "previous"
	}
	n, err := strconv.Atoi(rest[1:])
	if err != nil || n < 1 {
		return 0, false, fmt.Errorf("--heat %s: want previous or previous:N, N tokens > 0", v)
	}
	return n, true, nil
}

func readTrace(path string, maxTokens int) (*trace.Trace, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	tr, err := trace.ReadAll(fh, maxTokens)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tr, nil
}

func writeTrace(path string, tr *trace.Trace) error {
	fh, err := createNew("--save-trace", path)
	if err != nil {
		return err
	}
	if _, err := tr.WriteTo(fh); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

func newSimCommand() *cobra.Command {
	var (
		tf                 simTraceFlags
		hw                 sim.Hardware
		expertBytes        int64
		ramGiB, ramRes     float64
		vramGiB, vramRes   float64
		name, part         string
		halfLife, prefetch float64
		hintPrecision      float64
		warmup             int
		warmStart, asJSON  bool
		exclusive          bool
		balance            bool
		deviceSlots        int
		measured           string
	)
	cmd := &cobra.Command{
		Use:   "sim --trace FILE | --synthetic zipf:s=S,reuse=P [flags]",
		Short: "Project seconds per token by replaying a routing trace through a model of the memory hierarchy",
		Long: `Sim replays a routing trace (recorded by the engine, or synthetic) through a
model of the streaming memory hierarchy — storage, a RAM tier, device slots —
on the hardware the flags describe, and prints the projected seconds per token
with every assumption it used. Its output is a PROJECTION (simulated), not a
measurement; the time model is in the documentation of package tier/sim.

The defaults describe Qwen3.5-122B-A10B (48 layers, 256 experts of 18 874 368
bytes, top-8) on a Gen4 NVMe (7 GB/s), a 16 GiB GPU and 64 GiB of RAM; a trace
records its model's layers and experts, and its expert size when tarfa run
--trace wrote it, and sim takes those from the trace; every
number is an assumption to replace with a measured one (BENCHMARKS.md,
"Simulator"). --vram-gib 0 models a machine without a device (experts on the
CPU). "tarfa sim policies" compares cache policies against Belady's optimum.

` + exitStatuses,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkSimHardware(hw); err != nil {
				return err
			}
			if expertBytes <= 0 {
				return fmt.Errorf("--expert-bytes %d: want positive", expertBytes)
			}
			if !policyKnown(name) || policy.NeedsRouting(name) {
				return fmt.Errorf("--policy %q: want one of %s (oracle and oracle-learn, measuring devices, are for tarfa sim policies)", name, strings.Join(simPolicies(), ", "))
			}
			pt, err := policy.ParsePartition(part)
			if err != nil {
				return fmt.Errorf("--partition: %w", err)
			}
			if !(prefetch >= 0 && prefetch <= 1) {
				return fmt.Errorf("--prefetch %v: want a fraction, 0 to 1", prefetch)
			}
			if !(hintPrecision >= 0 && hintPrecision <= 1) {
				return fmt.Errorf("--hint-precision %v: want a probability, 0 to 1", hintPrecision)
			}
			if hintPrecision > 0 && (vramGiB > 0 || prefetch == 0) {
				return fmt.Errorf("--hint-precision %v is of the predictor --prefetch stands for without a device: give --vram-gib 0 and --prefetch", hintPrecision)
			}
			if !(halfLife > 0) {
				return fmt.Errorf("--half-life-tokens %v: want positive", halfLife)
			}
			for _, g := range []struct {
				name string
				v    float64
			}{{"--ram-gib", ramGiB}, {"--ram-reserved-gib", ramRes}, {"--vram-gib", vramGiB}, {"--vram-reserved-gib", vramRes}} {
				if !(g.v >= 0 && g.v < 1<<20) {
					return fmt.Errorf("%s %v: want 0 to %d", g.name, g.v, 1<<20)
				}
			}
			if warmup < 0 {
				return fmt.Errorf("--warmup %d is negative", warmup)
			}
			tr, heat, err := tf.load(cmd)
			if err != nil {
				return err
			}
			h := tr.Header
			if expertBytes, err = simExpertBytes(h, expertBytes, cmd.Flags().Changed("expert-bytes")); err != nil {
				return err
			}
			var meas *measuredRun
			if measured != "" {
				if meas, err = readMeasured(measured, h); err != nil {
					return fmt.Errorf("--measured: %w", err)
				}
				// The run's own capacities, unless given.
				if d := meas.Levels.Device.Capacity; d > 0 && !cmd.Flags().Changed("device-slots") {
					deviceSlots = d
				}
			}
			n := h.Layers * h.Experts
			ram := min(sim.Slots(ramGiB, ramRes, expertBytes), n)
			if meas != nil && meas.Levels.RAM.Capacity > 0 && !cmd.Flags().Changed("ram-gib") && !cmd.Flags().Changed("ram-reserved-gib") {
				ram = min(meas.Levels.RAM.Capacity, n)
			}
			dev := 0
			if vramGiB > 0 {
				dev = min(sim.Slots(vramGiB, vramRes, expertBytes), n)
				if deviceSlots > 0 {
					dev = min(deviceSlots, n)
				}
			}
			need := h.TopK
			if pt == policy.PerLayer {
				need = h.TopK * h.Layers
			}
			if ram < need {
				return fmt.Errorf("--ram-gib %g less --ram-reserved-gib %g holds %d experts of %d bytes; the RAM tier needs at least %d (top-%d, %s)", ramGiB, ramRes, ram, expertBytes, need, h.TopK, pt)
			}
			if vramGiB > 0 && dev < need {
				return fmt.Errorf("--vram-gib %g less --vram-reserved-gib %g holds %d experts of %d bytes; device slots need at least %d (top-%d, %s); --vram-gib 0 models no device", vramGiB, vramRes, dev, expertBytes, need, h.TopK, pt)
			}
			if warmup >= tr.Tokens() {
				return fmt.Errorf("--warmup %d: the trace has %d tokens", warmup, tr.Tokens())
			}
			o := policy.Options{HalfLifeTokens: halfLife}
			if policy.NeedsHeat(name) && heat == nil {
				return fmt.Errorf("--policy %s needs --heat (the heat ledger)", name)
			}
			if policy.UsesHeat(name) {
				o.Heat = heat
			}
			cfg := sim.Config{Hardware: hw, ExpertBytes: expertBytes, RAMSlots: ram, DeviceSlots: dev, Policy: name,
				Partition: pt.String(), Options: o, Prefetch: prefetch, HintPrecision: hintPrecision, Warmup: warmup, Exclusive: exclusive, Balance: balance}
			// A run whose RAM-tier misses the page cache served, every one
			// (a repeat run with --direct auto), is simulated so: those
			// misses are hashed reads from the page cache, not admitted.
			if meas != nil && meas.Levels.PageCache.Uses > 0 && meas.Levels.Storage.Uses == 0 {
				cfg.PageCache = true
			}
			if warmStart {
				if heat == nil {
					return fmt.Errorf("--warm-start needs --heat (the heat ledger to fill the tiers from)")
				}
				cfg.Warm = heat
			}
			res, err := sim.Run(tr, cfg)
			if err != nil {
				return err
			}
			out := simOutput{Result: res, TraceStats: tr.Stats(), Assumptions: simAssumptions(tr, cfg, ramGiB, ramRes, vramGiB, vramRes, warmStart, tf.heat)}
			if meas != nil {
				out.Measured = &meas.Levels
				out.MeasuredFile = measured
				for i, a := range out.Assumptions {
					switch {
					case strings.HasPrefix(a, "RAM tier:") && ram == meas.Levels.RAM.Capacity:
						out.Assumptions[i] = fmt.Sprintf("RAM tier: %d experts (%.1f%% of all), the measured run's", ram, 100*float64(ram)/float64(n))
					case strings.HasPrefix(a, "device:") && dev == meas.Levels.Device.Capacity:
						out.Assumptions[i] = fmt.Sprintf("device: %d expert slots (%.1f%% of all), the measured run's; every expert computed on the device, %g µs per expert per token", dev, 100*float64(dev)/float64(n), hw.GPUExpertUS)
					}
				}
				if tps := meas.Timing.DecodeTokS; tps > 0 {
					out.MeasuredSecondsPerToken = 1 / tps
					out.SimOverMeasured = res.SecondsPerToken.Mean / out.MeasuredSecondsPerToken
				}
				out.Assumptions = append(out.Assumptions, "measured: the run's prefill is one Stream per layer for all its positions (an expert several prompt tokens route to is one use there), the trace one token at a time; decode steps are the same")
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			return printSim(cmd.OutOrStdout(), out)
		},
	}
	fs := cmd.Flags()
	tf.add(fs)
	fs.Int64Var(&expertBytes, "expert-bytes", defaultExpertBytes, "bytes of one routed expert (default: the trace's expert_bytes, else the 122B's)")
	fs.Float64Var(&hw.StorageGBps, "storage-gbps", 7, "storage read bandwidth, GB/s")
	fs.Float64Var(&hw.StorageLatencyUS, "storage-latency-us", 100, "storage latency per read request, µs")
	fs.IntVar(&hw.QueueDepth, "queue-depth", 4, "storage read requests in flight")
	fs.Float64Var(&hw.H2DGBps, "h2d-gbps", 25, "host-to-device copy bandwidth, GB/s")
	fs.Float64Var(&hw.HashGBpsPerCore, "hash-gbps-per-core", 2.59, "verification (BLAKE3) rate per core, GB/s")
	fs.IntVar(&hw.HashCores, "cores", 8, "cores hashing in parallel")
	fs.Float64Var(&hw.GPUExpertUS, "gpu-expert-us", 38, "one expert for one token on the device, µs")
	fs.Float64Var(&hw.CPUExpertUS, "cpu-expert-us", 400, "one expert for one token on the CPU, µs")
	fs.Float64Var(&hw.DenseMSPerLayer, "dense-ms-per-layer", 0.39, "non-expert work of one layer for one token, ms")
	fs.Float64Var(&hw.TokenMS, "token-ms", 3, "per-token work outside the layers (LM head, sampling), ms")
	fs.Float64Var(&ramGiB, "ram-gib", 64, "host RAM, GiB")
	fs.Float64Var(&ramRes, "ram-reserved-gib", 8, "host RAM not available to the RAM tier, GiB")
	fs.Float64Var(&vramGiB, "vram-gib", 16, "device memory, GiB (0: no device, experts on the CPU)")
	fs.Float64Var(&vramRes, "vram-reserved-gib", 11.5, "device memory not available to expert slots (dense weights, KV cache, workspace), GiB")
	fs.StringVar(&name, "policy", policy.Default, "cache policy of both tiers: "+strings.Join(simPolicies(), ", "))
	fs.StringVar(&part, "partition", "global", "capacity split: global or per-layer")
	fs.Float64Var(&halfLife, "half-life-tokens", policy.DefaultHalfLifeTokens, "aging half-life of lfu-decay, heat and predict, tokens")
	fs.Float64Var(&prefetch, "prefetch", 0, "prefetch, 0 to 1: with a device, the fraction of a layer's I/O issued during the previous layer; without one (--vram-gib 0), a predictor naming that fraction of the next layer's experts")
	fs.Float64Var(&hintPrecision, "hint-precision", 0, "without a device, the probability that --prefetch's predictor names an expert right (0: always, every hint read ahead); below 1 its hints are read ahead as the hierarchy decides the engine's (the read-ahead rule and its back-off)")
	fs.IntVar(&warmup, "warmup", 0, "tokens to leave out of the per-token figures")
	fs.BoolVar(&warmStart, "warm-start", false, "fill both tiers from the --heat ledger before the first token")
	fs.BoolVar(&exclusive, "exclusive", false, "the device slots and the RAM tier hold different experts (tier --exclusive); default inclusive")
	fs.BoolVar(&balance, "balance", false, "the balance placement (tarfa run --placement balance): each layer's RAM-tier hits below the device split between the host's compute (--cpu-expert-us) and the copies so both finish together")
	fs.IntVar(&deviceSlots, "device-slots", 0, "device slots, overriding what --vram-gib less --vram-reserved-gib holds (e.g. the device_slots a tarfa bench decode measured)")
	fs.StringVar(&measured, "measured", "", "the `tarfa run --json` output of the run that recorded --trace: its measured hits per level are printed beside the simulated ones, and its device slots and RAM-tier capacity are simulated unless --device-slots or --ram-gib are given, and the page cache serving the RAM tier's misses if it served all of them in the run")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(newSimPoliciesCommand())
	return cmd
}

func policyKnown(name string) bool { return slices.Contains(policy.Names(), name) }

// simBound is an online bound beside Belady's hit rate.
type simBound struct {
	sim.BoundRow
	Belady   float64 `json:"belady_hit_rate"`
	OfBelady float64 `json:"of_belady"`
}

// simPolicies are the policies tarfa sim projects with: all but oracle and
// oracle-learn, which only tarfa sim policies runs.
func simPolicies() []string {
	return slices.DeleteFunc(policy.Names(), policy.NeedsRouting)
}

func checkSimHardware(h sim.Hardware) error {
	for _, f := range []struct {
		flag     string
		v        float64
		positive bool
	}{
		{"--storage-gbps", h.StorageGBps, true}, {"--storage-latency-us", h.StorageLatencyUS, false},
		{"--queue-depth", float64(h.QueueDepth), true}, {"--h2d-gbps", h.H2DGBps, true},
		{"--hash-gbps-per-core", h.HashGBpsPerCore, true}, {"--cores", float64(h.HashCores), true},
		{"--gpu-expert-us", h.GPUExpertUS, false}, {"--cpu-expert-us", h.CPUExpertUS, false},
		{"--dense-ms-per-layer", h.DenseMSPerLayer, false}, {"--token-ms", h.TokenMS, false},
	} {
		if !(f.v >= 0 && f.v < 1e12) || (f.positive && f.v == 0) {
			want := "non-negative"
			if f.positive {
				want = "positive"
			}
			return fmt.Errorf("%s %v: want a %s number", f.flag, f.v, want)
		}
	}
	return nil
}

// simOutput is tarfa sim's result (--json prints it).
type simOutput struct {
	Result      *sim.Result `json:"result"`
	TraceStats  trace.Stats `json:"trace_stats"`
	Assumptions []string    `json:"assumptions"`
	// Measured are the levels of the run --measured names (what its
	// hierarchy counted on the trace replayed here).
	Measured     *expertLevels `json:"measured,omitempty"`
	MeasuredFile string        `json:"measured_file,omitempty"`
	// MeasuredSecondsPerToken is the run's decode seconds per token (1 ÷
	// its decode tokens per second) and SimOverMeasured the simulated mean
	// over it: the calibration check of the time model on this machine
	// (with --warmup the prompt's tokens, both count decode steps only).
	MeasuredSecondsPerToken float64 `json:"measured_decode_seconds_per_token,omitempty"`
	SimOverMeasured         float64 `json:"simulated_over_measured,omitempty"`
}

// measuredRun is what --measured reads of a run's JSON.
type measuredRun struct {
	ModelRoot string       `json:"model_root"`
	Levels    expertLevels `json:"expert_levels"`
	Timing    struct {
		DecodeTokS float64 `json:"decode_tokens_per_second"`
	} `json:"timing"`
}

// readMeasured reads a `tarfa run --json` output for the trace with
// header h: the same model, and its hierarchy's levels.
func readMeasured(path string, h trace.Header) (*measuredRun, error) {
	b, err := jnf.ReadFileLimit(path, 64<<20, "run output")
	if err != nil {
		return nil, err
	}
	if err := jnf.CheckJSON(b); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var probe struct {
		ModelRoot string          `json:"model_root"`
		Levels    json.RawMessage `json:"expert_levels"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("%s: not a tarfa run --json output: %v", path, err)
	}
	if len(probe.Levels) == 0 || string(probe.Levels) == "null" {
		return nil, fmt.Errorf("%s has no expert_levels: it is not the --json output of a tarfa run with an expert hierarchy", path)
	}
	var m measuredRun
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if h.Source != trace.Measured || h.ModelRoot == "" {
		return nil, fmt.Errorf("the trace is %s, not a measured run's: it has no run to compare with", h.Label())
	}
	if strings.TrimPrefix(m.ModelRoot, "sha256:") != strings.TrimPrefix(h.ModelRoot, "sha256:") {
		return nil, fmt.Errorf("%s is a run of model %s, the trace one of model %s", path, m.ModelRoot, h.ModelRoot)
	}
	return &m, nil
}

func simAssumptions(tr *trace.Trace, c sim.Config, ram, ramRes, vram, vramRes float64, warm bool, heat string) []string {
	h, hw := tr.Header, c.Hardware
	gb := func(b float64) string { return strconv.FormatFloat(b/1e9, 'f', 2, 64) + " GB" }
	a := []string{
		"routing: " + h.Label() + fmt.Sprintf(", %d tokens", tr.Tokens()),
		fmt.Sprintf("model: %d MoE layers × %d experts, top-%d, %d bytes per expert (%s of experts per token)", h.Layers, h.Experts, h.TopK, c.ExpertBytes, gb(float64(h.Layers*h.TopK)*float64(c.ExpertBytes))),
		fmt.Sprintf("storage: %g GB/s, %g µs per read request, %d requests in flight", hw.StorageGBps, hw.StorageLatencyUS, hw.QueueDepth),
		fmt.Sprintf("hashing: %g GB/s per core on %d cores", hw.HashGBpsPerCore, hw.HashCores),
		fmt.Sprintf("RAM tier: %g GiB less %g GiB reserved = %d experts (%.1f%% of all)", ram, ramRes, c.RAMSlots, 100*float64(c.RAMSlots)/float64(h.Layers*h.Experts)),
	}
	if c.DeviceSlots > 0 {
		a = append(a,
			fmt.Sprintf("device: %g GiB less %g GiB reserved = %d expert slots (%.1f%% of all); every expert computed on the device, %g µs per expert per token", vram, vramRes, c.DeviceSlots, 100*float64(c.DeviceSlots)/float64(h.Layers*h.Experts), hw.GPUExpertUS),
			fmt.Sprintf("host-to-device copy: %g GB/s", hw.H2DGBps))
		if c.Balance {
			a = append(a, fmt.Sprintf("placement balance: each layer's RAM-tier hits split between the copies and the host's compute (%g µs per expert per token) so both finish together", hw.CPUExpertUS))
		}
	} else {
		a = append(a, fmt.Sprintf("no device: every expert computed on the CPU, %g µs per expert per token", hw.CPUExpertUS))
	}
	a = append(a,
		fmt.Sprintf("non-expert work: %g ms per layer per token, %g ms per token outside the layers", hw.DenseMSPerLayer, hw.TokenMS),
		fmt.Sprintf("policy: %s, %s capacity, both tiers", c.Policy, c.Partition),
		prefetchAssumption(c))
	if warm {
		a = append(a, "start: both tiers filled from the heat ledger ("+heat+")")
	} else {
		a = append(a, "start: cold (empty tiers)")
	}
	if c.Warmup > 0 {
		a = append(a, fmt.Sprintf("the first %d tokens are left out of the per-token figures", c.Warmup))
	}
	return a
}

func prefetchAssumption(c sim.Config) string {
	switch {
	case c.DeviceSlots > 0 || c.Prefetch == 0:
		return fmt.Sprintf("prefetch: %g of each layer's I/O issued during the previous layer", c.Prefetch)
	case c.HintPrecision > 0 && c.HintPrecision < 1:
		return fmt.Sprintf("prefetch: a predictor naming %g of the next layer's experts, each right with probability %g; read ahead as the hierarchy decides (the read-ahead rule and its back-off)", c.Prefetch, c.HintPrecision)
	}
	return fmt.Sprintf("prefetch: a predictor naming %g of the next layer's experts, always right, every one read ahead", c.Prefetch)
}

func printSim(w io.Writer, o simOutput) error {
	r, s := o.Result, o.TraceStats
	fmt.Fprintf(w, "%s — a model's prediction, not a measurement\n\n", sim.Label)
	fmt.Fprintln(w, "Assumptions:")
	for _, a := range o.Assumptions {
		fmt.Fprintln(w, "  -", a)
	}
	fmt.Fprintf(w, "  - locality of the trace: %.1f%% of a layer's experts reused from the previous token, hottest expert %.1f%% of selections, 90%% of selections in %.0f%% of experts, Zipf fit s = %.2f\n\n",
		100*s.Reuse, 100*s.TopShare, 100*s.Coverage90, s.ZipfS)
	ms := func(x float64) string { return strconv.FormatFloat(x*1e3, 'f', 1, 64) }
	rows := [][]string{
		{"seconds per token (mean / p50 / p99)", fmt.Sprintf("%.3f / %.3f / %.3f", r.SecondsPerToken.Mean, r.SecondsPerToken.P50, r.SecondsPerToken.P99)},
		{"tokens per second", fmt.Sprintf("%.2f", r.TokensPerSecond)},
		{"expert uses from device / RAM / storage", fmt.Sprintf("%.1f%% / %.1f%% / %.1f%%", 100*r.HitDevice, 100*r.HitRAM, 100*r.FromStorage)},
		{"hits of each level's uses (tier stats' device, ram, storage)", levelRates(r.Levels)},
	}
	if m := o.Measured; m != nil {
		rows = append(rows,
			[]string{"measured by the run (" + o.MeasuredFile + ")", measuredRates(m)},
			[]string{"simulated − measured hit rate", levelDiff(r, m)})
		if o.MeasuredSecondsPerToken > 0 {
			rows = append(rows,
				[]string{"measured decode seconds per token (1 ÷ decode tok/s)", fmt.Sprintf("%.3f", o.MeasuredSecondsPerToken)},
				[]string{"simulated mean ÷ measured (--warmup = prompt tokens: decode steps only)", fmt.Sprintf("%.2f", o.SimOverMeasured)})
		}
	}
	rows = append(rows, [][]string{
		{"storage bytes per token", reports.Bytes(int64(r.StorageBytesPerToken))},
		{"host-to-device bytes per token", reports.Bytes(int64(r.CopyBytesPerToken))},
		{"busy ms per token: dense / read / hash / copy / compute / fill", fmt.Sprintf("%s / %s / %s / %s / %s / %s", ms(r.StagesPerToken.Dense), ms(r.StagesPerToken.Read), ms(r.StagesPerToken.Hash), ms(r.StagesPerToken.Copy), ms(r.StagesPerToken.Compute), ms(r.StagesPerToken.Fill))},
		{"I/O hidden by prefetch, ms per token", ms(r.StagesPerToken.Hidden)},
	}...)
	if c := r.Counters; c != nil && (c.PrefetchIssued > 0 || c.PrefetchSkipped > 0 || c.PrefetchBackedOff > 0) {
		rows = append(rows, []string{"reads ahead: issued / used / unused / late / probes; hinted not read: skipped / held back",
			fmt.Sprintf("%d / %d / %d / %d / %d; %d / %d", c.PrefetchIssued, c.PrefetchUseful, c.PrefetchUnused, c.PrefetchLate, c.PrefetchProbes, c.PrefetchSkipped, c.PrefetchBackedOff)})
	}
	rows = append(rows, [][]string{
		{"bound by", r.Bound},
		{"tokens counted (warm-up: seconds)", fmt.Sprintf("%d (%d: %.2f s)", r.Tokens, r.Warmup, r.WarmupSeconds)},
	}...)
	if r.WarmFillBytes > 0 {
		rows = append(rows, []string{"warm start: fill before the first token", fmt.Sprintf("%s, %.1f s", reports.Bytes(r.WarmFillBytes), r.WarmFillSeconds)})
	}
	return reports.Table(w, []string{sim.Label, "value"}, rows)
}

func newSimPoliciesCommand() *cobra.Command {
	var (
		tf                       simTraceFlags
		capacities, parts, names string
		halfLife                 float64
		skip                     int
		asJSON                   bool
	)
	cmd := &cobra.Command{
		Use:   "policies --trace FILE | --synthetic zipf:s=S,reuse=P [flags]",
		Short: "Hit rate of every cache policy against Belady's optimum on one trace",
		Long: `Policies replays the trace through one tier of each capacity (a percentage
of all experts) and partitioning with every policy, and prints each hit rate
beside Belady's (offline MIN: the best any policy can do on this trace, this
capacity and partitioning) and their ratio. belady-global is Belady with one
global capacity: the bound for every partitioning. Hits are counted after
--warmup tokens. With a heat ledger (--heat; for a synthetic trace the default
is "previous", another run of the same synthetic model) heat also runs as
heat+ledger, and static runs (it needs one). On a synthetic trace oracle
runs too: an online policy given the trace's generator (its weights, reuse,
shift and popularity order), which evicts the expert least likely to be
used at its layer's next step — a measuring device for what an online
policy can reach, not a policy for a real model; a measured trace has no
generator. oracle-learn runs there too: the oracle told the generator's
structure (top-k, reuse, the weights by rank, when the order shifts) but
not which expert has which rank, which it estimates from the routing since
the last shift — a reference for a policy that knows all but what it must
learn from the data, not a bound. With either comes the online bound: the
most hits any online policy can expect on the trace, even one that knows
the generator (package tier/sim, OnlineBound).

` + exitStatuses,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var fracs []float64
			for _, c := range strings.Split(capacities, ",") {
				v, err := strconv.ParseFloat(strings.TrimSpace(c), 64)
				if err != nil || !(v > 0 && v <= 100) {
					return fmt.Errorf("--capacities: %q: want percentages in (0, 100]", c)
				}
				fracs = append(fracs, v/100)
			}
			var pts []policy.Partition
			for _, p := range strings.Split(parts, ",") {
				pt, err := policy.ParsePartition(strings.TrimSpace(p))
				if err != nil {
					return fmt.Errorf("--partitions: %w", err)
				}
				pts = append(pts, pt)
			}
			if !(halfLife > 0) {
				return fmt.Errorf("--half-life-tokens %v: want positive", halfLife)
			}
			list := policy.Names()
			if names != "all" {
				list = strings.Split(names, ",")
				for _, n := range list {
					if !policyKnown(n) {
						return fmt.Errorf("--policies: %q: want all or some of %s", n, strings.Join(policy.Names(), ", "))
					}
				}
			}
			if tf.heat == "" && tf.synthetic != "" {
				tf.heat = "previous"
			}
			tr, heat, err := tf.load(cmd)
			if err != nil {
				return err
			}
			h := tr.Header
			// The defaults fit the 122B's long traces; on a short trace or
			// a small model they adapt, and say so.
			stderr := cmd.ErrOrStderr()
			if f := cmd.Flags(); !f.Changed("warmup") && 2*skip > tr.Tokens() {
				fmt.Fprintf(stderr, "note: the default --warmup %d is more than half of the trace's %d tokens: warming up %d (give --warmup N to choose)\n", skip, tr.Tokens(), tr.Tokens()/4)
				skip = tr.Tokens() / 4
			}
			if !cmd.Flags().Changed("capacities") {
				fracs = fitCapacities(stderr, h, fracs, pts)
			}
			if skip < 0 || skip >= tr.Tokens() {
				return fmt.Errorf("--warmup %d: want 0 to %d (the trace has %d tokens)", skip, tr.Tokens()-1, tr.Tokens())
			}
			for _, pt := range pts {
				for _, f := range fracs {
					n := int(float64(h.Layers*h.Experts)*f + 0.5)
					if need := map[policy.Partition]int{policy.Global: h.TopK, policy.PerLayer: h.TopK * h.Layers}[pt]; n < need {
						return fmt.Errorf("--capacities %g%% is %d experts; %s needs at least %d (top-%d)", 100*f, n, pt, need, h.TopK)
					}
				}
			}
			base := policy.Options{HalfLifeTokens: halfLife}
			var vs []sim.Variant
			var routing *policy.Routing
			for _, n := range list {
				switch {
				case policy.NeedsRouting(n):
					if tr.Header.Source != trace.Synthetic && names == "all" {
						continue
					}
					r, err := sim.RoutingOf(tr)
					if err != nil {
						return fmt.Errorf("--policies %s: %w", n, err)
					}
					o := base
					o.Routing, routing = r, r
					vs = append(vs, sim.Variant{Label: n, Policy: n, Options: o})
				case policy.NeedsHeat(n) && heat == nil:
					if names != "all" {
						return fmt.Errorf("--policies %s needs --heat (the heat ledger)", n)
					}
				case policy.UsesHeat(n) && heat != nil:
					o := base
					o.Heat = heat
					if !policy.NeedsHeat(n) {
						vs = append(vs, sim.Variant{Label: n, Policy: n, Options: base})
					}
					vs = append(vs, sim.Variant{Label: n + "+ledger", Policy: n, Options: o})
				default:
					vs = append(vs, sim.Variant{Label: n, Policy: n, Options: base})
				}
			}
			rows, err := sim.Compare(tr, fracs, pts, vs, skip)
			if err != nil {
				return err
			}
			var bounds []simBound
			if routing != nil {
				bs, err := sim.OnlineBound(tr, routing, fracs, pts, skip)
				if err != nil {
					return err
				}
				for _, b := range bs {
					sb := simBound{BoundRow: b}
					for _, r := range rows {
						if r.Partition == b.Partition && r.Capacity == b.Capacity && r.Belady > 0 {
							sb.Belady, sb.OfBelady = r.Belady, b.HitRate/r.Belady
						}
					}
					bounds = append(bounds, sb)
				}
			}
			out := struct {
				Trace  string           `json:"trace"`
				Stats  trace.Stats      `json:"trace_stats"`
				Heat   string           `json:"heat,omitempty"`
				Rows   []sim.CompareRow `json:"rows"`
				Bounds []simBound       `json:"online_bounds,omitempty"`
			}{h.Label(), tr.Stats(), tf.heat, rows, bounds}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "trace: %s, %d tokens (reuse %.1f%%, hottest expert %.1f%%, 90%% in %.0f%% of experts)\n",
				out.Trace, tr.Tokens(), 100*out.Stats.Reuse, 100*out.Stats.TopShare, 100*out.Stats.Coverage90)
			var tab [][]string
			for _, r := range rows {
				tab = append(tab, []string{r.Partition, fmt.Sprintf("%.3g%%", 100*r.Fraction), strconv.Itoa(r.Capacity), r.Label,
					fmt.Sprintf("%.3f", r.HitRate), fmt.Sprintf("%.3f", r.Belady), fmt.Sprintf("%.3f", r.OfBelady), fmt.Sprintf("%.3f", r.BeladyGlobal)})
			}
			if err := reports.Table(w, []string{"partition", "capacity", "experts", "policy", "hit rate", "belady", "× belady", "belady-global"}, tab); err != nil || bounds == nil {
				return err
			}
			fmt.Fprintln(w, "\nonline bound: no online policy, even one that knows the generator, can expect more hits (sim.OnlineBound)")
			tab = nil
			for _, b := range bounds {
				tab = append(tab, []string{b.Partition, fmt.Sprintf("%.3g%%", 100*b.Fraction), strconv.Itoa(b.Capacity),
					fmt.Sprintf("%.3f", b.HitRate), fmt.Sprintf("%.3f", b.Belady), fmt.Sprintf("%.3f", b.OfBelady)})
			}
			return reports.Table(w, []string{"partition", "capacity", "experts", "online bound", "belady", "× belady"}, tab)
		},
	}
	fs := cmd.Flags()
	tf.add(fs)
	fs.StringVar(&capacities, "capacities", "10,25,40,60", "capacities, percent of all experts")
	fs.StringVar(&parts, "partitions", "global,per-layer", "partitionings: global, per-layer")
	fs.StringVar(&names, "policies", "all", "policies to compare, comma-separated, or all")
	fs.IntVar(&skip, "warmup", 100, "tokens to run before counting hits (the cold start)")
	fs.Float64Var(&halfLife, "half-life-tokens", policy.DefaultHalfLifeTokens, "aging half-life of lfu-decay, heat and predict, tokens")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// capacityNeed is the fewest experts a tier partitioned as pt can hold:
// one token's top-k, in every layer for per-layer.
func capacityNeed(h trace.Header, pt policy.Partition) int {
	if pt == policy.PerLayer {
		return h.TopK * h.Layers
	}
	return h.TopK
}

// fitCapacities leaves out of the default capacities those too small for
// one of the partitionings on this trace's model (a small model: 10% of 32
// experts is 3, per-layer needs 8), saying so on w; when none is left it
// takes the smallest that fits.
func fitCapacities(w io.Writer, h trace.Header, fracs []float64, pts []policy.Partition) []float64 {
	all := h.Layers * h.Experts
	need := 0
	for _, pt := range pts {
		need = max(need, capacityNeed(h, pt))
	}
	var kept, dropped []string
	var out []float64
	for _, f := range fracs {
		if int(float64(all)*f+0.5) >= need {
			out = append(out, f)
			kept = append(kept, fmt.Sprintf("%g%%", 100*f))
		} else {
			dropped = append(dropped, fmt.Sprintf("%g%%", 100*f))
		}
	}
	if len(dropped) == 0 {
		return fracs
	}
	if len(out) == 0 {
		f := float64(need) / float64(all)
		out, kept = []float64{f}, []string{fmt.Sprintf("%.3g%%", 100*f)}
	}
	fmt.Fprintf(w, "note: of the default --capacities, %s hold fewer than the %d experts a tier needs here (top-%d, %d layers × %d experts): comparing %s (give --capacities to choose)\n",
		strings.Join(dropped, ", "), need, h.TopK, h.Layers, h.Experts, strings.Join(kept, ", "))
	return out
}

// The model the sim defaults describe: Qwen3.5-122B-A10B.
const (
	defaultExpertBytes  = 18874368
	defaultModelLayers  = 48
	defaultModelExperts = 256
	defaultModelTopK    = 8
)

// simExpertBytes is the expert size to project with: --expert-bytes when
// given; else the one the trace records; else the 122B's, for a trace of
// the 122B's shape (a synthetic one by default). A measured trace of
// another model with no size recorded is refused: its layers and experts
// with the 122B's expert size would project neither model.
func simExpertBytes(h trace.Header, flag int64, changed bool) (int64, error) {
	switch {
	case changed:
		return flag, nil
	case h.ExpertBytes > 0:
		return h.ExpertBytes, nil
	case h.Source == trace.Measured && (h.Layers != defaultModelLayers || h.Experts != defaultModelExperts || h.TopK != defaultModelTopK):
		return 0, fmt.Errorf("the trace (%d MoE layers × %d experts, top-%d) records no expert size and is not of the 122B the default --expert-bytes %d describes: give --expert-bytes (the bytes per expert of tarfa inspect), or record the trace again with this tarfa (it writes expert_bytes)",
			h.Layers, h.Experts, h.TopK, int64(defaultExpertBytes))
	}
	return flag, nil
}

// measuredRates is levelRates for a run's measured levels.
func measuredRates(m *expertLevels) string {
	rate := func(l tier.Level) string {
		if l.Uses == 0 {
			return "0 uses"
		}
		return fmt.Sprintf("%d of %d (%.1f%%)", l.Hits, l.Uses, 100*l.HitRate())
	}
	return fmt.Sprintf("device %s, RAM %s, storage %d reads", rate(m.Device), rate(m.RAM), m.Storage.Uses)
}

// levelDiff is the simulated hit rate less the measured one, per level, in
// percentage points.
func levelDiff(r *sim.Result, m *expertLevels) string {
	pp := func(sim float64, ml tier.Level) string {
		if ml.Uses == 0 {
			return "-"
		}
		return fmt.Sprintf("%+.1f points", 100*(sim-ml.HitRate()))
	}
	l := r.Levels
	if l == nil { // no device: every use is the RAM tier's
		return fmt.Sprintf("device -, RAM %s", pp(r.HitRAM, m.RAM))
	}
	rate := func(c sim.LevelCount) float64 { return float64(c.Hits) / float64(max(c.Uses, 1)) }
	return fmt.Sprintf("device %s, RAM %s", pp(rate(l.Device), m.Device), pp(rate(l.RAM), m.RAM))
}

// levelRates is the per-level uses and hits, as tier.Stats counts them
// (Device, RAM), for a comparison with a measured run's.
func levelRates(l *sim.Levels) string {
	if l == nil {
		return "no device: see the RAM tier's counters"
	}
	rate := func(c sim.LevelCount) string {
		if c.Uses == 0 {
			return "0 uses"
		}
		return fmt.Sprintf("%d of %d (%.1f%%)", c.Hits, c.Uses, 100*float64(c.Hits)/float64(c.Uses))
	}
	return fmt.Sprintf("device %s, RAM %s, storage %d reads", rate(l.Device), rate(l.RAM), l.Storage.Uses)
}
