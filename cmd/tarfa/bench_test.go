package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/tier"
	"github.com/tarfa-ai/tarfa/validation/decodebench"
	"github.com/tarfa-ai/tarfa/validation/enginebench"
	"github.com/tarfa-ai/tarfa/validation/iobench"
)

// Bad numbers are refused with the flag and its range, before any work:
// the checkpoint does not exist and the default model is not built.
func TestBenchFlagsRefused(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	notDir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notDir, nil, 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "io", "/nonexistent", "--repeat", "0"}, "--repeat 0: want 1 to 1000"},
		{[]string{"bench", "io", "/nonexistent", "--workers", "-3"}, "--workers -3: want 1 to 256"},
		{[]string{"bench", "io", "/nonexistent", "--scratch", "/nonexistent/dir"}, "--scratch"},
		{[]string{"bench", "io", "/nonexistent", "--scratch", notDir}, "not a directory"},
		{[]string{"bench", "engine", "--threads", "-3"}, "--threads -3: want 1 to 1024"},
		{[]string{"bench", "engine", "--threads", "1,0"}, "--threads 0: want 1 to 1024"},
		{[]string{"bench", "engine", "--expert-cache-mib", "-5"}, "--expert-cache-mib -5: want -1 to"},
		{[]string{"bench", "engine", "--repeat", "0"}, "--repeat 0: want 1 to 1000"},
		{[]string{"bench", "engine", "--prompt-tokens", "0"}, "--prompt-tokens 0: want 1 to"},
		{[]string{"bench", "engine", "--decode-tokens", "1"}, "--decode-tokens 1: want 2 to"},
		{[]string{"bench", "engine", "--min-seconds", "0"}, "--min-seconds 0: want more than 0"},
		{[]string{"bench", "engine", "--min-seconds", "NaN"}, "--min-seconds NaN"},
		{[]string{"bench", "decode", "--ram-fraction", "0"}, "--ram-fraction 0: want more than 0, at most 1"},
		{[]string{"bench", "decode", "--ram-fraction", "0.5,2"}, "--ram-fraction 2: want more than 0"},
		{[]string{"bench", "decode", "--readers", "0"}, "--readers 0: want 1 to 256"},
		{[]string{"bench", "decode", "--ledger-pairs", "0"}, "--ledger-pairs 0: want 1 to 100"},
		{[]string{"bench", "decode", "--decode-tokens", "1"}, "--decode-tokens 1: want 2 to"},
		{[]string{"bench", "decode", "--policy", "belady"}, `--policy "belady": want one of`},
		{[]string{"bench", "decode", "--policy", "oracle"}, `--policy "oracle": want one of`},
		{[]string{"bench", "decode", "--direct", "maybe"}, `--direct "maybe": want auto, on or off`},
		{[]string{"bench", "decode", "--partition", "x"}, `--partition "x": want global or per-layer`},
		{[]string{"bench", "decode", "--backend", "tpu"}, `--backend "tpu": want cpu or cuda`},
		{[]string{"bench", "decode", "--vram-budget", "16GiB"}, "--vram-budget 16GiB: a device-memory budget needs --backend cuda"},
		{[]string{"bench", "decode", "--placement", "left"}, `--placement "left": want one of`},
		{[]string{"bench", "decode", "--backend", "cpu,cpu"}, "--backend cpu, --vram-budget \"\", --placement auto: given twice"},
		{[]string{"bench", "decode", "--backend", "cpu", "--vram-budget", "16GiB,12GiB"}, "--vram-budget 16GiB,12GiB: a device-memory budget needs --backend cuda"},
		{[]string{"bench", "decode", "--device-prefetch=maybe"}, `--device-prefetch "maybe": want off, on or both`},
		{[]string{"bench", "decode", "--placement="}, "--placement: give at least one placement"},
		{[]string{"bench", "serve", "--logprob-workers", "-1"}, "--logprob-workers -1: want 0 to 1024"},
	} {
		_, err := runCLI(t, "", c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err) != exitError {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("refused flags still built the default model: %v", ents)
	}
}

func TestBenchIOJSONLeavesScratchAlone(t *testing.T) {
	scratch := t.TempDir()
	keep := filepath.Join(scratch, "jnf", "keep")
	os.MkdirAll(filepath.Dir(keep), 0o755)
	os.WriteFile(keep, []byte("mine"), 0o644)
	out, err := runCLI(t, "", "bench", "io", fixtures+"qwen3moe-dev-a/checkpoint", "--scratch", scratch, "--repeat", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res iobench.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Repeat != 2 || len(res.Figures) < 5 || res.Figures[0].GBps.N != 2 {
		t.Errorf("result %+v", res)
	}
	if v := res.Figure(iobench.ArmVerify); res.CacheDropped && (v == nil || v.Ratio <= 0 || v.Baseline != iobench.ArmRead) {
		t.Errorf("verify figure %+v", v)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "mine" {
		t.Errorf("the user's %s: %q, %v", keep, b, err)
	}
	if ents, _ := os.ReadDir(scratch); len(ents) != 1 {
		t.Errorf("scratch holds %d entries, want the user's one", len(ents))
	}
}

func TestBenchDecodeJSON(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	out, err := runCLI(t, "", "bench", "decode", "--repeat", "2", "--decode-tokens", "4", "--ram-fraction", "0.5", "--readers", "2",
		"--threads", "1", "--no-drop", "--ledger-pairs", "3", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res decodebench.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !res.Identical || len(res.Decode) != 2 || res.Decode[0].SecondsPerToken.N != 2 || res.Readers != 2 || res.CacheDropped || res.Ledger == nil ||
		res.Decode[1].Predicted.N != 2 || res.Ledger.With.N != 6 || res.Ledger.Without.N != 6 {
		t.Errorf("bench decode: %s", out)
	}
	txt, err := runCLI(t, "", "bench", "decode", "--repeat", "1", "--decode-tokens", "3", "--no-drop", "--ledger=false")
	if err != nil || !strings.Contains(txt, "PAGE CACHE NOT DROPPED") || !strings.Contains(txt, "RAM 25%, warm") || strings.Contains(txt, "ledger:") {
		t.Errorf("bench decode text: %v\n%s", err, txt)
	}
}

func TestBenchEngineJSON(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	out, err := runCLI(t, "", "bench", "engine", "--threads", "1,2", "--repeat", "2", "--min-seconds", "0.05",
		"--prompt-tokens", "8", "--decode-tokens", "3", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res enginebench.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(res.Figures) != 2 || len(res.Cells) != 4 || !res.BitIdentical() || res.Figures[1].Threads != 2 ||
		res.Figures[0].DecodeTokS.N != 2 || res.MinSeconds != 0.05 || res.RAMBudget != tier.Auto {
		t.Errorf("result %s", out)
	}
	out, err = runCLI(t, "", "bench", "engine", "--threads", "2", "--repeat", "1", "--min-seconds", "0.05",
		"--prompt-tokens", "8", "--decode-tokens", "3", "--expert-cache-mib", "0")
	if err != nil || !strings.Contains(out, "every expert read and verified on every use") || !strings.Contains(out, res.ReferenceDigest) {
		t.Errorf("table: %v\n%s", err, out)
	}
}

// bench serve --device-time on a backend without device timers (cpu)
// runs as without it and prints no device figures: they are a device's
// measurements, never zeros standing in for them.
func TestBenchServeDeviceTimeOnCPU(t *testing.T) {
	out, err := runCLI(t, "", "bench", "serve", "--clients", "1", "--max-tokens", "2", "--prompt-tokens", "2", "--threads", "1", "--device-time", "--json")
	if err != nil {
		t.Fatalf("bench serve --device-time: %v\n%s", err, out)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("bench serve --json: %v\n%s", err, out)
	}
	if rows[0]["tokens"].(float64) < 1 || rows[0]["identical_to_solo"] != true {
		t.Errorf("row %v: want tokens and identical_to_solo", rows[0])
	}
	for _, k := range []string{"kernel_s_per_step", "h2d_s_per_step", "kernels_per_step"} {
		if _, ok := rows[0][k]; ok {
			t.Errorf("cpu: %s = %v, want no device figure", k, rows[0][k])
		}
	}
}

// bench serve says where a step's wall time went: in the engine (the part
// waiting for the queue within it), emitting and between steps, and the
// parts add up to the level's wall time per step.
func TestBenchServeSplitsTheStep(t *testing.T) {
	out, err := runCLI(t, "", "bench", "serve", "--clients", "2", "--max-tokens", "3", "--prompt-tokens", "2", "--threads", "1", "--json")
	if err != nil {
		t.Fatalf("bench serve: %v\n%s", err, out)
	}
	var rows []benchServeRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("bench serve --json: %v\n%s", err, out)
	}
	r := rows[0]
	perStep := r.Seconds / float64(r.Steps)
	if r.Steps == 0 || r.StepSecPerStep <= 0 || r.EmitSecPerStep <= 0 || r.SyncsPerStep < 1 ||
		r.SyncSecPerStep > r.StepSecPerStep || r.StepSecPerStep+r.EmitSecPerStep > perStep ||
		math.Abs(r.StepSecPerStep+r.EmitSecPerStep+r.OtherSecPerStep-perStep) > 1e-9 {
		t.Errorf("a step of %.3g s: engine %.3g s (waiting %.3g s, %.3g waits), emitting %.3g s, other %.3g s", perStep,
			r.StepSecPerStep, r.SyncSecPerStep, r.SyncsPerStep, r.EmitSecPerStep, r.OtherSecPerStep)
	}
	out, err = runCLI(t, "", "bench", "serve", "--clients", "1", "--max-tokens", "2", "--prompt-tokens", "2", "--threads", "1")
	if err != nil || !strings.Contains(out, "ms in the engine (") || !strings.Contains(out, "ms between steps") {
		t.Errorf("bench serve's table: %v\n%s", err, out)
	}
}

// kernelsPerStep: per-step figures of each kernel, the most device time
// first, ties by name.
func TestKernelsPerStep(t *testing.T) {
	got := kernelsPerStep(map[string]backend.KernelTime{
		"silu_mul": {Launches: 40, Seconds: 0.002}, "matmul_group": {Launches: 8, Seconds: 0.008},
		"rmsnorm": {Launches: 20, Seconds: 0.002}}, 4)
	want := []kernelPerStep{{"matmul_group", 2, 0.002}, {"rmsnorm", 5, 0.0005}, {"silu_mul", 10, 0.0005}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("kernelsPerStep: %+v, want %+v", got, want)
	}
}

// bench serve --cpuprofile writes one CPU profile per concurrency level
// (gzip-compressed pprof data), and refuses to run beside TARFA_CPUPROFILE.
func TestBenchServeProfilesEachLevel(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "p")
	out, err := runCLI(t, "", "bench", "serve", "--clients", "1,2", "--max-tokens", "2", "--prompt-tokens", "2", "--threads", "1", "--cpuprofile", prefix)
	if err != nil {
		t.Fatalf("bench serve --cpuprofile: %v\n%s", err, out)
	}
	for _, c := range []int{1, 2} {
		b, err := os.ReadFile(fmt.Sprintf("%s-%d.pprof", prefix, c))
		if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("level %d: profile %d bytes (%v), want gzip-compressed pprof data", c, len(b), err)
		}
	}
	if _, err := os.Stat(prefix + "-4.pprof"); err == nil {
		t.Error("a profile of a level that did not run")
	}
	stop := func() {}
	if err := pprof.StartCPUProfile(io.Discard); err == nil {
		stop = pprof.StopCPUProfile
	}
	defer stop()
	_, err = runCLI(t, "", "bench", "serve", "--clients", "1", "--max-tokens", "1", "--prompt-tokens", "2", "--threads", "1", "--cpuprofile", prefix+"b")
	if err == nil || !strings.Contains(err.Error(), "TARFA_CPUPROFILE") {
		t.Errorf("beside another CPU profile: %v, want an error naming TARFA_CPUPROFILE", err)
	}
	if _, err := os.Stat(prefix + "b-1.pprof"); err == nil {
		t.Error("the refused profile's file was left behind")
	}
}

// bench serve --exectrace writes one execution trace per concurrency level
// (beside --cpuprofile's profiles, which the trace can hold together).
func TestBenchServeTracesEachLevel(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "t")
	out, err := runCLI(t, "", "bench", "serve", "--clients", "1,2", "--max-tokens", "2", "--prompt-tokens", "2", "--threads", "1",
		"--exectrace", prefix, "--cpuprofile", prefix)
	if err != nil {
		t.Fatalf("bench serve --exectrace: %v\n%s", err, out)
	}
	for _, c := range []int{1, 2} {
		b, err := os.ReadFile(fmt.Sprintf("%s-%d.trace", prefix, c))
		if err != nil || !bytes.HasPrefix(b, []byte("go 1.")) || !bytes.Contains(b[:16], []byte(" trace")) || len(b) < 1000 {
			t.Errorf("level %d: trace of %d bytes (%v), want a Go execution trace", c, len(b), err)
		}
		if _, err := os.Stat(fmt.Sprintf("%s-%d.pprof", prefix, c)); err != nil {
			t.Errorf("level %d: no CPU profile beside the trace: %v", c, err)
		}
	}
}

// bench decode pins the hierarchy's buffers by default, as tarfa run does
// (runner.Options.PinSlots nil: on for a backend that can pin), so that
// its figures are those of the defaults users run: the 48-layer warm
// figure of 2026-12-03 was measured before this, with every RAM-tier hit
// staged through one core's copy.
func TestBenchDecodePinsLikeRun(t *testing.T) {
	f := newBenchDecodeCommand().Flags().Lookup("pin-slots")
	if f == nil || f.DefValue != "true" {
		t.Fatalf("bench decode --pin-slots: %+v, want a flag on by default", f)
	}
}

// TestBenchDecodeDevicePrefetchBoth: --device-prefetch=both runs each
// device backend without and with the device prefetch (next to each other
// in every round), the CPU backend (no device level) once and without it;
// the flag alone is on.
func TestBenchDecodeDevicePrefetchBoth(t *testing.T) {
	if f := newBenchDecodeCommand().Flags().Lookup("device-prefetch"); f == nil || f.DefValue != "off" || f.NoOptDefVal != "on" {
		t.Fatalf("bench decode --device-prefetch: %+v, want off by default and on alone", f)
	}
	for v, want := range map[string][]bool{"off": {false}, "on": {true}, "both": {false, true}} {
		got, err := devicePrefetchVariants(v)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("--device-prefetch=%s: %v, %v; want %v", v, got, err, want)
		}
		o := benchDecodeOptions{backends: []string{"cpu"}, placement: []string{"auto", "balance"}, devPrefetch: v}
		bs, err := o.backendConfigs()
		if err != nil || len(bs) != 1 || bs[0].DevicePrefetch {
			t.Errorf("--device-prefetch=%s --backend cpu: %+v, %v; want one cpu backend without it (and one placement)", v, bs, err)
		}
	}
}

// TestBenchDecodeOnly: --decode-only prints the decodes and says the read
// figures, the storage bound and the simulated figures were left out; its
// JSON has no read figures.
func TestBenchDecodeOnly(t *testing.T) {
	out, err := runCLI(t, "", "bench", "decode", "--decode-only", "--repeat", "1", "--decode-tokens", "2", "--no-drop", "--ledger=false")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "decode only (--decode-only)") || strings.Contains(out, "raw read") || strings.Contains(out, "calibrated simulator") ||
		!strings.Contains(out, "RAM 25%, warm") {
		t.Errorf("bench decode --decode-only:\n%s", out)
	}
	js, err := runCLI(t, "", "bench", "decode", "--decode-only", "--repeat", "1", "--decode-tokens", "2", "--no-drop", "--ledger=false", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		DecodeOnly bool `json:"decode_only"`
		Raw        struct {
			Bytes int64 `json:"bytes"`
		} `json:"raw"`
		Decode []json.RawMessage `json:"decode"`
	}
	if err := json.Unmarshal([]byte(js), &r); err != nil || !r.DecodeOnly || r.Raw.Bytes != 0 || len(r.Decode) != 2 {
		t.Errorf("bench decode --decode-only --json: %v, %+v\n%s", err, r, js)
	}
}
