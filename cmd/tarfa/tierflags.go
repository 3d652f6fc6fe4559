package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tarfa-ai/tarfa/backend/cuda"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/tier/policy"
)

// tierFlags are the memory-hierarchy flags of every generating command:
// the backend, its device-memory budget and the expert placement, and the
// streaming hierarchy's budgets and policies.
type tierFlags struct {
	backend, vram, placement string
	// parsed by options
	vramBytes int64
	place     engine.Placement

	ram, device string // device: --staging-budget (or its old name)
	flags       *pflag.FlagSet
	readers     int
	policy      string
	partition   string
	devPolicy   string // --device-policy
	exclusive   bool   // --exclusive
	direct      string
	trace       string
	prefetch    bool
	devPrefetch bool
	heat, warm  bool
	scrub       string
	// deviceVerify: the cuda backend hashes its copies of routed experts
	// on the device (cuda.Options.VerifyCopies).
	deviceVerify bool
	// timing: a device backend measures its kernels' and copies' device
	// time (bench serve --device-time; not a flag of its own here).
	timing bool
}

// maxReaders bounds --readers.
const maxReaders = 256

func (t *tierFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	t.flags = f
	f.StringVar(&t.backend, "backend", "cpu", "backend: "+strings.Join(engine.Backends, " or ")+" (results are bit-identical on both)")
	f.StringVar(&t.vram, "vram-budget", "", `device memory the cuda backend may use, e.g. 16GiB, 12GiB (what the driver reports in use, the CUDA context included); weights that do not fit are computed on the host; default: the whole device`)
	f.BoolVar(&t.deviceVerify, "device-verify", true, "with --backend cuda, hash every routed expert copied into device memory again there, on the GPU, against its manifest digest; a copy that differs stops the run with an error naming the expert, before any token is produced from it (the host verified the bytes before the copy; this checks the copy and the device memory)")
	f.StringVar(&t.placement, "placement", "auto", "where routed experts not resident on the device are computed: "+strings.Join(engine.Placements, ", ")+" (speed only: any placement gives the same bits)")
	f.StringVar(&t.ram, "ram-budget", "auto", `bytes of verified experts kept resident in RAM, e.g. 64GiB, 128KiB, 0 (none: every use reads from storage); "auto": all routed experts if they fit in half the available memory, else that half`)
	f.StringVar(&t.device, "staging-budget", "auto", `host memory for experts in flight (read, hashed, computed) besides the RAM tier; at least one expert; "auto": two steps' worth (2 × top-k experts)`)
	// The old name, for one release: it bounded host staging memory, not
	// the device (that is --vram-budget).
	f.StringVar(&t.device, "device-budget", "auto", "renamed --staging-budget")
	f.MarkDeprecated("device-budget", "it is now --staging-budget (host memory for experts in flight; the device's memory is --vram-budget)")
	f.IntVar(&t.readers, "readers", 0, fmt.Sprintf("expert reads in flight, 1 to %d (0 = %d)", maxReaders, tier.DefaultReaders))
	f.StringVar(&t.policy, "policy", policy.Default, "RAM-tier policy: "+strings.Join(onlinePolicies(), ", "))
	f.StringVar(&t.partition, "partition", "global", "RAM-tier capacity: global (shared by all layers) or per-layer")
	f.StringVar(&t.devPolicy, "device-policy", "", "with --backend cuda, the policy of the device level (the expert slots --vram-budget leaves after the weights): one of the --policy names; default: --policy's")
	f.BoolVar(&t.exclusive, "exclusive", false, "with --backend cuda, the RAM tier and the device level hold different experts (a device miss takes the RAM copy); default inclusive, which the simulator measures as better (tarfa sim --exclusive)")
	f.StringVar(&t.direct, "direct", "auto", "O_DIRECT reads: auto (where the file system allows; a record whose pages are all in the page cache, as in a repeat run, is read from there), on (required), off")
	f.BoolVar(&t.prefetch, "prefetch", true, "read the experts the next layer's router predicts into the RAM tier while the current layer computes, as far as the reads pay: the hints' measured precision against the share of a read done before its step; held back where they do not pay, probed again; with --direct auto an expert in the page cache is left to its step (speed only)")
	f.BoolVar(&t.devPrefetch, "device-prefetch", false, "with --backend cuda, copy the experts the next layer's router predicts from the RAM tier into device slots at the end of each layer, beside the next layer's dense work, as far as the copies pay (their measured precision); off by default until measured on the GPU (speed only)")
	f.BoolVar(&t.heat, "heat", true, "keep this model's expert-heat ledger in the user cache directory (the heat policy's prior; updated by every run)")
	f.BoolVar(&t.warm, "warm", false, "read the hottest experts of the heat ledger into the RAM tier in the background at start")
	f.StringVar(&t.scrub, "scrub", tier.DefaultScrub.String(), `re-verify the copies kept resident: "off", "use" (re-hash each before every use), a duration (a background pass that often, at least 1s), or "use,10m"; a copy found changed stops the run`)
	f.StringVar(&t.trace, "trace", "", "write the routing of every token and MoE layer to FILE, a new file (tier/trace format, source measured)")
}

// onlinePolicies are the policies a real model's tier can run: online,
// needing no ledger, and no measuring device (oracle and oracle-learn need
// a synthetic trace's generator).
func onlinePolicies() []string {
	var out []string
	for _, n := range policy.Names() {
		if policy.Online(n) && !policy.NeedsHeat(n) && !policy.Evaluation(n) {
			out = append(out, n)
		}
	}
	return out
}

// options checks the flags and returns the hierarchy options (the backend
// flags, checked too, are kept in t).
func (t *tierFlags) options() (*tier.Options, error) {
	switch t.backend {
	case "cpu":
	case "cuda":
		if !cuda.Built {
			return nil, fmt.Errorf("--backend cuda: %w", cuda.ErrNotBuilt)
		}
	default:
		return nil, fmt.Errorf("--backend %q: want %s", t.backend, strings.Join(engine.Backends, " or "))
	}
	t.vramBytes = 0
	if t.vram != "" {
		if t.backend != "cuda" {
			return nil, fmt.Errorf("--vram-budget %s: a device-memory budget needs --backend cuda", t.vram)
		}
		n, err := parseBytes(t.vram)
		if err != nil {
			return nil, fmt.Errorf("--vram-budget %q: %v", t.vram, err)
		}
		if n < 1<<30 {
			return nil, fmt.Errorf("--vram-budget %s: want at least 1GiB (the CUDA context alone takes hundreds of MiB)", t.vram)
		}
		t.vramBytes = n
	}
	place, err := engine.ParsePlacement(t.placement)
	if err != nil {
		return nil, fmt.Errorf("--placement %q: want one of %s", t.placement, strings.Join(engine.Placements, ", "))
	}
	t.place = place
	ram, err := parseBudget("ram-budget", t.ram, true)
	if err != nil {
		return nil, err
	}
	name := "staging-budget"
	if t.flags != nil && t.flags.Changed("device-budget") {
		if t.flags.Changed("staging-budget") {
			return nil, fmt.Errorf("--device-budget is the old name of --staging-budget: give one of them")
		}
		name = "device-budget"
	}
	dev, err := parseBudget(name, t.device, false)
	if err != nil {
		return nil, err
	}
	if t.readers < 0 || t.readers > maxReaders {
		return nil, fmt.Errorf("--readers %d: want 1 to %d (0 = %d)", t.readers, maxReaders, tier.DefaultReaders)
	}
	known := false
	for _, n := range onlinePolicies() {
		known = known || n == t.policy
	}
	if !known {
		return nil, fmt.Errorf("--policy %q: want one of %s", t.policy, strings.Join(onlinePolicies(), ", "))
	}
	if t.devPolicy != "" && !slices.Contains(onlinePolicies(), t.devPolicy) {
		return nil, fmt.Errorf("--device-policy %q: want one of %s", t.devPolicy, strings.Join(onlinePolicies(), ", "))
	}
	if (t.devPolicy != "" || t.exclusive) && t.backend != "cuda" {
		return nil, fmt.Errorf("--device-policy and --exclusive configure the device level: they need --backend cuda")
	}
	part, err := policy.ParsePartition(t.partition)
	if err != nil {
		return nil, fmt.Errorf("--partition %q: want global or per-layer", t.partition)
	}
	sc, err := tier.ParseScrub(t.scrub)
	if err != nil {
		return nil, fmt.Errorf("--scrub: %v", err)
	}
	o := &tier.Options{RAMBudget: ram, StagingBudget: dev, Readers: t.readers, Policy: t.policy, Partition: part, Prefetch: t.prefetch, Scrub: sc,
		DevicePolicy: t.devPolicy, Exclusive: t.exclusive, DevicePrefetch: t.devPrefetch}
	switch t.direct {
	case "auto":
		o.Direct, o.PageCache = tier.DirectAuto, true
	case "on":
		o.Direct = tier.DirectOn
	case "off":
		o.Direct = tier.DirectOff
	default:
		return nil, fmt.Errorf("--direct %q: want auto, on or off", t.direct)
	}
	return o, nil
}

// openTrace creates the --trace file (nil when not asked for); an existing
// file is refused, not replaced.
func (t *tierFlags) openTrace() (*os.File, error) {
	if t.trace == "" {
		return nil, nil
	}
	return createNew("--trace", t.trace)
}

// parseBudget parses a byte size with an optional unit (B, KiB, MiB, GiB,
// TiB, or KB, MB, GB, TB), or "auto"; zero only where allowed.
func parseBudget(flag, s string, zeroOK bool) (int64, error) {
	if s == "auto" {
		return tier.Auto, nil
	}
	n, err := parseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: %v", flag, s, err)
	}
	if n == 0 && !zeroOK {
		return 0, fmt.Errorf("--%s 0: want at least one expert's worth of bytes, or auto", flag)
	}
	return n, nil
}

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// parseBytes parses "128KiB", "1.5GiB", "64GB", "4096".
func parseBytes(s string) (int64, error) {
	num, mult := strings.TrimSpace(s), 1.0
	for _, u := range byteUnits {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(v) || v < 0 || v*mult > 1<<62 {
		return 0, fmt.Errorf("want a size in bytes from 0 to 4 EiB, e.g. 64GiB, 512MiB, 128KiB")
	}
	return int64(v * mult), nil
}
