package main

import (
	"crypto/ed25519"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/verify"
)

// TestAttestVerifyForgedClaims: a real report of tarfa attest run, forged by
// its own signer (predicate edited, transcripts and subjects recomputed,
// re-signed with the same key), for each lie of issue 20: both verify modes
// exit 3 naming the field, or — for a lie only a replay can see — offline
// passes and the replay exits 3 naming it. What neither mode checks is
// printed as stated, not checked, with no check mark.
func TestAttestVerifyForgedClaims(t *testing.T) {
	tmp := t.TempDir()
	model := filepath.Join(tmp, "m")
	if _, err := runCLI(t, "", "convert", fixtures+"qwen35moe-dev-c/checkpoint", "--out", model); err != nil {
		t.Fatal(err)
	}
	key, other := filepath.Join(tmp, "k"), filepath.Join(tmp, "o")
	for _, k := range []string{key, other} {
		if _, err := runCLI(t, "", "keys", "generate", "--out", k); err != nil {
			t.Fatal(err)
		}
	}
	prompts := filepath.Join(tmp, "p.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [5, 9, 200], "max_tokens": 5}
{"tokens": [17, 3], "max_tokens": 4, "temperature": 0.8, "seed": 42}
`), 0o644)
	g := filepath.Join(tmp, "g")
	if _, err := runCLI(t, "", "golden", "record", "--model", model, "--prompts", prompts, "--out", g); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(tmp, "r.json")
	if out, err := runCLI(t, "", "attest", "run", "--model", model, "--prompts", prompts, "--key", key, "--out", report, "--golden", g); err != nil ||
		!strings.Contains(out, "2 prompts, 9 tokens generated") {
		t.Fatalf("attest run: %v\n%s", err, out)
	}
	priv, err := attest.LoadPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	read := func(t *testing.T, path string) attest.RunPredicate {
		t.Helper()
		env, err := readEnvelope(path)
		if err != nil {
			t.Fatal(err)
		}
		p, _, err := attest.ReadRunUnverified(env)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	n := 0
	forge := func(t *testing.T, from string, edit func(*attest.RunPredicate)) string {
		t.Helper()
		p := read(t, from)
		edit(&p)
		for i := range p.Prompts {
			pr := &p.Prompts[i]
			pr.Transcript = attest.TranscriptDigest(p.Model.Root, pr.PromptTokens, pr.Generated)
		}
		raw, _ := json.Marshal(p)
		st := attest.Statement{Type: attest.StatementTypeV1, PredicateType: attest.PredicateRun, Predicate: raw}
		for _, pr := range p.Prompts {
			st.Subject = append(st.Subject, attest.Subject{Name: attest.PromptSubject(pr.Index), Digest: attest.NewDigestSet(pr.Transcript)})
		}
		env, err := attest.SignStatement(priv, st)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(env)
		n++
		path := filepath.Join(tmp, "forged"+string(rune('a'+n))+".json")
		os.WriteFile(path, b, 0o644)
		return path
	}
	offline := func(path string, extra ...string) (string, error) {
		return runCLI(t, "", append([]string{"attest", "verify", path, "--pub", key + ".pub", "--manifest", filepath.Join(model, verify.ManifestFile)}, extra...)...)
	}
	replay := func(path string, extra ...string) (string, error) {
		return runCLI(t, "", append([]string{"attest", "verify", path, "--pub", key + ".pub", "--model", model, "--replay"}, extra...)...)
	}

	// The honest report: what each mode proves, and what it does not check.
	out, err := offline(report)
	if err != nil {
		t.Fatalf("offline: %v\n%s", err, out)
	}
	stated := out[strings.Index(out, "stated, not checked:"):]
	for _, want := range []string{attest.Offline, "✓ 2 subjects", "✓ experts: ", "top-k 2 × 12 positions", "stated, not checked:", "  - build (", "  - host (", attest.StatedUntilReplay, "golden verdict against"} {
		if !strings.Contains(out, want) {
			t.Errorf("offline output: no %q in\n%s", want, out)
		}
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "✓") && (strings.Contains(l, "build") || strings.Contains(l, "host") || strings.Contains(l, "timings")) {
			t.Errorf("a check mark for a claim that is not checked: %q", l)
		}
	}
	if strings.Contains(stated, "✓") {
		t.Errorf("stated claims carry a check mark:\n%s", stated)
	}
	out, err = replay(report, "--golden", g)
	if err != nil || !strings.Contains(out, attest.Replayed) || !strings.Contains(out, "re-derived, identical") ||
		!strings.Contains(out, "golden verdicts: re-derived") || strings.Contains(out, attest.StatedUntilReplay) || strings.Contains(out, "golden verdict against") ||
		!strings.Contains(out, "  - build (") {
		t.Errorf("replay of the honest report: %v\n%s", err, out)
	}
	// report show: the prompts' sources and outputs, decoded with a
	// tokenizer when one is given; what the verification did not check.
	tokDir := filepath.Join("..", "..", "validation", "testdata", "qwen3-tokenizer", "flags-tokenizer")
	out, err = runCLI(t, "", "report", "show", report, "--pub", key+".pub", "--manifest", model, "--tokenizer", tokDir)
	if err != nil || !strings.Contains(out, "decoded with "+filepath.Join(tokDir, "tokenizer.json")+" (the report's model lists no tokenizer.json)") ||
		!strings.Contains(out, `source  "{\"tokens\": [5, 9, 200], \"max_tokens\": 5}"`) || !strings.Contains(out, "stated, not checked: ") {
		t.Errorf("report show --tokenizer: %v\n%s", err, out)
	}
	p := read(t, report)
	positions := int64(0)
	for _, pr := range p.Prompts {
		positions += int64(len(pr.PromptTokens) + len(pr.Generated) - 1)
	}
	lengthPrompt := slices.IndexFunc(p.Prompts, func(pr attest.RunPrompt) bool { return pr.StopReason == attest.StopLength })
	if lengthPrompt < 0 {
		t.Fatalf("no prompt of the fixture stopped for length: %+v", p.Prompts)
	}

	// Lies both modes refuse.
	for _, c := range []struct {
		name string
		edit func(*attest.RunPredicate)
		want string
	}{
		{"experts: []", func(p *attest.RunPredicate) {
			p.Experts = []ledger.ExpertUse{}
			for i := range p.Prompts {
				p.Prompts[i].ExpertsUsed = 0
			}
		}, "experts: layer"},
		{"one expert per layer, k_per_layer still top-k", func(p *attest.RunPredicate) {
			var one []ledger.ExpertUse
			for _, u := range p.Experts {
				if len(one) == 0 || one[len(one)-1].Layer != u.Layer {
					u.Tokens = int64(p.Model.TopK) * positions
					one = append(one, u)
				}
			}
			p.Experts = one
			for i := range p.Prompts {
				p.Prompts[i].ExpertsUsed = min(p.Prompts[i].ExpertsUsed, len(one))
			}
		}, "token slots, but the prompts ran"},
		{"every tokens 1", func(p *attest.RunPredicate) {
			for i := range p.Experts {
				p.Experts[i].Tokens = 1
			}
		}, "token slots, want top-k 2"},
		{"an entry duplicated", func(p *attest.RunPredicate) { p.Experts = slices.Insert(p.Experts, 3, p.Experts[3]) }, "experts[4]"},
		{"stop_reason length → stop", func(p *attest.RunPredicate) { p.Prompts[lengthPrompt].StopReason = attest.StopToken }, "stop_reason \"stop\", but the last generated token"},
		{"stop_reason outside the set", func(p *attest.RunPredicate) { p.Prompts[0].StopReason = "eos" }, `prompts[0].stop_reason "eos"`},
		{"mode outside the set", func(p *attest.RunPredicate) { p.Mode = "turbo" }, `mode "turbo"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := forge(t, report, c.edit)
			for mode, verify := range map[string]func(string, ...string) (string, error){"offline": offline, "replay": replay} {
				if out, err := verify(f); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: exit %d, %v, want 3 naming %q\n%s", mode, exitCode(err), err, c.want, out)
				}
			}
		})
	}

	// Lies consistent with the manifest: offline shows them consistent
	// (exit 0); the replay refuses them, naming the field and the item.
	for _, c := range []struct {
		name string
		edit func(*attest.RunPredicate)
		want string
	}{
		{"logits chain", func(p *attest.RunPredicate) { p.Prompts[1].LogitsChain = strings.Repeat("0", 64) }, "prompts[1].logits_chain"},
		{"experts_used", func(p *attest.RunPredicate) { p.Prompts[0].ExpertsUsed-- }, "prompts[0].experts_used"},
		{"a token slot moved to another expert", func(p *attest.RunPredicate) {
			for i := 1; i < len(p.Experts); i++ {
				a, b := &p.Experts[i-1], &p.Experts[i]
				if a.Layer == b.Layer && a.Tokens > 1 && b.Tokens < positions {
					a.Tokens--
					b.Tokens++
					return
				}
			}
			t.Fatal("no two experts of a layer to move a slot between")
		}, "experts: the report says item"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := forge(t, report, c.edit)
			if out, err := offline(f); err != nil {
				t.Errorf("offline: %v\n%s", err, out)
			}
			if out, err := replay(f); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), c.want) || !strings.Contains(out, "✗ "+c.want) {
				t.Errorf("replay: exit %d, %v, want 3 naming %q\n%s", exitCode(err), err, c.want, out)
			}
		})
	}

	// The golden verdict, re-derived with --golden: a run one ulp away from
	// its golden record whose report claims it exact; and a report replayed
	// against another golden record than the one it names.
	gr, runs, err := golden.Read(g)
	if err != nil {
		t.Fatal(err)
	}
	runs[1].Logits[2][7] = math.Nextafter32(runs[1].Logits[2][7], 1e9)
	gDiff := filepath.Join(tmp, "gdiff")
	if err := golden.Write(gDiff, gr, runs); err != nil {
		t.Fatal(err)
	}
	r4 := filepath.Join(tmp, "r4.json")
	if _, err := runCLI(t, "", "attest", "run", "--model", model, "--prompts", prompts, "--key", key, "--out", r4, "--golden", gDiff); exitCode(err) != exitNotExact {
		t.Fatalf("attest run against a golden one ulp away: exit %d, %v", exitCode(err), err)
	}
	if out, err := replay(r4, "--golden", gDiff); err != nil {
		t.Errorf("replay of an honest report that says not exact: %v\n%s", err, out)
	}
	lie := forge(t, r4, func(p *attest.RunPredicate) {
		p.Golden.Exact = true
		for i := range p.Prompts {
			g := p.Prompts[i].Golden
			g.Exact, g.TokensEqual, g.Identical, g.FirstDivergent, g.MaxAbs = true, true, g.Steps, -1, 0
		}
	})
	if out, err := offline(lie); err != nil {
		t.Errorf("golden lie, offline: %v\n%s", err, out)
	}
	if _, err := replay(lie, "--golden", gDiff); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "prompts[1].golden") || !strings.Contains(err.Error(), "golden.exact") {
		t.Errorf("golden lie, replay --golden: exit %d, %v", exitCode(err), err)
	}
	if _, err := replay(report, "--golden", gDiff); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "golden.id") {
		t.Errorf("replay against another golden record: exit %d, %v", exitCode(err), err)
	}
	seed := forge(t, report, func(p *attest.RunPredicate) { p.Prompts[1].Sampling.Seed++ })
	if _, err := replay(seed, "--golden", g); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "the golden record's prompt 1 differs") {
		t.Errorf("a report whose prompt is not its golden record's: exit %d, %v", exitCode(err), err)
	}
	if _, err := offline(report, "--golden", g); exitCode(err) != exitError {
		t.Errorf("--golden without --replay: exit %d, %v", exitCode(err), err)
	}

	// p10: the wrong kind of input is exit 1, a malformed envelope exit 3.
	notJSON := filepath.Join(tmp, "notes.txt")
	os.WriteFile(notJSON, []byte("not a report\n"), 0o644)
	for _, path := range []string{notJSON, filepath.Join(model, verify.ManifestFile)} {
		if _, err := offline(path); exitCode(err) != exitError || !strings.Contains(err.Error(), "is not a run report") ||
			path == notJSON && !strings.Contains(err.Error(), "not a JSON object") {
			t.Errorf("%s: exit %d, %v, want 1", path, exitCode(err), err)
		}
	}
	rb, _ := os.ReadFile(report)
	dup := filepath.Join(tmp, "dup.json")
	os.WriteFile(dup, []byte(strings.Replace(string(rb), "{", `{"payloadType": "x",`, 1)), 0o644)
	if _, err := offline(dup); exitCode(err) != exitNotExact {
		t.Errorf("an envelope with a duplicated key: exit %d, %v, want 3", exitCode(err), err)
	}

	// The manifest_signature claim: the model signed by one key, a report
	// claiming it verified by another.
	opriv, err := attest.LoadPrivateKey(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := attest.SignManifest(model, "dev-c", opriv); err != nil {
		t.Fatal(err)
	}
	sig, _ := os.ReadFile(filepath.Join(model, verify.SignatureFile))
	d := jnf.SHA256Bytes(sig)
	kid, _ := attest.KeyID(priv.Public().(ed25519.PublicKey))
	claim := forge(t, report, func(p *attest.RunPredicate) {
		p.Model.Signature = attest.RunManifestSignature{Status: attest.SignatureVerified, KeyID: kid, Subject: "dev-c", Envelope: &d}
	})
	if _, err := offline(claim, "--manifest-pub", other+".pub"); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "none of the trusted manifest keys") {
		t.Errorf("a signature claimed by an untrusted key, --manifest-pub: exit %d, %v", exitCode(err), err)
	}
	if _, err := offline(claim); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "is signed by keyid") {
		t.Errorf("a signature claimed by another key than the envelope's: exit %d, %v", exitCode(err), err)
	}
	okid, _ := attest.KeyID(opriv.Public().(ed25519.PublicKey))
	honest := forge(t, report, func(p *attest.RunPredicate) {
		p.Model.Signature = attest.RunManifestSignature{Status: attest.SignatureVerified, KeyID: okid, Subject: "dev-c", Envelope: &d}
	})
	if out, err := offline(honest, "--manifest-pub", other+".pub"); err != nil || !strings.Contains(out, "✓ model.manifest_signature: verified, keyid "+okid+": one of the trusted manifest keys") {
		t.Errorf("a signature claim that is true: %v\n%s", err, out)
	}
}
