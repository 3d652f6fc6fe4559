package attest

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ssldsse "github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/verify"
)

// testRun builds a consistent run predicate for a converted fixture: two
// prompts, routing entries for every MoE layer and position with top-k
// experts drawn from the manifest.
func testRun(t *testing.T) (RunPredicate, *verify.Manifest) {
	t.Helper()
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	man, _, err := verify.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfgBytes, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := hf.ParseConfig(cfgBytes)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := man.RootDigest()
	wroot, _ := jnf.ParseHex(jnf.SHA256, man.WeightsRoot)
	p := RunPredicate{
		Model: RunModel{Root: root, WeightsRoot: wroot, Arch: string(cfg.Arch), Layers: cfg.Layers, Experts: cfg.Experts, TopK: cfg.TopK,
			ConfigJSON: base64.StdEncoding.EncodeToString(cfgBytes), Files: map[string]jnf.Digest{},
			Signature: RunManifestSignature{Status: SignatureNone}},
		Build:     RunBuild{Tarfa: "test", Backend: "cpu", Threads: 1, Kernels: "scalar"},
		Mode:      ledger.ModeExact,
		Hashed:    map[jnf.Alg]int64{},
		StartedAt: time.Unix(1, 0).UTC(), FinishedAt: time.Unix(2, 0).UTC(),
	}
	for _, e := range man.Entries {
		if e.Kind == jnf.KindFile {
			d, _ := jnf.ParseHex(jnf.SHA256, e.SHA256)
			p.Model.Files[e.Name] = d
		}
	}
	var positions int64
	for i, toks := range [][2][]int{{{1, 2, 3}, {4, 5}}, {{9}, {7, 7, 1}}} {
		pr := RunPrompt{Index: i, Source: `{"tokens": [1]}`, PromptTokens: toks[0], Generated: toks[1], MaxTokens: len(toks[1]),
			StopReason: "length", LogitsChain: strings.Repeat("ab", 32), RoutingDigest: strings.Repeat("cd", 32), Hashed: map[jnf.Alg]int64{}}
		pr.Transcript = TranscriptDigest(root, pr.PromptTokens, pr.Generated)
		n := int64(len(toks[0]) + len(toks[1]) - 1)
		positions += n
		moe := 0
		for _, sp := range cfg.Sparse {
			if sp {
				moe++
			}
		}
		pr.RoutingEntries = n * int64(moe)
		p.Prompts = append(p.Prompts, pr)
	}
	for l, sp := range cfg.Sparse {
		if !sp {
			continue
		}
		p.KPerLayer = append(p.KPerLayer, ledger.LayerK{Layer: l, K: map[int]int64{cfg.TopK: positions}})
		for e := range cfg.TopK {
			i, _ := man.Index(hf.ExpertName(l, e))
			d, _ := jnf.ParseHex(jnf.BLAKE3, man.Entries[i].BLAKE3)
			p.Experts = append(p.Experts, ledger.ExpertUse{Layer: l, Expert: e, Digest: d, Tokens: positions, Uses: map[ledger.Tier]int64{ledger.TierStorage: 1}})
		}
	}
	for i := range p.Prompts {
		p.Prompts[i].ExpertsUsed = len(p.Experts)
	}
	return p, man
}

func TestRunReportVerifies(t *testing.T) {
	p, man := testRun(t)
	pub, priv := testKey("runner")
	env, err := SignRun(priv, p)
	if err != nil {
		t.Fatal(err)
	}
	res, err := VerifyRun(env, []ed25519.PublicKey{pub}, man)
	if err != nil {
		t.Fatal(err)
	}
	if res.KeyID != mustKeyID(t, pub) || len(res.Predicate.Prompts) != 2 || res.Config.TopK != p.Model.TopK || len(res.Checked) < 5 {
		t.Errorf("result %+v", res)
	}

	// An independent DSSE implementation verifies the same envelope, and
	// its payload is our statement.
	k := sslKey{pub: pub, id: mustKeyID(t, pub)}
	data, _ := json.Marshal(env)
	var theirs ssldsse.Envelope
	if err := json.Unmarshal(data, &theirs); err != nil {
		t.Fatal(err)
	}
	ev, err := ssldsse.NewEnvelopeVerifier(k)
	if err != nil {
		t.Fatal(err)
	}
	if _, payload, err := ev.VerifyAndDecode(context.Background(), &theirs); err != nil || !strings.Contains(string(payload), PredicateRun) {
		t.Fatalf("go-securesystemslib: %v", err)
	}
}

// TestRunReportRefusals: each way a report can be wrong is refused with
// ErrVerification naming what differed.
func TestRunReportRefusals(t *testing.T) {
	pub, priv := testKey("runner")
	other, _ := testKey("someone else")
	sign := func(t *testing.T, p RunPredicate) Envelope {
		t.Helper()
		env, err := SignRun(priv, p)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	p0, man := testRun(t)
	for _, c := range []struct {
		name string
		edit func(*RunPredicate)
		want string
	}{
		{"another model", func(p *RunPredicate) {
			p.Model.Root.Sum[0] ^= 1
			for i := range p.Prompts {
				p.Prompts[i].Transcript = TranscriptDigest(p.Model.Root, p.Prompts[i].PromptTokens, p.Prompts[i].Generated)
			}
		}, "the report is for the model with root"},
		{"an expert the manifest does not have", func(p *RunPredicate) { p.Experts[len(p.Experts)-1].Expert = 999 }, "no such expert record"},
		{"an expert with other bytes", func(p *RunPredicate) { p.Experts[1].Digest.Sum[3] ^= 1 }, "the manifest's record is blake3:"},
		{"reduced top-k", func(p *RunPredicate) {
			lk := &p.KPerLayer[0]
			n := lk.K[p.Model.TopK]
			lk.K = map[int]int64{p.Model.TopK - 1: n}
		}, "the model's top-k is"},
		{"a layer missing", func(p *RunPredicate) { p.KPerLayer = p.KPerLayer[1:] }, "routing entries for layers"},
		{"positions missing", func(p *RunPredicate) { p.KPerLayer[0].K[p.Model.TopK]-- }, "the prompts ran"},
		{"another config", func(p *RunPredicate) {
			b, _ := base64.StdEncoding.DecodeString(p.Model.ConfigJSON)
			p.Model.ConfigJSON = base64.StdEncoding.EncodeToString(append(b, ' '))
		}, "the manifest records"},
		{"a tokenizer digest", func(p *RunPredicate) {
			for n, d := range p.Model.Files {
				d.Sum[0] ^= 1
				p.Model.Files[n] = d
				break
			}
		}, "auxiliary file"},
		{"top_k claimed", func(p *RunPredicate) { p.Model.TopK = 1 }, "its config.json says"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := testRun(t)
			c.edit(&p)
			_, err := VerifyRun(sign(t, p), []ed25519.PublicKey{pub}, man)
			if !errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an ErrVerification containing %q", err, c.want)
			}
		})
	}

	// Signed by another key; a tampered byte; a transcript that does not
	// match its tokens (refused before signing too).
	env := sign(t, p0)
	if _, err := VerifyRun(env, []ed25519.PublicKey{other}, man); !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrSignature) {
		t.Errorf("another key: %v", err)
	}
	payload, _ := base64.StdEncoding.DecodeString(env.Payload)
	bad := strings.Replace(string(payload), `"generated":[4,5]`, `"generated":[4,6]`, 1)
	if bad == string(payload) {
		t.Fatal("payload has no generated tokens to tamper with")
	}
	tampered := env
	tampered.Payload = base64.StdEncoding.EncodeToString([]byte(bad))
	if _, err := VerifyRun(tampered, []ed25519.PublicKey{pub}, man); !errors.Is(err, ErrSignature) {
		t.Errorf("tampered payload: %v", err)
	}
	p := p0
	p.Prompts = append([]RunPrompt(nil), p0.Prompts...)
	p.Prompts[0].Generated = []int{4, 6}
	if _, err := SignRun(priv, p); !errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), "transcript") {
		t.Errorf("signing a report whose transcript does not match its tokens: %v", err)
	}
	// The golden verdict must agree with the prompts'.
	p = p0
	p.Prompts = append([]RunPrompt(nil), p0.Prompts...)
	for i := range p.Prompts {
		p.Prompts[i].Golden = &PromptGolden{Exact: true, TokensEqual: true, Steps: 2, Identical: 2, FirstDivergent: -1}
	}
	p.Prompts[1].Golden = &PromptGolden{Exact: false, Steps: 3, Identical: 1, FirstDivergent: 1}
	p.Golden = &RunGolden{ID: "sha256:" + strings.Repeat("0", 64), Exact: true}
	if _, err := SignRun(priv, p); !errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), "golden verdict") {
		t.Errorf("golden verdict exact over a divergent prompt: %v", err)
	}
}

func TestTranscriptDigest(t *testing.T) {
	root := jnf.SHA256Bytes([]byte("m"))
	a := TranscriptDigest(root, []int{1, 2}, []int{3})
	if a.Equal(TranscriptDigest(root, []int{1}, []int{2, 3})) || a.Equal(TranscriptDigest(jnf.SHA256Bytes(nil), []int{1, 2}, []int{3})) {
		t.Error("the transcript digest does not separate prompt from generated tokens, or ignores the model")
	}
}

func TestVerifyManifestBytes(t *testing.T) {
	dir := convertFixture(t, "qwen3moe-dev-a/checkpoint")
	pub, priv := testKey("model signer")
	other, _ := testKey("other")
	if _, err := SignManifest(dir, "dev-a", priv); err != nil {
		t.Fatal(err)
	}
	man, _ := os.ReadFile(filepath.Join(dir, verify.ManifestFile))
	sig, _ := os.ReadFile(filepath.Join(dir, verify.SignatureFile))
	res, err := VerifyManifestBytes(man, sig, "", []ed25519.PublicKey{pub})
	if err != nil || res.MatchedSubject.Name != "dev-a" {
		t.Fatalf("genuine: %v", err)
	}
	if _, err := VerifyManifestBytes(man, sig, "other-name", []ed25519.PublicKey{pub}); !errors.Is(err, ErrSubject) {
		t.Errorf("wrong name: %v", err)
	}
	if _, err := VerifyManifestBytes(man, sig, "", []ed25519.PublicKey{other}); !errors.Is(err, ErrVerification) {
		t.Errorf("other key: %v", err)
	}
	edited := []byte(strings.Replace(string(man), `"format": "tarfa-jnf-manifest"`, `"format":  "tarfa-jnf-manifest"`, 1))
	if _, err := VerifyManifestBytes(edited, sig, "", []ed25519.PublicKey{pub}); !errors.Is(err, ErrVerification) || !strings.Contains(err.Error(), "describes manifest bytes") {
		t.Errorf("manifest bytes changed (same meaning): %v", err)
	}
}

func TestReadRunUnverified(t *testing.T) {
	p, _ := testRun(t)
	_, priv := testKey("runner")
	env, err := SignRun(priv, p)
	if err != nil {
		t.Fatal(err)
	}
	env.Signatures[0].Sig = base64.StdEncoding.EncodeToString(make([]byte, 64))
	got, kid, err := ReadRunUnverified(env)
	if err != nil || kid != env.Signatures[0].KeyID || len(got.Prompts) != 2 {
		t.Errorf("unverified read: %v", err)
	}
}
