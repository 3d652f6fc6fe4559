package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/server"
)

func init() { benchSubcommands = append(benchSubcommands, newBenchServeCommand) }

type benchServeOptions struct {
	model        string
	clients      string
	maxTokens    int
	promptTokens int
	threads      int
	lpWorkers    int
	asJSON       bool
	cpuProfile   string
	execTrace    string
	tier         tierFlags
}

// benchServeRow is one concurrency level of bench serve.
type benchServeRow struct {
	Clients        int     `json:"clients"`
	Tokens         int     `json:"tokens"`
	Seconds        float64 `json:"seconds"`
	TokensPerSec   float64 `json:"tokens_per_second"`
	TTFTp50        float64 `json:"ttft_p50_s"`
	TTFTp99        float64 `json:"ttft_p99_s"`
	ITLp50         float64 `json:"itl_p50_s"`
	ITLp99         float64 `json:"itl_p99_s"`
	VerifiedPerTok float64 `json:"bytes_verified_per_token"`
	ReadPerTok     float64 `json:"bytes_read_per_token"`
	Steps          int64   `json:"steps"`
	RowsPerStep    float64 `json:"rows_per_step"`
	Identical      bool    `json:"identical_to_solo"`
	// Where a batch step's wall time went, per step (runner.SchedStats):
	// in the engine's step, the part of it spent waiting for the device
	// queue (syncs_per_step of them), emitting the tokens, and the rest of
	// the level's wall time (the loop between steps, idle time).
	StepSecPerStep  float64 `json:"step_s_per_step,omitempty"`
	SyncSecPerStep  float64 `json:"sync_s_per_step,omitempty"`
	SyncsPerStep    float64 `json:"syncs_per_step,omitempty"`
	EmitSecPerStep  float64 `json:"emit_s_per_step,omitempty"`
	OtherSecPerStep float64 `json:"other_s_per_step,omitempty"`
	// On a device backend, the host's waits for the device per step over
	// all its queues (backend.Counters.WaitSeconds): every
	// synchronisation, those a queue makes itself included, which the
	// engine's own sync timer does not see.
	DeviceWaitSecPerStep float64 `json:"device_wait_s_per_step,omitempty"`
	DeviceWaitsPerStep   float64 `json:"device_waits_per_step,omitempty"`
	// With --device-time, per batch step: the device time of the kernels
	// and of the host-to-device copies, and the kernels launched (a device
	// backend only).
	KernelSecPerStep float64 `json:"kernel_s_per_step,omitempty"`
	H2DSecPerStep    float64 `json:"h2d_s_per_step,omitempty"`
	KernelsPerStep   float64 `json:"kernels_per_step,omitempty"`
	// KernelsByName splits the kernels per step by the operation that
	// launched them, the most device time first.
	KernelsByName []kernelPerStep `json:"kernels_by_name,omitempty"`
}

// kernelPerStep is one kind of kernel's launches and device time per batch
// step (bench serve --device-time).
type kernelPerStep struct {
	Name            string  `json:"name"`
	LaunchesPerStep float64 `json:"launches_per_step"`
	SecPerStep      float64 `json:"s_per_step"`
}

// kernelsPerStep is d's kernel times by name over steps, the most device
// time first (ties by name).
func kernelsPerStep(d map[string]backend.KernelTime, steps float64) []kernelPerStep {
	ks := make([]kernelPerStep, 0, len(d))
	for name, k := range d {
		ks = append(ks, kernelPerStep{Name: name, LaunchesPerStep: float64(k.Launches) / steps, SecPerStep: k.Seconds / steps})
	}
	slices.SortFunc(ks, func(a, b kernelPerStep) int {
		if c := cmp.Compare(b.SecPerStep, a.SecPerStep); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return ks
}

func newBenchServeCommand() *cobra.Command {
	var o benchServeOptions
	cmd := &cobra.Command{
		Use:   "serve [--model DIR] [--clients 1,4,16,64]",
		Short: "Serving throughput and latency at several concurrency levels",
		Long: `Bench serve starts tarfa serve's handler on a loopback TCP port and, for each
--clients level C, sends C streamed completions at once (distinct prompts of
--prompt-tokens token ids, greedy, --max-tokens each, logprobs on so that every
token is its own event). It reports the aggregate tokens per second (all tokens
÷ wall time of the level), p50/p99 time to first token and inter-token latency
as the clients see them, the bytes verified (hashed) and read from storage per
generated token (from the responses' own ledgers and the hierarchy), the tokens
computed per batch step (prompt tokens of prefill chunks and one per decoding
response, computed together in one engine step: rows_per_step in --json), and whether every response is bit-identical (its logits chain)
to the same request sent alone before the levels. Use --ram-budget 0 to make
every expert use a verified read: the bytes per token then show what batching
shares.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := parseClients(o.clients); err != nil {
				return err
			}
			if err := checkRange("max-tokens", o.maxTokens, 1, 1<<16); err != nil {
				return err
			}
			if err := checkRange("prompt-tokens", o.promptTokens, 1, 1<<16); err != nil {
				return err
			}
			if err := checkRange("logprob-workers", o.lpWorkers, 0, 1<<10); err != nil {
				return err
			}
			if err := threadsFlag(o.threads); err != nil {
				return err
			}
			_, err := o.tier.options()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchServe(cmd, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", "", "JNF model directory (default: the embedded default model)")
	f.StringVar(&o.clients, "clients", "1,4,16,64", "concurrency levels, comma-separated")
	f.IntVar(&o.maxTokens, "max-tokens", 32, "tokens generated per request")
	f.IntVar(&o.promptTokens, "prompt-tokens", 16, "prompt length in tokens")
	f.IntVar(&o.threads, "threads", 0, "CPU threads (0 = all cores)")
	f.IntVar(&o.lpWorkers, "logprob-workers", 0, "the most rows' logprobs computed at once beside the steps (0 = half the cores)")
	f.BoolVar(&o.asJSON, "json", false, "print the rows as JSON")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of each concurrency level's requests alone (not the load, nor the solo references) to PREFIX-C.pprof")
	f.StringVar(&o.execTrace, "exectrace", "", "write an execution trace (runtime/trace: where each goroutine ran, waited and blocked; go tool trace) of each concurrency level's requests alone to PREFIX-C.trace")
	f.BoolVar(&o.tier.timing, "device-time", false, "measure the device time of kernels and copies per step (cuda; slows the steps a little)")
	o.tier.add(cmd)
	return cmd
}

func parseClients(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("--clients %q: want numbers from 1 to 1024 separated by commas, e.g. 1,4,16,64", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchAnswer is what one streamed request saw.
type benchAnswer struct {
	ttft     time.Duration
	itl      []time.Duration
	tokens   int
	chain    string
	verified int64
	err      error
}

func runBenchServe(cmd *cobra.Command, o *benchServeOptions) error {
	levels, _ := parseClients(o.clients)
	r, _, err := openRunner(cmd, o.model, o.threads, &o.tier)
	if err != nil {
		return err
	}
	defer r.Close()
	most := slices.Max(levels)
	sched, err := runner.NewScheduler(r, runner.SchedOptions{MaxBatch: most, MaxQueue: most, StepRows: max(256, most), LogprobWorkers: o.lpWorkers})
	if err != nil {
		return err
	}
	defer sched.Close()
	srv, err := server.New(server.Options{ModelName: "bench"})
	if err != nil {
		return err
	}
	srv.Attach(r, sched, runner.AttestOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler()}
	go hs.Serve(ln)
	defer hs.Close()
	base := "http://" + ln.Addr().String()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: most, MaxConnsPerHost: 0}}
	vocab := r.Config.Vocab
	prompt := func(i int) []int {
		p := make([]int, o.promptTokens)
		for j := range p {
			p[j] = (7919*i + 104729*j + 13) % vocab
		}
		return p
	}
	ask := func(ctx context.Context, i int) benchAnswer {
		body, _ := json.Marshal(map[string]any{"model": "bench", "prompt": prompt(i), "max_tokens": o.maxTokens, "temperature": 0,
			"stream": true, "logprobs": 0})
		t0 := time.Now()
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/completions", strings.NewReader(string(body)))
		resp, err := hc.Do(req)
		if err != nil {
			return benchAnswer{err: err}
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return benchAnswer{err: fmt.Errorf("status %s", resp.Status)}
		}
		var a benchAnswer
		last := t0
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<16), 1<<24)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || line == "[DONE]" {
				continue
			}
			var c struct {
				Choices []struct {
					Logprobs *struct {
						Tokens []string `json:"tokens"`
					} `json:"logprobs"`
				} `json:"choices"`
				Tarfa *server.Tarfa `json:"tarfa"`
				Error any           `json:"error"`
			}
			if err := json.Unmarshal([]byte(line), &c); err != nil || c.Error != nil {
				return benchAnswer{err: fmt.Errorf("event %q: %v", line, err)}
			}
			now := time.Now()
			for _, ch := range c.Choices {
				if ch.Logprobs == nil {
					continue
				}
				for range ch.Logprobs.Tokens {
					if a.tokens == 0 {
						a.ttft = now.Sub(t0)
					} else {
						a.itl = append(a.itl, now.Sub(last))
					}
					last = now
					a.tokens++
				}
			}
			if c.Tarfa != nil {
				a.chain, a.verified = c.Tarfa.LogitsChain, c.Tarfa.BytesVerified
			}
		}
		if err := sc.Err(); err != nil {
			a.err = err
		}
		return a
	}
	ctx := cmd.Context()
	// The solo reference of every prompt a level sends.
	solo := make([]string, most)
	for i := range most {
		a := ask(ctx, i)
		if a.err != nil {
			return a.err
		}
		solo[i] = a.chain
	}
	var rows []benchServeRow
	for _, c := range levels {
		st0 := sched.Stats()
		c0, metered := backendCounters(r)
		var read0 int64
		if r.Tier != nil {
			read0 = r.Tier.Stats().BytesRead
		}
		answers := make([]benchAnswer, c)
		var wg sync.WaitGroup
		stopProfile, err := levelProfile(o.cpuProfile, c)
		if err != nil {
			return err
		}
		stopTrace, err := levelTrace(o.execTrace, c)
		if err != nil {
			stopProfile()
			return err
		}
		t0 := time.Now()
		for i := range c {
			wg.Go(func() { answers[i] = ask(ctx, i) })
		}
		wg.Wait()
		wall := time.Since(t0)
		if err := stopTrace(); err != nil {
			stopProfile()
			return err
		}
		if err := stopProfile(); err != nil {
			return err
		}
		st1 := sched.Stats()
		row := benchServeRow{Clients: c, Seconds: wall.Seconds(), Identical: true, Steps: st1.Steps - st0.Steps}
		var ttft, itl []float64
		var verified int64
		for i, a := range answers {
			if a.err != nil {
				return fmt.Errorf("client %d of %d: %w", i, c, a.err)
			}
			row.Tokens += a.tokens
			ttft = append(ttft, a.ttft.Seconds())
			for _, d := range a.itl {
				itl = append(itl, d.Seconds())
			}
			verified += a.verified
			row.Identical = row.Identical && a.chain == solo[i]
		}
		row.TokensPerSec = float64(row.Tokens) / wall.Seconds()
		row.TTFTp50, row.TTFTp99 = pct(ttft, 0.5), pct(ttft, 0.99)
		row.ITLp50, row.ITLp99 = pct(itl, 0.5), pct(itl, 0.99)
		row.VerifiedPerTok = float64(verified) / float64(max(row.Tokens, 1))
		if r.Tier != nil {
			row.ReadPerTok = float64(r.Tier.Stats().BytesRead-read0) / float64(max(row.Tokens, 1))
		}
		if row.Steps > 0 {
			n := float64(row.Steps)
			row.RowsPerStep = float64(st1.Rows-st0.Rows) / n
			row.StepSecPerStep = (st1.StepTime - st0.StepTime).Seconds() / n
			row.SyncSecPerStep = (st1.SyncTime - st0.SyncTime).Seconds() / n
			row.SyncsPerStep = float64(st1.Syncs-st0.Syncs) / n
			row.EmitSecPerStep = (st1.EmitTime - st0.EmitTime).Seconds() / n
			row.OtherSecPerStep = wall.Seconds()/n - row.StepSecPerStep - row.EmitSecPerStep
			if metered {
				c1, _ := backendCounters(r)
				d := c1.Sub(c0)
				row.DeviceWaitSecPerStep, row.DeviceWaitsPerStep = d.WaitSeconds/n, float64(d.Waits)/n
				if o.tier.timing {
					row.KernelSecPerStep, row.H2DSecPerStep, row.KernelsPerStep = d.KernelSeconds/n, d.H2DSeconds/n, float64(d.Kernels)/n
					row.KernelsByName = kernelsPerStep(d.KernelTimes, n)
				}
			}
		}
		rows = append(rows, row)
		if !o.asJSON {
			fmt.Fprintf(cmd.OutOrStdout(), "%11s: %6d tokens in %7.2fs = %8.1f tok/s · TTFT p50 %7.1f ms p99 %7.1f ms · ITL p50 %7.1f ms p99 %7.1f ms · verified %s/token, read %s/token · %.1f tokens computed per batch step · identical to solo: %v\n",
				plural(c, "client", "clients"), row.Tokens, row.Seconds, row.TokensPerSec, 1e3*row.TTFTp50, 1e3*row.TTFTp99, 1e3*row.ITLp50, 1e3*row.ITLp99,
				sizeWords(int64(row.VerifiedPerTok)), sizeWords(int64(row.ReadPerTok)), row.RowsPerStep, row.Identical)
			if row.Steps > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%11s  a step: %.2f ms in the engine (%.2f ms of it in its %.1f syncs), %.2f ms emitting, %.2f ms between steps", "",
					1e3*row.StepSecPerStep, 1e3*row.SyncSecPerStep, row.SyncsPerStep, 1e3*row.EmitSecPerStep, 1e3*row.OtherSecPerStep)
				if row.DeviceWaitsPerStep > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "; the device's queues waited %.2f ms (%.1f waits)", 1e3*row.DeviceWaitSecPerStep, row.DeviceWaitsPerStep)
				}
				fmt.Fprintln(cmd.OutOrStdout())
			}
			if row.KernelsPerStep > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%11s  device a step: kernels %.2f ms (%.0f launches), copies %.2f ms; by kernel:", "",
					1e3*row.KernelSecPerStep, row.KernelsPerStep, 1e3*row.H2DSecPerStep)
				for i, k := range row.KernelsByName {
					if i == 8 {
						fmt.Fprintf(cmd.OutOrStdout(), " …")
						break
					}
					fmt.Fprintf(cmd.OutOrStdout(), " %s %.2f ms (%.0f)", k.Name, 1e3*k.SecPerStep, k.LaunchesPerStep)
				}
				fmt.Fprintln(cmd.OutOrStdout())
			}
		}
	}
	if o.asJSON {
		return writeJSON(cmd.OutOrStdout(), rows)
	}
	for _, row := range rows {
		if !row.Identical {
			return failVerification(fmt.Errorf("at %s a response differs from the same request alone", plural(row.Clients, "client", "clients")))
		}
	}
	return nil
}

// pct is the q-quantile of xs (nearest rank).
func pct(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// backendCounters reads the engine backend's counters, when it keeps them.
func backendCounters(r *runner.Runner) (backend.Counters, bool) {
	m, ok := r.Engine.Backend().(backend.Meter)
	if !ok {
		return backend.Counters{}, false
	}
	return m.Counters(), true
}

// levelTrace starts an execution trace of one concurrency level's
// requests, written to prefix-c.trace (none when prefix is empty); the
// function it returns ends it. The runtime has one trace at a time.
func levelTrace(prefix string, c int) (stop func() error, err error) {
	return levelCapture("--exectrace", prefix, "trace", c, trace.Start, trace.Stop, "")
}

// levelProfile starts a CPU profile of one concurrency level's requests,
// written to prefix-c.pprof (none when prefix is empty); the function it
// returns ends it. It cannot run beside TARFA_CPUPROFILE's profile of the
// whole process (the runtime has one CPU profile at a time).
func levelProfile(prefix string, c int) (stop func() error, err error) {
	return levelCapture("--cpuprofile", prefix, "pprof", c, pprof.StartCPUProfile, pprof.StopCPUProfile,
		" (TARFA_CPUPROFILE profiles the whole process: set one of the two)")
}

// levelCapture starts a capture of the runtime's (start, ended by end)
// into prefix-c.ext for flag; a file it could not start is removed, and
// its error carries why (and hint).
func levelCapture(flag, prefix, ext string, c int, start func(io.Writer) error, end func(), hint string) (stop func() error, err error) {
	if prefix == "" {
		return func() error { return nil }, nil
	}
	path := fmt.Sprintf("%s-%d.%s", prefix, c, ext)
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if err := start(f); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("%s %s: %w%s", flag, path, err, hint)
	}
	return func() error {
		end()
		if err := f.Close(); err != nil {
			return fmt.Errorf("%s %s: %w", flag, path, err)
		}
		return nil
	}, nil
}
