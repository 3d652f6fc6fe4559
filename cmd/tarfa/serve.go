package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/server"
)

// serveFlags are serve's flags.
type serveFlags struct {
	model, addr, key, apiKeyFile, name   string
	threads                              int
	maxBatch, maxQueue                   int
	kvBudget, maxBody                    string
	defaultMaxTokens                     int
	shutdown, bodyTimeout, headerTimeout time.Duration
	logJSON                              bool
	tier                                 tierFlags

	// parsed by check
	kvBytes, bodyBytes int64
}

// Serve's flag ranges.
const (
	maxServeBatch = 1024
	maxServeQueue = 1 << 16
	maxAPIKeyFile = 4096
)

func (o *serveFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.model, "model", "", "JNF model directory (default: the embedded default model)")
	f.StringVar(&o.addr, "addr", "127.0.0.1:8089", "address to listen on (host:port; the default binds to this machine only)")
	f.StringVar(&o.key, "key", "", "private key file (tarfa keys generate) that signs every response's run report, served by GET /v1/attestations/{id}")
	f.StringVar(&o.apiKeyFile, "api-key-file", "", "file holding the API key clients must send as Authorization: Bearer KEY (default: none needed)")
	f.StringVar(&o.name, "name", "", "the model id clients name (default: the model directory's name, or tarfa-default for the embedded model)")
	f.IntVar(&o.threads, "threads", 0, fmt.Sprintf("CPU threads, 0 (all cores) to %d; results are identical for every value", maxThreads))
	f.IntVar(&o.maxBatch, "max-batch", 16, fmt.Sprintf("sequences decoded together in one step, 1 to %d", maxServeBatch))
	f.IntVar(&o.maxQueue, "max-queue", 64, fmt.Sprintf("requests waiting for a place in the batch, 1 to %d; more get 429", maxServeQueue))
	f.StringVar(&o.kvBudget, "kv-budget", "2GiB", "memory for the sequences' KV caches and recurrent state; each request reserves what its prompt and max_tokens can grow to, and waits until that fits")
	f.StringVar(&o.maxBody, "max-body", "1MiB", "largest request body; a larger one gets 413")
	f.IntVar(&o.defaultMaxTokens, "default-max-tokens", server.DefaultMaxTokens, "max_tokens of a request that sets none (never beyond the context)")
	f.DurationVar(&o.shutdown, "shutdown-timeout", 30*time.Second, "on SIGTERM or Ctrl-C, how long in-flight responses may take to finish before they are cut")
	f.DurationVar(&o.headerTimeout, "header-timeout", server.DefaultReadHeaderTimeout, "longest a request's headers may take to arrive; a slower client's connection is closed")
	f.DurationVar(&o.bodyTimeout, "body-timeout", server.DefaultBodyTimeout, "longest a request body may take to arrive after its headers; a slower one gets 408 and its connection is closed")
	f.BoolVar(&o.logJSON, "log-json", false, "log one JSON line per request to stderr (never prompts or outputs)")
	o.tier.add(cmd)
}

func (o *serveFlags) check() error {
	if err := threadsFlag(o.threads); err != nil {
		return err
	}
	if _, err := o.tier.options(); err != nil {
		return err
	}
	if o.tier.trace != "" {
		return errors.New("--trace records one sequence after another; serve runs many at once: use it with run or attest run")
	}
	if err := checkRange("max-batch", o.maxBatch, 1, maxServeBatch); err != nil {
		return err
	}
	if err := checkRange("max-queue", o.maxQueue, 1, maxServeQueue); err != nil {
		return err
	}
	if err := checkRange("default-max-tokens", o.defaultMaxTokens, 1, 1<<20); err != nil {
		return err
	}
	var err error
	if o.kvBytes, err = parseBytes(o.kvBudget); err != nil || o.kvBytes < 1<<20 {
		return fmt.Errorf("--kv-budget %q: want a size of at least 1MiB, e.g. 2GiB", o.kvBudget)
	}
	if o.bodyBytes, err = parseBytes(o.maxBody); err != nil || o.bodyBytes < 1<<10 || o.bodyBytes > 1<<30 {
		return fmt.Errorf("--max-body %q: want a size from 1KiB to 1GiB", o.maxBody)
	}
	if o.shutdown < 0 {
		return fmt.Errorf("--shutdown-timeout %s: want 0 or more", o.shutdown)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"header-timeout", o.headerTimeout}, {"body-timeout", o.bodyTimeout}} {
		if d.v < 10*time.Millisecond || d.v > time.Hour {
			return fmt.Errorf("--%s %s: want 10ms to 1h", d.name, d.v)
		}
	}
	if _, _, err := net.SplitHostPort(o.addr); err != nil {
		return fmt.Errorf("--addr %q: want host:port, e.g. 127.0.0.1:8089: %v", o.addr, err)
	}
	return nil
}

func newServeCommand() *cobra.Command {
	var o serveFlags
	cmd := &cobra.Command{
		Use:   "serve [--model DIR] [--addr 127.0.0.1:8089] [--key NAME] [--api-key-file F]",
		Short: "Serve the exact model over the OpenAI API, every response attested",
		Long: `Serve runs an OpenAI-compatible HTTP server for one verified JNF model (--model;
default: the embedded default model): GET /v1/models, POST /v1/chat/completions
and POST /v1/completions (streamed as server-sent events with "stream": true,
usage with "stream_options": {"include_usage": true}), GET /health and GET
/metrics (Prometheus). It binds to 127.0.0.1:8089 unless --addr says otherwise;
with --api-key-file every endpoint but /health needs Authorization: Bearer KEY.

Concurrent requests are batched: one forward step serves every active sequence,
so a routed expert is read and verified once per step for all of them, and each
response is bit-identical to the same request run alone (tokens, logprobs,
logits chain). Requests wait in a queue (--max-queue; beyond it 429) for a place
in the batch (--max-batch) and for their KV memory (--kv-budget); a client that
disconnects ends its generation and frees its memory.

Every response says what produced it: the headers X-Tarfa-Mode,
X-Tarfa-Manifest-Root and X-Tarfa-Attestation (its id) and, when not streamed,
X-Tarfa-Experts-Verified, X-Tarfa-Logits-Chain and X-Tarfa-Routing; a stream
carries these in a "tarfa" member of its final chunks. With --key, GET
/v1/attestations/{id} returns the response's signed run report (DSSE), built
from its own ledger: tarfa attest verify checks it offline or with --replay.

Requests are bounded: headers must arrive within --header-timeout, a body
within --body-timeout (else 408) and be at most --max-body (else 413); a
client that stops reading a stream is cut after 30s. The request parameters
taken, the "tarfa" member's fields and the shutdown are described in
docs/serve.md.

The server listens at once and answers 503 until the model is verified and
loaded. SIGTERM or Ctrl-C drains it: it keeps accepting connections but answers
every new request 503 (shutting_down, with Retry-After) and /health 503
{"status":"draining"}, and lets the responses in flight (streams included)
finish; then it exits 0. Those still running after --shutdown-timeout are cut
(a stream ends with an error event), their connections closed, and serve exits
1 saying how many were cut, within seconds even if one does not end. A second
signal exits 130 at once.

` + exitStatuses,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return o.check()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, &o)
		},
	}
	o.add(cmd)
	return cmd
}

// readAPIKey reads the --api-key-file: one line, surrounding space
// trimmed, printable ASCII.
func readAPIKey(path string) (string, error) {
	b, err := jnf.ReadFileLimit(path, maxAPIKeyFile, "API key file")
	if err != nil {
		return "", fmt.Errorf("--api-key-file: %w", err)
	}
	k := strings.TrimSpace(string(b))
	if k == "" {
		return "", fmt.Errorf("--api-key-file %s: empty", path)
	}
	for i, c := range []byte(k) {
		if c <= ' ' || c > '~' {
			return "", fmt.Errorf("--api-key-file %s: byte %d is %#x: want one line of printable ASCII without spaces", path, i, c)
		}
	}
	return k, nil
}

func runServe(cmd *cobra.Command, o *serveFlags) error {
	stderr := cmd.ErrOrStderr()
	var apiKey string
	if o.apiKeyFile != "" {
		var err error
		if apiKey, err = readAPIKey(o.apiKeyFile); err != nil {
			return err
		}
	}
	var signer ed25519.PrivateKey
	var keyID string
	if o.key != "" {
		var err error
		if signer, err = attest.LoadPrivateKey(o.key); err != nil {
			return fmt.Errorf("--key: %w", err)
		}
		keyID, _ = attest.KeyID(signer.Public().(ed25519.PublicKey))
	}
	name := o.name
	if name == "" {
		name = "tarfa-default"
		if o.model != "" {
			name = filepath.Base(filepath.Clean(o.model))
		}
	}
	opt := server.Options{ModelName: name, APIKey: apiKey, MaxBody: o.bodyBytes, DefaultMaxTokens: o.defaultMaxTokens, Signer: signer,
		BodyTimeout: o.bodyTimeout, ReadHeaderTimeout: o.headerTimeout}
	if o.logJSON {
		opt.Logger = slog.New(slog.NewJSONHandler(stderr, nil))
	}
	srv, err := server.New(opt)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	hs := srv.HTTPServer(log.New(stderr, "tarfa serve: ", 0))
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(stderr, "Tarfa · %s · exact BF16 · streaming\n", name)
	fmt.Fprintf(stderr, "  listening on http://%s (OpenAI API under /v1; 503 until ready)\n", ln.Addr())

	r, load, err := openRunner(cmd, o.model, o.threads, &o.tier)
	if err != nil {
		hs.Close()
		return err
	}
	defer func() {
		if r != nil {
			r.Close()
		}
	}()
	sched, err := runner.NewScheduler(r, runner.SchedOptions{MaxBatch: o.maxBatch, MaxQueue: o.maxQueue, StateBudget: o.kvBytes})
	if err != nil {
		hs.Close()
		return err
	}
	srv.Attach(r, sched, runner.AttestOptions{Build: buildFacts(r), Host: runner.HostFacts(), LoadSeconds: load.Seconds()})
	tensors, bytes := r.Engine.Loaded()
	experts := "experts read and verified on every use (engine cache)"
	if r.Tier != nil {
		experts = "experts on " + strings.TrimPrefix(r.Tier.Describe(), "experts: ")
	}
	fmt.Fprintf(stderr, "✓ ready · resident %d tensors (%s) verified in %.1fs · %s\n", tensors, sizeWords(bytes), load.Seconds(), experts)
	signed := "responses unsigned (--key NAME signs a report of each)"
	if signer != nil {
		signed = "every response's report signed by keyid " + keyID
	}
	auth := "no API key"
	if apiKey != "" {
		auth = "API key required"
	}
	fmt.Fprintf(stderr, "  batch ≤ %d sequences · queue ≤ %d · KV budget %s · %s · %s\n", o.maxBatch, o.maxQueue, sizeWords(o.kvBytes), auth, signed)

	select {
	case err := <-served:
		sched.Close()
		return fmt.Errorf("serving: %w", err)
	case <-cmd.Context().Done():
	}
	fmt.Fprintf(stderr, "shutting down: draining (new requests get 503), finishing in-flight responses (at most %s)…\n", o.shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), o.shutdown)
	defer cancel()
	err = srv.Shutdown(ctx)
	var se *server.ShutdownError
	if errors.As(err, &se) {
		if se.SchedulerStuck {
			// The generation loop may still use the runner: leave it to
			// the process's end.
			r = nil
		}
		return fmt.Errorf("shut down at --shutdown-timeout %s: %v", o.shutdown, err)
	}
	fmt.Fprintln(stderr, "shut down: every response finished")
	return nil
}

// sizeWords is a byte count for people: 1.5 GiB, 640 KiB.
func sizeWords(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
