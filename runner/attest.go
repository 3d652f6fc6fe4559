package runner

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/verify"
)

// AttestOptions configures AttestRun.
type AttestOptions struct {
	Build attest.RunBuild
	Host  attest.RunHost
	// LoadSeconds is how long opening the model took.
	LoadSeconds float64
	// ManifestKeys, if set, verify the model's manifest.sig.json now
	// (status "verified"); otherwise its presence is recorded ("present").
	ManifestKeys []ed25519.PublicKey
	// ManifestName is the signed model name to require (default: the
	// subject the signature names).
	ManifestName string
	// Golden, if set, is compared step by step (the runs of GoldenRuns).
	Golden     *golden.Golden
	GoldenRuns []golden.Run
	// OnPrompt, if set, is called after each prompt.
	OnPrompt func(i int, p attest.RunPrompt)
}

// PromptRun is one generation with its ledger.
type PromptRun struct {
	Run     golden.Run
	Ledger  ledger.Summary
	Result  engine.GenResult
	Prefill time.Duration
}

// GenerateLedger runs one prompt in a fresh session with its own ledger and
// keeps every step's logits.
func (r *Runner) GenerateLedger(ctx context.Context, prompt []int, maxTokens int, stop []int, s golden.Sampling) (PromptRun, error) {
	pr := PromptRun{Run: golden.Run{PromptTokens: prompt, MaxTokens: maxTokens, Stop: stop, Sampling: s}}
	res, err := r.Do(ctx, Request{Prompt: prompt, Gen: GenOptions(maxTokens, stop, s), KeepLogits: true}, func(t Token) error {
		pr.Run.Generated = append(pr.Run.Generated, t.ID)
		pr.Run.Logits = append(pr.Run.Logits, t.Logits)
		return nil
	})
	pr.Result, pr.Ledger, pr.Prefill = res.GenResult(), res.Ledger, res.Prefill
	return pr, err
}

// AttestRun runs every prompt, each with its own ledger, and returns the
// run predicate (to sign with attest.SignRun) and the runs. With a golden
// record it compares every step; the predicate carries the verdicts.
func (r *Runner) AttestRun(ctx context.Context, prompts []golden.Prompt, opt AttestOptions) (*attest.RunPredicate, []PromptRun, error) {
	if opt.Golden != nil {
		if root := r.Checkpoint.Root().Hex(); opt.Golden.ModelRoot != root {
			return nil, nil, fmt.Errorf("the golden record was made with model root %s, %s has root %s: not the same model: %w", opt.Golden.ModelRoot, r.Dir, root, jnf.ErrVerification)
		}
		if len(opt.GoldenRuns) != len(prompts) {
			return nil, nil, fmt.Errorf("the golden record has %d prompts, the prompt file %d", len(opt.GoldenRuns), len(prompts))
		}
	}
	p, err := r.runModel(opt)
	if err != nil {
		return nil, nil, err
	}
	p.Build, p.Host, p.Mode = opt.Build, opt.Host, r.Mode()
	p.StartedAt = time.Now().UTC()
	tensors, bytes := r.Engine.Loaded()
	p.Load = attest.RunLoad{Tensors: tensors, Bytes: bytes, Seconds: opt.LoadSeconds}
	p.Hashed = map[jnf.Alg]int64{jnf.BLAKE3: bytes}
	var totals attest.RunTotals
	var runs []PromptRun
	exact := true
	for i, pl := range prompts {
		ids, err := r.PromptTokens(pl)
		if err != nil {
			return nil, nil, fmt.Errorf("prompt line %d: %w", pl.Line, err)
		}
		stop := pl.Stop
		if stop == nil {
			stop = r.DefaultStops()
		}
		if opt.Golden != nil {
			g := &opt.GoldenRuns[i]
			if !slices.Equal(g.PromptTokens, ids) || !slices.Equal(g.Stop, stop) || g.MaxTokens != pl.MaxTokens || g.Sampling != pl.Sampling {
				return nil, nil, fmt.Errorf("prompt line %d differs from the golden record's prompt %d (tokens, stop, max_tokens or sampling): give the prompt file it was recorded from", pl.Line, i)
			}
		}
		run, err := r.GenerateLedger(ctx, ids, pl.MaxTokens, stop, pl.Sampling)
		if err != nil {
			return nil, nil, fmt.Errorf("prompt line %d: %w", pl.Line, err)
		}
		s := run.Ledger
		rp := attest.RunPrompt{Index: i, Source: pl.Source, PromptTokens: ids, Generated: run.Run.Generated, MaxTokens: pl.MaxTokens,
			Stop: append([]int{}, stop...), Sampling: pl.Sampling, StopReason: run.Result.StopReason,
			Transcript:  attest.TranscriptDigest(r.Checkpoint.Root(), ids, run.Run.Generated),
			LogitsChain: s.LogitsChain, RoutingDigest: s.RoutingDigest, RoutingEntries: s.RoutingEntries,
			ExpertsUsed: len(s.Experts), Hashed: s.BytesHashed,
			PrefillSeconds: run.Result.Prefill.Seconds(), DecodeSeconds: run.Result.Decode.Seconds()}
		if opt.Golden != nil {
			d := golden.Compare(i, &opt.GoldenRuns[i], &run.Run)
			rp.Golden = &attest.PromptGolden{Exact: d.Exact(), Steps: d.Steps, Identical: d.Identical, FirstDivergent: d.FirstDivergent,
				TokensEqual: d.TokensEqual && d.PromptEqual && d.Compared == d.Steps, MaxAbs: d.MaxAbs}
			exact = exact && rp.Golden.Exact
		}
		totals.Add(&s)
		for a, n := range s.BytesHashed {
			p.Hashed[a] += n
		}
		p.Prompts = append(p.Prompts, rp)
		runs = append(runs, run)
		if opt.OnPrompt != nil {
			opt.OnPrompt(i, rp)
		}
	}
	p.Experts, p.KPerLayer = totals.Experts(), totals.KPerLayer()
	if opt.Golden != nil {
		p.Golden = &attest.RunGolden{ID: opt.Golden.ID(), Exact: exact}
	}
	if p.Integrity, err = r.finalScrub(); err != nil {
		return nil, nil, err
	}
	p.FinishedAt = time.Now().UTC()
	return p, runs, nil
}

// finalScrub re-hashes every copy still resident after the last prompt —
// the hierarchy's and the model's non-expert tensors — so a report is
// never signed over copies that changed in memory, and says what the run
// re-verified.
func (r *Runner) finalScrub() (attest.RunIntegrity, error) {
	var in attest.RunIntegrity
	if r.Tier == nil {
		n, err := r.Engine.Scrub()
		if err != nil {
			return attest.RunIntegrity{}, err // a jnf.MismatchError
		}
		in = attest.RunIntegrity{Scrub: "off", Passes: 1, ScrubbedBytes: n, FinalBytes: n}
	} else {
		before := r.Tier.Stats().ScrubbedBytes
		if _, err := r.Tier.ScrubAll(); err != nil {
			return attest.RunIntegrity{}, err
		}
		st := r.Tier.Stats()
		in = attest.RunIntegrity{Scrub: r.Tier.Options().Scrub.String(), Passes: st.ScrubPasses, ScrubbedBytes: st.ScrubbedBytes,
			ScrubFailures: st.ScrubFailures, FinalBytes: st.ScrubbedBytes - before}
	}
	// What a device backend verified where the kernels read the bytes.
	be := r.Engine.Backend()
	in.DeviceVerify = be.Residency().VerifyCopies
	if m, ok := be.(backend.Meter); ok {
		c := m.Counters()
		in.DeviceVerifiedBytes, in.DeviceScrubbedBytes = c.DeviceVerifiedBytes, c.DeviceScrubbedBytes
	}
	return in, nil
}

// runModel fills the predicate's model section from the checkpoint.
func (r *Runner) runModel(opt AttestOptions) (*attest.RunPredicate, error) {
	ck, cfg := r.Checkpoint, r.Config
	p := &attest.RunPredicate{Model: attest.RunModel{Root: ck.Root(), WeightsRoot: ck.WeightsRoot(), Arch: string(cfg.Arch),
		Layers: cfg.Layers, Experts: cfg.Experts, TopK: cfg.TopK, ConfigJSON: base64.StdEncoding.EncodeToString(ck.ConfigBytes()),
		Files: map[string]jnf.Digest{}}}
	for _, e := range ck.Manifest().Entries {
		if e.Kind == jnf.KindFile {
			d, err := jnf.ParseHex(jnf.SHA256, e.SHA256)
			if err != nil {
				return nil, err
			}
			p.Model.Files[e.Name] = d
		}
	}
	sig, err := manifestSignature(ck.Dir(), opt)
	if err != nil {
		return nil, err
	}
	p.Model.Signature = sig
	return p, nil
}

// manifestSignature reports the model's signature status, verifying it
// when keys are given.
func manifestSignature(dir string, opt AttestOptions) (attest.RunManifestSignature, error) {
	path := filepath.Join(dir, verify.SignatureFile)
	b, err := jnf.ReadFileLimit(path, jnf.MaxEnvelopeSize, verify.SignatureFile)
	if errors.Is(err, fs.ErrNotExist) {
		if len(opt.ManifestKeys) > 0 {
			return attest.RunManifestSignature{}, fmt.Errorf("%s is not signed (no %s), but --manifest-pub asks to verify its signature: %w", dir, verify.SignatureFile, jnf.ErrVerification)
		}
		return attest.RunManifestSignature{Status: attest.SignatureNone}, nil
	}
	if err != nil {
		return attest.RunManifestSignature{}, err
	}
	d := jnf.SHA256Bytes(b)
	env, err := attest.ParseEnvelope(b)
	if err != nil {
		return attest.RunManifestSignature{}, fmt.Errorf("%s: %w", path, err)
	}
	st := attest.RunManifestSignature{Status: attest.SignaturePresent, Envelope: &d}
	if len(env.Signatures) == 1 {
		st.KeyID = env.Signatures[0].KeyID
	}
	if len(opt.ManifestKeys) == 0 {
		return st, nil
	}
	name := opt.ManifestName
	if name == "" {
		signed, err := attest.SignedManifestNames(dir, opt.ManifestKeys)
		if err != nil {
			return attest.RunManifestSignature{}, err
		}
		if len(signed) != 1 {
			return attest.RunManifestSignature{}, fmt.Errorf("%s: the signature names %d models (%s): choose one with --manifest-name", path, len(signed), strings.Join(signed, ", "))
		}
		name = signed[0]
	}
	res, err := attest.VerifyManifest(dir, name, opt.ManifestKeys, attest.VerifyManifestOptions{UnsafeSkipData: true})
	if err != nil {
		return attest.RunManifestSignature{}, err
	}
	st.Status, st.KeyID = attest.SignatureVerified, res.KeyID
	if res.MatchedSubject != nil {
		st.Subject = res.MatchedSubject.Name
	}
	return st, nil
}

// ReplayDiff is how one prompt's replay compares with a run report.
type ReplayDiff struct {
	Index int  `json:"index"`
	Exact bool `json:"exact"`
	// Differ names the prompt's fields that differ (generated,
	// stop_reason, logits_chain, routing_digest, routing_entries,
	// transcript, experts_used, golden).
	Differ    []string `json:"differ,omitempty"`
	Generated []int    `json:"generated"`
}

// ReplayOptions configures ReplayRun.
type ReplayOptions struct {
	// Golden, if set, is the golden record the report names: the replay
	// compares every prompt with it (the runs of GoldenRuns) and the
	// report's golden verdicts must be what that comparison gives.
	Golden     *golden.Golden
	GoldenRuns []golden.Run
}

// Replay is a run report replayed.
type Replay struct {
	// Prompts are the per-prompt comparisons, in order.
	Prompts []ReplayDiff `json:"prompts"`
	// Differences are every claim the replay did not re-derive, run-level
	// (experts, k_per_layer, golden, the model) and per prompt, each with
	// its first differing item; empty when the replay re-derives the
	// report.
	Differences []attest.Difference `json:"differences,omitempty"`
	// Predicate is what the replay produced.
	Predicate *attest.RunPredicate `json:"-"`
}

// Exact reports whether the replay re-derived every claim it compares.
func (r *Replay) Exact() bool { return len(r.Differences) == 0 }

// ReplayRun re-runs every prompt of a (verified) run predicate on this
// model with the report's tokens and settings, through AttestRun (so the
// replay computes the report the same way the run did), and compares
// everything the run computed (attest.CompareRuns): every prompt's
// generated tokens, stop reason, logits chain, routing digest and entries,
// transcript and experts_used, the run's experts list (layer, expert,
// digest, token slots) and k per layer, and with opt.Golden the golden
// verdicts. A report that names another golden record than opt.Golden
// differs in "golden.id"; one whose prompts are not that record's, in
// "prompts[i]".
func (r *Runner) ReplayRun(ctx context.Context, p *attest.RunPredicate, opt ReplayOptions) (*Replay, error) {
	if root := r.Checkpoint.Root(); !root.Equal(p.Model.Root) {
		return nil, fmt.Errorf("the report is for the model with root %s, %s has root %s: %w", p.Model.Root.Hex(), r.Dir, root.Hex(), jnf.ErrVerification)
	}
	prompts := make([]golden.Prompt, len(p.Prompts))
	for i, pr := range p.Prompts {
		prompts[i] = golden.Prompt{Line: i + 1, Source: pr.Source, Tokens: pr.PromptTokens, MaxTokens: pr.MaxTokens,
			Stop: append([]int{}, pr.Stop...), Sampling: pr.Sampling}
	}
	var pre []attest.Difference
	aopt := AttestOptions{}
	if g := opt.Golden; g != nil {
		switch {
		case p.Golden == nil:
			return nil, fmt.Errorf("the report names no golden record to compare with")
		case len(opt.GoldenRuns) != len(prompts):
			pre = append(pre, attest.Difference{Field: "golden", Prompt: -1, Claimed: fmt.Sprintf("%d prompts", len(prompts)),
				Replayed: fmt.Sprintf("the golden record has %d", len(opt.GoldenRuns))})
		default:
			aopt.Golden, aopt.GoldenRuns = g, opt.GoldenRuns
			for i, pl := range prompts {
				gr := &opt.GoldenRuns[i]
				if !slices.Equal(gr.PromptTokens, pl.Tokens) || !slices.Equal(gr.Stop, pl.Stop) || gr.MaxTokens != pl.MaxTokens || gr.Sampling != pl.Sampling {
					pre = append(pre, attest.Difference{Field: fmt.Sprintf("prompts[%d]", i), Prompt: i, Claimed: "the report's prompt",
						Replayed: fmt.Sprintf("the golden record's prompt %d differs (tokens, stop, max_tokens or sampling)", i)})
					aopt.Golden, aopt.GoldenRuns = nil, nil
					break
				}
			}
		}
	}
	q, runs, err := r.AttestRun(ctx, prompts, aopt)
	if err != nil {
		return nil, err
	}
	out := &Replay{Predicate: q, Differences: append(pre, attest.CompareRuns(p, q)...)}
	for i, pr := range p.Prompts {
		d := ReplayDiff{Index: pr.Index, Generated: runs[i].Run.Generated}
		for _, df := range out.Differences {
			if df.Prompt == pr.Index {
				d.Differ = append(d.Differ, strings.TrimPrefix(df.Field, fmt.Sprintf("prompts[%d].", pr.Index)))
			}
		}
		d.Exact = len(d.Differ) == 0
		out.Prompts = append(out.Prompts, d)
	}
	return out, nil
}

// HostFacts describes this machine for a run report.
func HostFacts() attest.RunHost {
	h := attest.RunHost{OS: hostOS(), Cores: numCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		h.CPU = cpuModel(b)
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		h.MemBytes = memTotal(b)
	}
	return h
}

// ResponsePredicate builds the run predicate of one generation that ran
// through a scheduler (a served response): the model, build and host
// facts as AttestRun states them and one prompt from the request's own
// ledger, so that a report never mixes requests that shared batch steps.
// source names the request (its attestation id). A generation that
// Request.StopAfter ended (a stop string) is recorded with max_tokens the
// number of tokens it generated, so a replay stops where it did. Nothing
// is re-hashed at the end (final_scrub_bytes 0): the integrity section
// states the scrub schedule and what it has done so far.
func (r *Runner) ResponsePredicate(source string, res Result, opt AttestOptions) (*attest.RunPredicate, error) {
	p, err := r.runModel(opt)
	if err != nil {
		return nil, err
	}
	s := res.Ledger
	now := time.Now().UTC()
	p.Build, p.Host, p.Mode = opt.Build, opt.Host, s.Mode
	p.StartedAt = now.Add(-time.Duration((res.Queued + res.Prefill + res.Decode).Nanoseconds()))
	p.FinishedAt = now
	tensors, bytes := r.Engine.Loaded()
	p.Load = attest.RunLoad{Tensors: tensors, Bytes: bytes, Seconds: opt.LoadSeconds}
	p.Hashed = map[jnf.Alg]int64{jnf.BLAKE3: bytes}
	for a, n := range s.BytesHashed {
		p.Hashed[a] += n
	}
	g := res.Gen
	maxTokens := g.MaxTokens
	if res.StopReason == StopSequence {
		maxTokens = len(res.Tokens)
	}
	stop := append([]int{}, g.Stop...)
	sm := golden.Sampling{Temperature: float64(g.Temperature), TopP: float64(g.TopP), TopK: g.TopK, Seed: g.Seed}
	p.Prompts = []attest.RunPrompt{{Index: 0, Source: source, PromptTokens: s.PromptTokens, Generated: s.Generated, MaxTokens: maxTokens,
		Stop: stop, Sampling: sm, StopReason: res.StopReason,
		Transcript:  attest.TranscriptDigest(r.Checkpoint.Root(), s.PromptTokens, s.Generated),
		LogitsChain: s.LogitsChain, RoutingDigest: s.RoutingDigest, RoutingEntries: s.RoutingEntries,
		ExpertsUsed: len(s.Experts), Hashed: s.BytesHashed,
		PrefillSeconds: res.Prefill.Seconds(), DecodeSeconds: res.Decode.Seconds()}}
	p.Experts, p.KPerLayer = s.Experts, s.KPerLayer
	p.Integrity = attest.RunIntegrity{Scrub: "off"}
	if r.Tier != nil {
		st := r.Tier.Stats()
		p.Integrity = attest.RunIntegrity{Scrub: r.Tier.Options().Scrub.String(), Passes: st.ScrubPasses, ScrubbedBytes: st.ScrubbedBytes,
			ScrubFailures: st.ScrubFailures}
	}
	return p, nil
}
