package attest

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/verify"
)

// forgeRun signs p as a signer lying about its own run would: the subjects
// recomputed from the (edited) transcripts, and none of SignRun's own
// checks, so that the verifier alone must refuse what is wrong.
func forgeRun(t *testing.T, priv ed25519.PrivateKey, p RunPredicate, edit func(*Statement)) Envelope {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	st := Statement{Type: StatementTypeV1, PredicateType: PredicateRun, Predicate: raw}
	for _, pr := range p.Prompts {
		st.Subject = append(st.Subject, Subject{Name: PromptSubject(pr.Index), Digest: NewDigestSet(pr.Transcript)})
	}
	if edit != nil {
		edit(&st)
	}
	env, err := SignStatement(priv, st)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// clonePredicate deep-copies p (through its JSON form).
func clonePredicate(t *testing.T, p RunPredicate) RunPredicate {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var q RunPredicate
	if err := jnf.DecodeJSON(b, &q); err != nil {
		t.Fatal(err)
	}
	return q
}

func retranscribe(p *RunPredicate) {
	for i := range p.Prompts {
		pr := &p.Prompts[i]
		pr.Transcript = TranscriptDigest(p.Model.Root, pr.PromptTokens, pr.Generated)
	}
}

// TestRunClaimsOffline: each lie a signer can tell about its own run, told
// consistently (transcripts and subjects recomputed, re-signed with its own
// key), is refused offline with ErrVerification naming the field; and each
// check that existed before has a case that fails without it.
func TestRunClaimsOffline(t *testing.T) {
	pub, priv := testKey("runner")
	p0, man := testRun(t)
	if _, err := VerifyRun(forgeRun(t, priv, p0, nil), []ed25519.PublicKey{pub}, man); err != nil {
		t.Fatalf("the honest report: %v", err)
	}
	k := p0.Model.TopK
	var positions int64
	for _, pr := range p0.Prompts {
		positions += int64(len(pr.PromptTokens) + len(pr.Generated) - 1)
	}
	for _, c := range []struct {
		name string
		edit func(*RunPredicate)
		st   func(*Statement)
		want string
	}{
		{"experts empty", func(p *RunPredicate) {
			p.Experts = []ledger.ExpertUse{}
			for i := range p.Prompts {
				p.Prompts[i].ExpertsUsed = 0
			}
		}, nil, "has 0 token slots, want top-k"},
		{"one expert per layer at top-k × positions", func(p *RunPredicate) {
			var one []ledger.ExpertUse
			for _, u := range p.Experts {
				if len(one) == 0 || one[len(one)-1].Layer != u.Layer {
					u.Tokens = int64(k) * positions
					one = append(one, u)
				}
			}
			p.Experts = one
			for i := range p.Prompts {
				p.Prompts[i].ExpertsUsed = len(one)
			}
		}, nil, "token slots, but the prompts ran"},
		{"every tokens 1", func(p *RunPredicate) {
			for i := range p.Experts {
				p.Experts[i].Tokens = 1
			}
		}, nil, "token slots, want top-k"},
		{"an entry duplicated", func(p *RunPredicate) {
			p.Experts = slices.Insert(p.Experts, 1, p.Experts[0])
		}, nil, "each once"},
		{"unsorted", func(p *RunPredicate) { p.Experts[0], p.Experts[1] = p.Experts[1], p.Experts[0] }, nil, "must be sorted"},
		{"zero token slots", func(p *RunPredicate) { p.Experts[0].Tokens = 0 }, nil, "want at least 1"},
		{"an unknown tier", func(p *RunPredicate) { p.Experts[0].Uses = map[ledger.Tier]int64{"disk": 1} }, nil, `uses "disk"`},
		{"no uses", func(p *RunPredicate) { p.Experts[0].Uses = map[ledger.Tier]int64{} }, nil, "no uses"},
		{"stop_reason outside the set", func(p *RunPredicate) { p.Prompts[0].StopReason = "eos" }, nil, `prompts[0].stop_reason "eos": want one of`},
		{"stop_reason length → stop", func(p *RunPredicate) { p.Prompts[0].StopReason = StopToken }, nil, "prompts[0].stop_reason \"stop\", but the last generated token 5 is none of the stop tokens"},
		{"stop_reason length over a stop token", func(p *RunPredicate) { p.Prompts[0].Stop = []int{5} }, nil, "is a stop token (want \"stop\")"},
		{"generation past a stop token", func(p *RunPredicate) { p.Prompts[1].Stop = []int{7} }, nil, "prompts[1].generated[0] = 7 is a stop token"},
		{"length short of max_tokens", func(p *RunPredicate) { p.Prompts[1].MaxTokens++ }, nil, "with 3 of max_tokens 4 generated"},
		{"more than max_tokens", func(p *RunPredicate) { p.Prompts[1].MaxTokens = 2 }, nil, "3 generated tokens with max_tokens 2"},
		{"mode outside the set", func(p *RunPredicate) { p.Mode = "turbo" }, nil, `mode "turbo"`},
		{"an fp8 mode for a bf16 checkpoint", func(p *RunPredicate) { p.Mode = ledger.ModeExactFP8 }, nil, `mode "exact, fp8 checkpoint", but the model's config.json makes an exact run "exact"`},
		{"signature status outside the set", func(p *RunPredicate) { p.Model.Signature.Status = "trusted" }, nil, `manifest_signature.status "trusted"`},
		{"signature verified by no key's keyid", func(p *RunPredicate) {
			d := jnf.SHA256Bytes([]byte("sig"))
			p.Model.Signature = RunManifestSignature{Status: SignatureVerified, KeyID: "release-key", Subject: "m", Envelope: &d}
		}, nil, "which is no key's keyid"},
		{"signature none with a keyid", func(p *RunPredicate) { p.Model.Signature.KeyID = strings.Repeat("a", 64) }, nil, "with a keyid"},
		{"experts_used over the list", func(p *RunPredicate) { p.Prompts[0].ExpertsUsed = len(p.Experts) + 1 }, nil, "prompts[0].experts_used"},
		{"experts_used short of the list", func(p *RunPredicate) {
			for i := range p.Prompts {
				p.Prompts[i].ExpertsUsed = 1
			}
		}, nil, "the prompts used 2 in all"},
		{"weights_root", func(p *RunPredicate) { p.Model.WeightsRoot.Sum[0] ^= 1 }, nil, "model.weights_root"},
		{"an extra auxiliary file", func(p *RunPredicate) { p.Model.Files["extra.json"] = jnf.SHA256Bytes(nil) }, nil, "auxiliary files, the manifest"},
		{"per-prompt routing entries", func(p *RunPredicate) { p.Prompts[1].RoutingEntries++ }, nil, "prompts[1].routing_entries"},
		{"golden exact over differing steps", func(p *RunPredicate) {
			for i := range p.Prompts {
				p.Prompts[i].Golden = &PromptGolden{Exact: true, TokensEqual: true, Steps: 3, Identical: 2, FirstDivergent: -1}
			}
			p.Golden = &RunGolden{ID: "sha256:" + strings.Repeat("0", 64), Exact: true}
		}, nil, "prompt 0: golden verdict exact=true"},
		{"a prompt's golden without the run's", func(p *RunPredicate) {
			p.Prompts[0].Golden = &PromptGolden{Exact: true, TokensEqual: true, Steps: 2, Identical: 2, FirstDivergent: -1}
		}, nil, "one is there without the other"},
		{"a golden id that is no digest", func(p *RunPredicate) {
			for i := range p.Prompts {
				p.Prompts[i].Golden = &PromptGolden{Exact: true, TokensEqual: true, Steps: 2, Identical: 2, FirstDivergent: -1}
			}
			p.Golden = &RunGolden{ID: "latest", Exact: true}
		}, nil, `golden.id "latest"`},
		{"an upper-case chain head", func(p *RunPredicate) { p.Prompts[1].LogitsChain = strings.ToUpper(p.Prompts[1].LogitsChain) }, nil, "prompts[1].logits_chain"},
		{"a short routing digest", func(p *RunPredicate) { p.Prompts[0].RoutingDigest = p.Prompts[0].RoutingDigest[:62] }, nil, "prompts[0].routing_digest"},
		{"another predicate type", nil, func(s *Statement) { s.PredicateType = PredicateModelManifest }, "wrong predicate type"},
		{"a subject that is not the transcript", nil, func(s *Statement) { s.Subject[1].Digest = NewDigestSet(jnf.SHA256Bytes(nil)) }, "subject 1 is"},
		{"a subject missing", nil, func(s *Statement) { s.Subject = s.Subject[:1] }, "1 subject for 2 prompts"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := clonePredicate(t, p0)
			if c.edit != nil {
				c.edit(&p)
			}
			retranscribe(&p)
			_, err := VerifyRun(forgeRun(t, priv, p, c.st), []ed25519.PublicKey{pub}, man)
			if !errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an ErrVerification containing %q", err, c.want)
			}
		})
	}
}

// TestRunClaimsStated: a verified report lists what was not checked, and
// every line of Stated among it.
func TestRunClaimsStated(t *testing.T) {
	pub, priv := testKey("runner")
	p, man := testRun(t)
	res, err := VerifyRun(forgeRun(t, priv, p, nil), []ed25519.PublicKey{pub}, man)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append([]string{StatedUntilReplay, "model.manifest_signature: the run saw no manifest.sig.json"}, Stated...) {
		if !slices.Contains(res.Stated, s) {
			t.Errorf("stated, not checked: no %q in %q", s, res.Stated)
		}
	}
	for _, c := range res.Checked {
		if strings.Contains(c, "build") || strings.Contains(c, "host") {
			t.Errorf("checked %q: neither mode checks it", c)
		}
	}
}

// TestCheckManifestSignature: a report's manifest_signature claim against
// what the verifier knows of the model's signature.
func TestCheckManifestSignature(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	mpub, mpriv := testKey("model signer")
	other, _ := testKey("other")
	if _, err := SignManifest(dir, "dev-a", mpriv); err != nil {
		t.Fatal(err)
	}
	sig, err := os.ReadFile(filepath.Join(dir, verify.SignatureFile))
	if err != nil {
		t.Fatal(err)
	}
	kid, okid := mustKeyID(t, mpub), mustKeyID(t, other)
	d := jnf.SHA256Bytes(sig)
	verified := RunManifestSignature{Status: SignatureVerified, KeyID: kid, Subject: "dev-a", Envelope: &d}
	present := RunManifestSignature{Status: SignaturePresent, KeyID: kid, Envelope: &d}
	lie := verified
	lie.KeyID = okid
	for _, c := range []struct {
		name          string
		claim         RunManifestSignature
		facts         ManifestSignatureFacts
		checked, want string // want: the error
		stated        string
	}{
		{"verified by a trusted key, with its envelope", verified, ManifestSignatureFacts{Envelope: sig, TrustedKeyIDs: []string{kid}, VerifiedKeyID: kid, VerifiedSubject: "dev-a"},
			"one of the trusted manifest keys, the keyid of the manifest.sig.json", "", ""},
		{"verified by a key that is not trusted", lie, ManifestSignatureFacts{TrustedKeyIDs: []string{kid}}, "", "none of the trusted manifest keys", ""},
		{"verified, the envelope signed by another key", lie, ManifestSignatureFacts{Envelope: sig}, "", "is signed by keyid " + kid, ""},
		{"verified for another model name", RunManifestSignature{Status: SignatureVerified, KeyID: kid, Subject: "dev-b", Envelope: &d},
			ManifestSignatureFacts{Envelope: sig, TrustedKeyIDs: []string{kid}, VerifiedKeyID: kid, VerifiedSubject: "dev-a"}, "", `verifies with keyid ` + kid + ` for "dev-a"`, ""},
		{"present, keyid of the envelope", present, ManifestSignatureFacts{Envelope: sig}, "the keyid of the manifest.sig.json", "", ""},
		{"present, another keyid", RunManifestSignature{Status: SignaturePresent, KeyID: okid, Envelope: &d}, ManifestSignatureFacts{Envelope: sig}, "", "is signed by keyid", ""},
		{"another envelope beside the manifest", verified, ManifestSignatureFacts{Envelope: append(sig, ' ')}, "", "", "the one beside the manifest is"},
		{"nothing to check against", verified, ManifestSignatureFacts{}, "", "", "give --manifest-pub"},
	} {
		t.Run(c.name, func(t *testing.T) {
			checked, stated, err := CheckManifestSignature(c.claim, c.facts)
			switch {
			case c.want != "":
				if !errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("got %v, want an ErrVerification containing %q", err, c.want)
				}
			case err != nil:
				t.Errorf("refused: %v", err)
			case c.checked != "" && !strings.Contains(checked, c.checked):
				t.Errorf("checked %q, want %q", checked, c.checked)
			case c.stated != "" && (checked != "" || !strings.Contains(stated, c.stated)):
				t.Errorf("checked %q, stated %q, want stated %q", checked, stated, c.stated)
			}
		})
	}

	// Through VerifyRunWith: a report claiming a signature by another key.
	pub, priv := testKey("runner")
	p, man := testRun(t)
	p.Model.Signature = lie
	_, err = VerifyRunWith(forgeRun(t, priv, p, nil), []ed25519.PublicKey{pub}, man, VerifyRunOptions{Signature: ManifestSignatureFacts{TrustedKeyIDs: []string{kid}}})
	if !errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), "none of the trusted manifest keys") {
		t.Errorf("VerifyRunWith, a claimed signature by an untrusted key: %v", err)
	}
}

// TestCompareRuns: every field a replay re-derives is compared, named and
// shown by its first differing item; what it does not re-derive is not.
func TestCompareRuns(t *testing.T) {
	p0, _ := testRun(t)
	gold := func(p *RunPredicate) {
		for i := range p.Prompts {
			p.Prompts[i].Golden = &PromptGolden{Exact: true, TokensEqual: true, Steps: 2, Identical: 2, FirstDivergent: -1}
		}
		p.Golden = &RunGolden{ID: "sha256:" + strings.Repeat("0", 64), Exact: true}
	}
	if cp := clonePredicate(t, p0); len(CompareRuns(&p0, &cp)) != 0 {
		t.Fatalf("a predicate differs from its copy")
	}
	for _, c := range []struct {
		name  string
		edit  func(*RunPredicate) // of the replayed predicate
		field string              // "" = no difference
		item  string
	}{
		{"root", func(p *RunPredicate) { p.Model.Root.Sum[0] ^= 1 }, "model.root", ""},
		{"weights_root", func(p *RunPredicate) { p.Model.WeightsRoot.Sum[0] ^= 1 }, "model.weights_root", ""},
		{"config", func(p *RunPredicate) { p.Model.ConfigJSON += "AA==" }, "model.config_json", ""},
		{"top_k", func(p *RunPredicate) { p.Model.TopK++ }, "model (arch, layers, experts, top_k)", ""},
		{"files", func(p *RunPredicate) { p.Model.Files["x"] = jnf.SHA256Bytes(nil) }, "model.files", ""},
		{"mode", func(p *RunPredicate) { p.Mode = ledger.ModeFast }, "mode", ""},
		{"a prompt fewer", func(p *RunPredicate) { p.Prompts = p.Prompts[:1] }, "prompts", ""},
		{"generated", func(p *RunPredicate) { p.Prompts[1].Generated[2] = 9 }, "prompts[1].generated", "item 2: 1"},
		{"stop_reason", func(p *RunPredicate) { p.Prompts[0].StopReason = StopToken }, "prompts[0].stop_reason", "length"},
		{"logits_chain", func(p *RunPredicate) { p.Prompts[0].LogitsChain = strings.Repeat("0", 64) }, "prompts[0].logits_chain", ""},
		{"routing_digest", func(p *RunPredicate) { p.Prompts[1].RoutingDigest = strings.Repeat("0", 64) }, "prompts[1].routing_digest", ""},
		{"routing_entries", func(p *RunPredicate) { p.Prompts[1].RoutingEntries-- }, "prompts[1].routing_entries", ""},
		{"transcript", func(p *RunPredicate) { p.Prompts[1].Transcript.Sum[0] ^= 1 }, "prompts[1].transcript", ""},
		{"experts_used", func(p *RunPredicate) { p.Prompts[0].ExpertsUsed-- }, "prompts[0].experts_used", ""},
		{"an expert's tokens", func(p *RunPredicate) { p.Experts[3].Tokens-- }, "experts", "item 3: layer"},
		{"an expert's digest", func(p *RunPredicate) { p.Experts[2].Digest.Sum[0] ^= 1 }, "experts", "item 2: layer"},
		{"another expert", func(p *RunPredicate) { p.Experts[1].Expert = 7 }, "experts", "item 1: layer"},
		{"an expert more", func(p *RunPredicate) { p.Experts = append(p.Experts, p.Experts[0]) }, "experts", "no item"},
		{"k_per_layer", func(p *RunPredicate) { p.KPerLayer[1].K = map[int]int64{1: 7} }, "k_per_layer", "item 1: layer"},
		{"a layer fewer", func(p *RunPredicate) { p.KPerLayer = p.KPerLayer[1:] }, "k_per_layer", "item 0: layer"},
		{"golden verdict", func(p *RunPredicate) {
			gold(p)
			p.Prompts[1].Golden = &PromptGolden{Exact: false, TokensEqual: true, Steps: 2, Identical: 1, FirstDivergent: 1}
			p.Golden.Exact = false
		}, "prompts[1].golden", "exact=true"},
		{"golden exact", func(p *RunPredicate) { gold(p); p.Golden.Exact = false }, "golden.exact", ""},
		{"golden id", func(p *RunPredicate) { gold(p); p.Golden.ID = "sha256:" + strings.Repeat("1", 64) }, "golden.id", ""},
		// Not re-derived: uses, bytes hashed, timings, build, host.
		{"uses", func(p *RunPredicate) { p.Experts[0].Uses = map[ledger.Tier]int64{ledger.TierRAM: 9} }, "", ""},
		{"stated", func(p *RunPredicate) {
			p.Build.Threads, p.Host.Cores, p.Prompts[0].DecodeSeconds, p.Load.Bytes = 64, 64, 9, 9
			p.Hashed[jnf.SHA256] = 1
			p.Integrity.Passes = 9
		}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			claimed, replayed := clonePredicate(t, p0), clonePredicate(t, p0)
			if strings.HasPrefix(c.name, "golden") {
				gold(&claimed)
			}
			c.edit(&replayed)
			d := CompareRuns(&claimed, &replayed)
			if c.field == "" {
				if len(d) != 0 {
					t.Errorf("differences %v, want none (not re-derived)", d)
				}
				return
			}
			if len(d) == 0 || d[0].Field != c.field || !strings.Contains(d[0].String(), c.item) {
				t.Errorf("differences %v, want first %s with %q", d, c.field, c.item)
			}
		})
	}
	// A served response a stop string ended replays for length.
	claimed, replayed := clonePredicate(t, p0), clonePredicate(t, p0)
	claimed.Prompts[0].StopReason = StopSequence
	if d := CompareRuns(&claimed, &replayed); len(d) != 0 {
		t.Errorf("stop_sequence replayed as length: %v", d)
	}
	replayed.Prompts[0].StopReason = StopToken
	if d := CompareRuns(&claimed, &replayed); len(d) != 1 || d[0].Field != "prompts[0].stop_reason" {
		t.Errorf("stop_sequence replayed as stop: %v", d)
	}
}

// A run report goes through the one front door: Verify with a run policy
// gives the typed predicate (Result.Run), checks every subject with
// Policy.Subjects, and a policy that names its subjects two ways is refused.
func TestRunThroughVerify(t *testing.T) {
	pub, priv := testKey("runner")
	p0, _ := testRun(t)
	env := forgeRun(t, priv, p0, nil)
	keys := []ed25519.PublicKey{pub}
	res, err := Verify(env, Policy{TrustedKeys: keys, PredicateType: PredicateRun, UnsafeAnySubject: true})
	if err != nil || res.Run == nil || len(res.Run.Prompts) != len(p0.Prompts) || res.Run.Model.Root != p0.Model.Root {
		t.Fatalf("Verify of a run report: %v, %+v", err, res)
	}
	calls := 0
	count := func(s []Subject, r *Result) error { calls++; return promptSubjects(s, r) }
	if _, err := Verify(env, Policy{TrustedKeys: keys, PredicateType: PredicateRun, Subjects: count}); err != nil || calls != 1 {
		t.Errorf("Policy.Subjects: %v, called %d times", err, calls)
	}
	bad := forgeRun(t, priv, p0, func(st *Statement) { st.Subject[0].Name = "prompt/99" })
	if _, err := Verify(bad, Policy{TrustedKeys: keys, PredicateType: PredicateRun, Subjects: promptSubjects}); !errors.Is(err, ErrSubject) {
		t.Errorf("a renamed prompt subject: %v, want ErrSubject", err)
	}
	if _, err := Verify(env, Policy{TrustedKeys: keys, PredicateType: PredicateRun, Subjects: promptSubjects, UnsafeAnySubject: true}); err == nil || !strings.Contains(err.Error(), "give one way to check the subjects") {
		t.Errorf("Subjects with UnsafeAnySubject: %v", err)
	}
}
