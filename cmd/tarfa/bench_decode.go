package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/tier/policy"
	"github.com/tarfa-ai/tarfa/validation/decodebench"
)

func init() { benchSubcommands = append(benchSubcommands, newBenchDecodeCommand) }

type benchDecodeOptions struct {
	threads, readers int
	fractions        []float64
	policy           string
	partition        string
	prefetch         bool
	devPrefetch      string
	decodeOnly       bool
	direct           string
	decode, repeat   int
	ledger, noDrop   bool
	ledgerPairs      int
	asJSON           bool
	backends, vram   []string
	placement        []string
	pinSlots         bool
	deviceVerify     bool
}

func newBenchDecodeCommand() *cobra.Command {
	var o benchDecodeOptions
	cmd := &cobra.Command{
		Use:   "decode [DIR]",
		Short: "decode through the streaming hierarchy next to the storage bound, the verified-read bandwidth next to the raw read, the ledger's cost",
		Long: `Bench decode measures, in --repeat interleaved rounds (each figure next to its
baseline, the page cache dropped before every storage figure; it needs root for
that, and says so when it cannot):

  raw        every routed expert record read with O_DIRECT, --readers in flight
  verified   the same records through the hierarchy: read, BLAKE3 against the
             manifest, delivered (its median ÷ raw's: the issue's target ≥ 0.9)
  hash       BLAKE3 of expert records in memory on one core
  decode     for each --ram-fraction of the routed experts as the RAM budget,
             cold (empty RAM tier) and warm (what one earlier generation of the
             same prompt left): seconds per decoded token, bytes read from
             storage per token, and the storage bound — those bytes ÷ raw's
             bandwidth of the same run
  ledger     (--ledger) decode with every routed expert resident, with and
             without the session ledger, alternated (--ledger-pairs of each
             per round; the order swaps on odd rounds)

The decodes run on every --backend (cuda under every --vram-budget), each next
to the others in every round; for each, per decoded token, the backend's and the
engine's counters: bytes copied to the device and their device time, kernel
time and GPU busy (kernel time ÷ wall time; CUDA events), the experts computed
on the device (resident or streamed) and on the host CPU, the hashers and the
bytes they verified.

Then it calibrates the simulator (tier/sim) on raw, hash and the resident decodes
and predicts every decode from its own measured routing trace (target: within 15%).
Every generation's logits are compared bit for bit with the first one's.

Without DIR the embedded default model is used; for real Qwen3.5-122B-A10B layer
shapes convert a 'tarfa synth --arch qwen3_5_moe --preset real --layers N' checkpoint.

Exit statuses: 0 ok and bit-identical, 1 error, 3 logits differ between runs.`,
		Args: cobra.MaximumNArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			for _, c := range []struct {
				flag      string
				v, lo, hi int
			}{
				{"threads", o.threads, 0, maxBenchThreads},
				{"readers", o.readers, 1, maxReaders},
				{"decode-tokens", o.decode, 2, maxBenchTokens},
				{"repeat", o.repeat, 1, maxBenchRepeat},
				{"ledger-pairs", o.ledgerPairs, 1, 100},
			} {
				if err := checkRange(c.flag, c.v, c.lo, c.hi); err != nil {
					return err
				}
			}
			if len(o.fractions) == 0 {
				return fmt.Errorf("--ram-fraction: give at least one fraction")
			}
			for _, f := range o.fractions {
				if !(f > 0 && f <= 1) {
					return fmt.Errorf("--ram-fraction %v: want more than 0, at most 1", f)
				}
			}
			if _, err := policy.ParsePartition(o.partition); err != nil {
				return fmt.Errorf("--partition %q: want global or per-layer", o.partition)
			}
			if !slicesContains(onlinePolicies(), o.policy) {
				return fmt.Errorf("--policy %q: want one of %s", o.policy, strings.Join(onlinePolicies(), ", "))
			}
			if _, err := directMode(o.direct); err != nil {
				return err
			}
			_, err := o.backendConfigs()
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := modelDir(cmd, args)
			if err != nil {
				return err
			}
			part, _ := policy.ParsePartition(o.partition)
			direct, _ := directMode(o.direct)
			backends, _ := o.backendConfigs()
			update, finish := itemProgress(cmd.ErrOrStderr(), "bench decode (figures)")
			res, err := decodebench.Run(cmd.Context(), dir, decodebench.Options{Threads: o.threads, Readers: o.readers,
				RAMFractions: o.fractions, Policy: o.policy, Partition: part, Prefetch: o.prefetch, DecodeOnly: o.decodeOnly, Direct: direct,
				DecodeTokens: o.decode, Repeat: o.repeat, Ledger: o.ledger, LedgerPairs: o.ledgerPairs, NoDrop: o.noDrop, Progress: update,
				Backends: backends})
			finish()
			if err != nil {
				return err
			}
			if o.asJSON {
				if err := json.NewEncoder(cmd.OutOrStdout()).Encode(res); err != nil {
					return err
				}
			} else if err := printBenchDecode(cmd.OutOrStdout(), res); err != nil {
				return err
			}
			if !res.Identical {
				return failVerification(fmt.Errorf("logits differ between the generations of bench decode (the first: %s)", res.Digest))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.threads, "threads", 0, fmt.Sprintf("engine goroutines per operation, 0 (all cores) to %d", maxBenchThreads))
	f.IntVar(&o.readers, "readers", tier.DefaultReaders, fmt.Sprintf("reads in flight, raw and verified alike, 1 to %d", maxReaders))
	f.Float64SliceVar(&o.fractions, "ram-fraction", []float64{0.25}, "RAM-tier budgets, as fractions of the routed experts' bytes")
	f.StringVar(&o.policy, "policy", policy.Default, "RAM-tier policy: "+strings.Join(onlinePolicies(), ", "))
	f.StringVar(&o.partition, "partition", "global", "RAM-tier capacity: global or per-layer")
	f.BoolVar(&o.prefetch, "prefetch", true, "prefetch the experts the next layer's router predicts")
	f.StringVar(&o.devPrefetch, "device-prefetch", "off", "with a device level, copy the predicted experts the RAM tier holds into device slots at the end of each layer (tier.Options.DevicePrefetch): off, on (the flag alone), or both: each device backend with and without it, next to each other in every round")
	f.Lookup("device-prefetch").NoOptDefVal = "on"
	f.BoolVar(&o.decodeOnly, "decode-only", false, "measure only the decodes (and the ledger): no raw, verified or hash figures, so no storage bound and no prediction (a large model's read figures take minutes a round)")
	f.StringVar(&o.direct, "direct", "auto", "O_DIRECT reads: auto, on, off")
	f.IntVar(&o.decode, "decode-tokens", 16, "tokens generated per timed generation (the prompt is one token)")
	f.IntVar(&o.repeat, "repeat", 5, fmt.Sprintf("rounds (1 to %d)", maxBenchRepeat))
	f.BoolVar(&o.ledger, "ledger", true, "measure the session ledger's cost (keeps every routed expert in RAM for it)")
	f.IntVar(&o.ledgerPairs, "ledger-pairs", 1, "generations with and without the ledger per round, alternated (1 to 100)")
	f.BoolVar(&o.noDrop, "no-drop", false, "do not drop the page cache (storage figures then come from memory, and say so)")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	f.StringSliceVar(&o.backends, "backend", []string{"cpu"}, "backends the decodes run on, each next to the others in every round: "+strings.Join(engine.Backends, ", ")+" (the raw, verified and hash figures use none)")
	f.StringSliceVar(&o.vram, "vram-budget", nil, "device-memory budgets of the cuda backend, e.g. 16GiB,12GiB: its decodes run under each (default: the whole device)")
	f.StringSliceVar(&o.placement, "placement", []string{"auto"}, "where the cuda backend computes routed experts not resident on the device: "+strings.Join(engine.Placements, ", ")+"; several (e.g. auto,balance): each device backend under each, next to each other in every round")
	f.BoolVar(&o.deviceVerify, "device-verify", true, "let a device backend hash every routed expert it copies into device memory again there, against its digest (see tarfa run --help)")
	f.BoolVar(&o.pinSlots, "pin-slots", true, "let a device backend pin the hierarchy's staging buffers and its RAM tier's (experts copied to the device from where they were read or lie, no staging copy), as tarfa run does; =false measures the staging copy")
	return cmd
}

// backendConfigs checks --backend, --vram-budget and --placement as the
// generating commands do (tierFlags) and returns the backends: each cpu
// once, each other backend under every --vram-budget.
func (o *benchDecodeOptions) backendConfigs() ([]decodebench.Backend, error) {
	if len(o.backends) == 0 {
		return nil, fmt.Errorf("--backend: give at least one backend")
	}
	vram := o.vram
	if len(vram) == 0 {
		vram = []string{""}
	}
	prefetch, err := devicePrefetchVariants(o.devPrefetch)
	if err != nil {
		return nil, err
	}
	if len(o.placement) == 0 {
		return nil, fmt.Errorf("--placement: give at least one placement")
	}
	var out []decodebench.Backend
	seen := map[string]bool{}
	device := false
	for _, name := range o.backends {
		budgets := vram
		if name == "cpu" {
			budgets = []string{""}
		} else {
			device = true
		}
		pls, pfs := o.placement, prefetch
		if name == "cpu" {
			pls, pfs = pls[:1], []bool{false} // one side, no device level
		}
		for _, v := range budgets {
			for _, pl := range pls {
				t := tierFlags{backend: name, vram: v, placement: pl, ram: "auto", device: "auto", policy: policy.Default,
					partition: "global", direct: "auto", scrub: tier.DefaultScrub.String()}
				if _, err := t.options(); err != nil {
					return nil, err
				}
				for _, pf := range pfs {
					c := decodebench.Backend{Name: name, VRAMBudget: t.vramBytes, Placement: t.place, PinSlots: o.pinSlots && name != "cpu",
						VerifyCopies: o.deviceVerify && name != "cpu", DevicePrefetch: pf}
					if seen[c.Label()] {
						return nil, fmt.Errorf("--backend %s, --vram-budget %q, --placement %s: given twice", name, v, pl)
					}
					seen[c.Label()] = true
					out = append(out, c)
				}
			}
		}
	}
	if len(o.vram) > 0 && !device {
		return nil, fmt.Errorf("--vram-budget %s: a device-memory budget needs --backend cuda", strings.Join(o.vram, ","))
	}
	return out, nil
}

// devicePrefetchVariants are the DevicePrefetch settings each device
// backend of bench decode runs under, for --device-prefetch's value.
func devicePrefetchVariants(v string) ([]bool, error) {
	switch v {
	case "off":
		return []bool{false}, nil
	case "on":
		return []bool{true}, nil
	case "both":
		return []bool{false, true}, nil
	}
	return nil, fmt.Errorf("--device-prefetch %q: want off, on or both", v)
}

func slicesContains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

func directMode(s string) (tier.DirectMode, error) {
	switch s {
	case "auto":
		return tier.DirectAuto, nil
	case "on":
		return tier.DirectOn, nil
	case "off":
		return tier.DirectOff, nil
	}
	return 0, fmt.Errorf("--direct %q: want auto, on or off", s)
}

func printBenchDecode(w io.Writer, res *decodebench.Result) error {
	printHost(w, res.Host, res.LoadBefore, res.LoadAfter)
	cache := "page cache dropped before every storage figure"
	if !res.CacheDropped {
		cache = "PAGE CACHE NOT DROPPED: " + res.CacheNote
	}
	fmt.Fprintf(w, "method: %d interleaved rounds; %s; %d MoE layers × %d experts of %s (%s routed), top-k %d; %d threads, %d readers; policy %s, prefetch %v; %d tokens per generation, one-token prompt\n",
		res.Repeat, cache, res.MoELayers, res.Experts, reports.Bytes(res.ExpertBytes), reports.Bytes(res.RoutedBytes), res.TopK,
		res.Threads, res.Readers, res.Policy, res.Prefetch, res.DecodeTokens)
	bw := func(name string, b decodebench.Bandwidth, note string) []string {
		return []string{name, spread(b.Seconds, "%.3g"), spread(b.GBps, "%.3g"), note}
	}
	direct := "buffered"
	if res.Raw.Direct {
		direct = "O_DIRECT"
	}
	var rows [][]string
	if res.DecodeOnly {
		fmt.Fprintln(w, "decode only (--decode-only): no raw, verified or hash figures, so no storage bound and no simulated figure")
	} else {
		rows = [][]string{
			bw("raw read ("+direct+")", res.Raw, "baseline"),
			bw("raw read, 4 requests per record", res.RawSplit, "for the latency fit"),
			bw("verified read (hierarchy)", res.Verified, fmt.Sprintf("%.2f× raw (per round %.2f–%.2f)", res.VerifiedRatio, res.RatioPerRound.Min, res.RatioPerRound.Max)),
			bw("BLAKE3, one core, in memory", res.HashPerCore, fmt.Sprintf("%.1f cores hash at raw's median", res.Raw.GBps.Median/res.HashPerCore.GBps.Median)),
		}
		if err := reports.Table(w, []string{"figure", "seconds min / median / max", "GB/s min / median / max", ""}, rows); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	rows = rows[:0]
	for _, d := range res.Decode {
		pred := "-"
		if d.Predicted.N > 0 {
			pred = fmt.Sprintf("%.4g (%+.0f%%)", d.Predicted.Median, 100*d.Error)
		}
		rows = append(rows, []string{d.Name, fmt.Sprintf("%s (%d experts)", reports.Bytes(d.RAMBudget), d.RAMSlots), spread(d.SecondsPerToken, "%.4g"),
			reports.Bytes(int64(math.Round(d.StorageBytesPerToken.Median))), fmt.Sprintf("%.2f", d.HitRate.Median),
			fmt.Sprintf("%.4g", d.BoundSecondsPerToken), fmt.Sprintf("%.2f", d.RatioToBound),
			fmt.Sprintf("%d / %d / %d", d.PrefetchIssued, d.PrefetchUseful, d.PrefetchWasted), pred})
	}
	if err := reports.Table(w, []string{"decode", "RAM tier", "s/token min / median / max", "storage / token", "hit rate",
		"storage bound s/token", "× bound", "prefetch issued / useful / wasted", "simulated s/token"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	rows = rows[:0]
	for _, d := range res.Decode {
		where := d.Backend.Label()
		if r := d.Residency; r != nil && d.Backend.Name != "cpu" {
			where = fmt.Sprintf("%s: %s, weights %s on the device (%d), %s on the host (%d), %d expert slots", where, r.Device,
				reports.Bytes(r.DeviceWeights), r.DeviceWeightCount, reports.Bytes(r.HostWeights), r.HostWeightCount, r.ExpertSlots)
		}
		rows = append(rows, []string{d.Name, where, reports.Bytes(int64(math.Round(d.H2DBytesPerToken.Median))),
			reports.Bytes(int64(math.Round(d.ExpertH2DBytesPerToken.Median))), fmt.Sprintf("%.4g", d.H2DSecondsPerToken.Median),
			fmt.Sprintf("%.3g", d.H2DGBps), fmt.Sprintf("%.4g", d.KernelSecondsPerToken.Median), fmt.Sprintf("%.2f", d.GPUBusy.Median),
			fmt.Sprintf("%.1f (%.1f resident, %.1f host fallback) / %.1f", d.ExpertsOnDevicePerToken.Median, d.ExpertsResidentPerToken.Median,
				d.HostFallbackPerToken.Median, d.ExpertsOnHostPerToken.Median),
			deviceLevel(d),
			fmt.Sprintf("%d (%s / token)", d.Hashers, reports.Bytes(int64(math.Round(d.HashedBytesPerToken.Median))))})
	}
	if err := reports.Table(w, []string{"decode", "backend", "to device / token", "of it experts", "copy s/token", "copy GB/s", "kernel s/token",
		"GPU busy", "experts / token on the backend / on the host CPU", "device level hits / uses (slots)", "hashers (hashed)"}, rows); err != nil {
		return err
	}
	if l := res.Ledger; l != nil {
		fmt.Fprintf(w, "\nledger: decode with every expert resident, %s tok/s with the ledger, %s without: overhead %.1f%% (per round %.1f%% to %.1f%%)\n",
			spread(l.With, "%.4g"), spread(l.Without, "%.4g"), 100*l.Overhead, 100*l.PerRound.Min, 100*l.PerRound.Max)
	}
	if h := res.Hardware; !res.DecodeOnly {
		fmt.Fprintf(w, "calibrated simulator: storage %.3g GB/s + %.0f µs per request at queue depth %d, hash %.3g GB/s per core × %d, CPU expert %.4g µs, dense %.4g ms per layer, token %.4g ms\n",
			h.StorageGBps, h.StorageLatencyUS, h.QueueDepth, h.HashGBpsPerCore, h.HashCores, h.CPUExpertUS, h.DenseMSPerLayer, h.TokenMS)
	}
	fmt.Fprintf(w, "logits: %d generations, digest %s, bit-identical %v\n", res.Generations, res.Digest, res.Identical)
	return nil
}

// deviceLevel is the device level's hits of its uses over a figure's
// decodes, and its slots (tier.Stats Device; tarfa sim prints the same for a
// trace).
func deviceLevel(d *decodebench.Decode) string {
	if d.DeviceSlots == 0 {
		return "none"
	}
	s := fmt.Sprintf("%d / %d (%.1f%%; %d slots)", d.DeviceHits, d.DeviceUses, 100*float64(d.DeviceHits)/float64(max(d.DeviceUses, 1)), d.DeviceSlots)
	if d.Backend.DevicePrefetch {
		s += fmt.Sprintf("; prefetched %d: %d used, %d unused; %d skipped", d.DevicePrefetched, d.DevicePrefetchUsed, d.DevicePrefetchUnused, d.DevicePrefetchSkipped)
	}
	return s
}
