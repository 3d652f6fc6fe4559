package runner

import (
	"context"
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/golden"
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
		diffs, err := r2.ReplayRun(context.Background(), &res.Predicate)
		r2.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range diffs {
			if !d.Exact {
				t.Errorf("%d threads: prompt %d replays with differences %v", th, d.Index, d.Differ)
			}
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
		diffs, err := r.ReplayRun(context.Background(), &res.Predicate)
		if err != nil {
			t.Fatal(err)
		}
		if diffs[0].Exact != true || diffs[1].Exact || len(diffs[1].Differ) == 0 {
			t.Errorf("%s forged: replay %+v", name, diffs)
		}
	}
}
