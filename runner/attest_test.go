package runner

import (
	"context"
	"crypto/ed25519"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/backend/backendtest"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/tier"
)

// TestAttestRunSignVerifyReplay: a run report of the default model verifies
// offline against its manifest, replays bit for bit on 1 and 3 threads, and
// a report whose routing or tokens were changed (and re-signed) does not
// replay.
func TestAttestRunSignVerifyReplay(t *testing.T) {
	dir := defaultModel(t)
	ps, err := golden.ParsePrompts(strings.NewReader(prompts), "p.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Open(context.Background(), dir, Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	g, gruns, err := r.Record(context.Background(), ps, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := golden.Write(t.TempDir()+"/g", g, gruns); err != nil {
		t.Fatal(err)
	}
	p, runs, err := r.AttestRun(context.Background(), ps, AttestOptions{Host: HostFacts(), Golden: g, GoldenRuns: gruns,
		Build: attest.RunBuild{Tarfa: "test", Backend: "cpu", Threads: 1, Kernels: "scalar"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 3 || !p.Golden.Exact || p.Model.Signature.Status != attest.SignatureNone || p.Host.Cores == 0 {
		t.Fatalf("predicate %+v", p)
	}
	for i, pr := range p.Prompts {
		if !slices.Equal(pr.Generated, gruns[i].Generated) || pr.Golden == nil || !pr.Golden.Exact {
			t.Errorf("prompt %d: %v vs golden %v", i, pr.Generated, gruns[i].Generated)
		}
		if chain := golden.Chain(r.Checkpoint.Root().Sum, &gruns[i]); pr.LogitsChain != chain[len(chain)-1] {
			t.Errorf("prompt %d: logits chain %s, the golden record's %s", i, pr.LogitsChain, chain[len(chain)-1])
		}
	}
	pub, priv, _ := ed25519.GenerateKey(nil)
	env, err := attest.SignRun(priv, *p)
	if err != nil {
		t.Fatal(err)
	}
	res, err := attest.VerifyRun(env, []ed25519.PublicKey{pub}, r.Checkpoint.Manifest())
	if err != nil {
		t.Fatalf("offline verification of a genuine report: %v", err)
	}
	for _, th := range []int{1, 3} {
		r2, err := Open(context.Background(), dir, Options{Threads: th})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := r2.ReplayRun(context.Background(), &res.Predicate, ReplayOptions{Golden: g, GoldenRuns: gruns})
		r2.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Exact() || len(rep.Prompts) != 3 {
			t.Errorf("%d threads: the replay differs: %v", th, rep.Differences)
		}
	}
	// A forged report (routing digest or a token changed, transcript
	// recomputed, re-signed) verifies offline but not by replay.
	for name, edit := range map[string]func(*attest.RunPrompt){
		"routing": func(pr *attest.RunPrompt) { pr.RoutingDigest = strings.Repeat("0", 64) },
		"token": func(pr *attest.RunPrompt) {
			pr.Generated = append([]int(nil), pr.Generated...)
			pr.Generated[len(pr.Generated)-1] ^= 1
			pr.Transcript = attest.TranscriptDigest(p.Model.Root, pr.PromptTokens, pr.Generated)
		},
	} {
		q := *p
		q.Golden = nil
		q.Prompts = append([]attest.RunPrompt(nil), p.Prompts...)
		for i := range q.Prompts {
			q.Prompts[i].Golden = nil
		}
		edit(&q.Prompts[1])
		env, err := attest.SignRun(priv, q)
		if err != nil {
			t.Fatal(err)
		}
		res, err := attest.VerifyRun(env, []ed25519.PublicKey{pub}, r.Checkpoint.Manifest())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rep, err := r.ReplayRun(context.Background(), &res.Predicate, ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diffs := rep.Prompts; diffs[0].Exact != true || diffs[1].Exact || len(diffs[1].Differ) == 0 || rep.Exact() {
			t.Errorf("%s forged: replay %+v", name, rep)
		}
	}
	// The replay compares every field itself, also those the offline
	// checks refuse first: each lie below is told straight to ReplayRun.
	for _, c := range []struct {
		field string
		edit  func(*attest.RunPredicate)
	}{
		{"k_per_layer", func(q *attest.RunPredicate) {
			q.KPerLayer = append([]ledger.LayerK(nil), q.KPerLayer...)
			q.KPerLayer[1] = ledger.LayerK{Layer: q.KPerLayer[1].Layer, K: map[int]int64{1: 3}}
		}},
		{"experts", func(q *attest.RunPredicate) {
			q.Experts = append([]ledger.ExpertUse(nil), q.Experts...)
			q.Experts[0].Tokens = 1
		}},
		{"prompts[2].stop_reason", func(q *attest.RunPredicate) { q.Prompts[2].StopReason = "eos" }},
		{"prompts[0].routing_entries", func(q *attest.RunPredicate) { q.Prompts[0].RoutingEntries++ }},
		{"mode", func(q *attest.RunPredicate) { q.Mode = ledger.ModeFast }},
	} {
		q := res.Predicate
		q.Golden = nil
		q.Prompts = append([]attest.RunPrompt(nil), res.Predicate.Prompts...)
		for i := range q.Prompts {
			q.Prompts[i].Golden = nil
		}
		c.edit(&q)
		rep, err := r.ReplayRun(context.Background(), &q, ReplayOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Differences) != 1 || rep.Differences[0].Field != c.field {
			t.Errorf("%s told to the replay: differences %v", c.field, rep.Differences)
		}
	}
}

// TestAttestRunFinalScrub: before a report is built every copy still
// resident is re-hashed — the hierarchy's and the model's non-expert
// tensors — and the report says so; a copy found changed then refuses the
// report.
func TestAttestRunFinalScrub(t *testing.T) {
	dir := defaultModel(t)
	ps, err := golden.ParsePrompts(strings.NewReader(prompts), "p.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	build := attest.RunBuild{Tarfa: "test", Backend: "cpu", Threads: 1, Kernels: "scalar"}
	// No RAM tier: what the final scrub hashes is the model's own tensors.
	r, err := Open(context.Background(), dir, Options{Threads: 1, Tier: &tier.Options{StagingBudget: tier.Auto, Scrub: tier.Scrub{OnUse: true}}})
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := r.AttestRun(context.Background(), ps, AttestOptions{Host: HostFacts(), Build: build})
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, loaded := r.Engine.Loaded()
	if in := p.Integrity; in.Scrub != "use" || in.Passes != 1 || in.FinalBytes <= 0 || in.FinalBytes > loaded || in.ScrubbedBytes < in.FinalBytes || in.ScrubFailures != 0 {
		t.Errorf("integrity %+v (%d bytes loaded)", in, loaded)
	}
	// A resident copy found changed at the end: no report.
	var calls atomic.Int64
	bad := &jnf.MismatchError{What: "model.embed_tokens.weight (resident copy)"}
	r, err = Open(context.Background(), dir, Options{Threads: 1, Tier: &tier.Options{RAMBudget: tier.Auto, StagingBudget: tier.Auto,
		ScrubExtra: func() (int64, error) { calls.Add(1); return 0, bad }}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, _, err = r.AttestRun(context.Background(), ps, AttestOptions{Host: HostFacts(), Build: build})
	var f *tier.ScrubFault
	if !errors.As(err, &f) || !errors.Is(err, jnf.ErrVerification) || !strings.Contains(err.Error(), "embed_tokens") || calls.Load() != 1 {
		t.Fatalf("attest run over a changed resident copy: %v (%d scrubs)", err, calls.Load())
	}
}

// verifyingDevice is a simulated device backend that says it re-hashes its
// copies on the device and reports fixed counts of it.
type verifyingDevice struct{ backend.Backend }

func (d verifyingDevice) Residency() backend.Residency {
	r := d.Backend.Residency()
	r.VerifyCopies = true
	return r
}

func (d verifyingDevice) Counters() backend.Counters {
	return backend.Counters{DeviceVerifiedBytes: 12345, DeviceScrubbedBytes: 678}
}

// TestAttestRunDeviceIntegrity: a report states what a device backend
// verified in device memory (and nothing of it on the CPU backend).
func TestAttestRunDeviceIntegrity(t *testing.T) {
	dir := defaultModel(t)
	ps, err := golden.ParsePrompts(strings.NewReader(prompts), "p.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	build := attest.RunBuild{Tarfa: "test", Backend: "cuda", Threads: 1, Kernels: "scalar"}
	for _, dev := range []bool{true, false} {
		opt := Options{Threads: 1, Tier: &tier.Options{StagingBudget: tier.Auto}}
		if dev {
			opt.NewBackend = func() (backend.Backend, error) { return verifyingDevice{backendtest.NewDevice(1, 0)}, nil }
		}
		r, err := Open(context.Background(), dir, opt)
		if err != nil {
			t.Fatal(err)
		}
		p, _, err := r.AttestRun(context.Background(), ps, AttestOptions{Host: HostFacts(), Build: build})
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		in := p.Integrity
		if dev && (!in.DeviceVerify || in.DeviceVerifiedBytes != 12345 || in.DeviceScrubbedBytes != 678) {
			t.Errorf("device backend: integrity %+v; want device_verify and its counts", in)
		}
		if !dev && (in.DeviceVerify || in.DeviceVerifiedBytes != 0 || in.DeviceScrubbedBytes != 0) {
			t.Errorf("cpu backend: integrity %+v; want no device verification", in)
		}
	}
}

// TestStopReasonNames: a run report's stop reasons are the engine's and the
// scheduler's names, so the offline check of stop_reason knows every one.
func TestStopReasonNames(t *testing.T) {
	if attest.StopToken != engine.StopToken || attest.StopLength != engine.StopLength || attest.StopSequence != StopSequence {
		t.Errorf("attest's stop reasons %q, %q, %q; the engine's %q, %q, the scheduler's %q",
			attest.StopToken, attest.StopLength, attest.StopSequence, engine.StopToken, engine.StopLength, StopSequence)
	}
}
