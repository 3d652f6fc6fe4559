package attest

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
)

// Stop reasons of a run prompt (RunPrompt.StopReason): the engine's names.
const (
	StopToken    = "stop"          // a stop token ended it (the last generated token)
	StopLength   = "length"        // max_tokens were generated
	StopSequence = "stop_sequence" // a served response that a stop string ended (max_tokens = tokens generated)
)

// StopReasons are the allowed stop reasons.
var StopReasons = []string{StopToken, StopLength, StopSequence}

// Stated are the parts of a run report that neither verification re-derives:
// what the signer says about its build, its machine, how long things took,
// where expert bytes came from and what it re-hashed. A verifier prints them
// as "stated, not checked".
var Stated = []string{
	"build (tarfa version, commit, Go, kernels, backend, threads)",
	"host (os, cpu, cores, memory)",
	"timings (started_at, finished_at, load seconds, prefill_s, decode_s)",
	"where expert bytes came from (experts[].uses) and bytes hashed (bytes_hashed, load, prompts[].bytes_hashed)",
	"integrity (scrub schedule, passes, scrubbed bytes, device checks)",
}

// checkStop checks a prompt's stop reason against its own tokens and
// settings, the way the engine stops: a stop token ends generation (and is
// the last token), otherwise max_tokens do.
func checkStop(pr *RunPrompt) error {
	i, g := pr.Index, pr.Generated
	if !slices.Contains(StopReasons, pr.StopReason) {
		return predicateErr("prompts[%d].stop_reason %q: want one of %s", i, pr.StopReason, strings.Join(StopReasons, ", "))
	}
	if pr.MaxTokens < 1 || len(g) > pr.MaxTokens {
		return predicateErr("prompts[%d]: %d generated tokens with max_tokens %d", i, len(g), pr.MaxTokens)
	}
	for j, t := range g[:len(g)-1] {
		if slices.Contains(pr.Stop, t) {
			return predicateErr("prompts[%d].generated[%d] = %d is a stop token, yet generation went on", i, j, t)
		}
	}
	last := g[len(g)-1]
	switch stopped := slices.Contains(pr.Stop, last); {
	case stopped && pr.StopReason != StopToken:
		return predicateErr("prompts[%d].stop_reason %q, but the last generated token %d is a stop token (want %q)", i, pr.StopReason, last, StopToken)
	case !stopped && pr.StopReason == StopToken:
		return predicateErr("prompts[%d].stop_reason %q, but the last generated token %d is none of the stop tokens %v", i, StopToken, last, pr.Stop)
	case !stopped && len(g) != pr.MaxTokens:
		return predicateErr("prompts[%d].stop_reason %q with %d of max_tokens %d generated and no stop token", i, pr.StopReason, len(g), pr.MaxTokens)
	}
	return nil
}

// checkExperts checks the experts list on its own: sorted by layer, then
// expert, each once, every item with token slots and uses from the known
// tiers.
func (p *RunPredicate) checkExperts() error {
	for i, u := range p.Experts {
		if i > 0 {
			q := p.Experts[i-1]
			if q.Layer > u.Layer || q.Layer == u.Layer && q.Expert >= u.Expert {
				return predicateErr("experts[%d] (layer %d expert %d) after experts[%d] (layer %d expert %d): the list must be sorted by layer, then expert, each once",
					i, u.Layer, u.Expert, i-1, q.Layer, q.Expert)
			}
		}
		if u.Tokens < 1 {
			return predicateErr("experts[%d] (layer %d expert %d): %d token slots, want at least 1", i, u.Layer, u.Expert, u.Tokens)
		}
		if len(u.Uses) == 0 {
			return predicateErr("experts[%d] (layer %d expert %d): no uses", i, u.Layer, u.Expert)
		}
		for t, n := range u.Uses {
			if t != ledger.TierStorage && t != ledger.TierRAM && t != ledger.TierDevice || n < 1 {
				return predicateErr("experts[%d] (layer %d expert %d): uses %q: %d (want tiers storage, ram or device, each used at least once)", i, u.Layer, u.Expert, t, n)
			}
		}
	}
	return nil
}

// checkExpertsUsed checks the prompts' experts_used against the experts
// list: none uses more than the list holds, and together they use all of it.
func (p *RunPredicate) checkExpertsUsed() error {
	sum := 0
	for _, pr := range p.Prompts {
		if pr.ExpertsUsed < 0 || pr.ExpertsUsed > len(p.Experts) {
			return predicateErr("prompts[%d].experts_used %d: want 0 to %d (the experts list)", pr.Index, pr.ExpertsUsed, len(p.Experts))
		}
		sum += pr.ExpertsUsed
	}
	if len(p.Experts) > sum {
		return predicateErr("experts: %d items, but the prompts used %d in all (experts_used)", len(p.Experts), sum)
	}
	return nil
}

// checkSignatureShape checks the manifest_signature claim's form: a known
// status, and the fields that status has.
func (s RunManifestSignature) checkShape() error {
	switch s.Status {
	case SignatureNone:
		if s.KeyID != "" || s.Subject != "" || s.Envelope != nil {
			return predicateErr("model.manifest_signature: status %q with a keyid, subject or envelope", s.Status)
		}
	case SignaturePresent:
		if s.Envelope == nil || s.Envelope.Alg != jnf.SHA256 || s.Subject != "" {
			return predicateErr("model.manifest_signature: status %q wants the envelope's sha256 and no subject", s.Status)
		}
	case SignatureVerified:
		if s.Envelope == nil || s.Envelope.Alg != jnf.SHA256 || s.Subject == "" {
			return predicateErr("model.manifest_signature: status %q wants the envelope's sha256 and the signed model name", s.Status)
		}
		if _, err := jnf.ParseHex(jnf.SHA256, s.KeyID); err != nil {
			return predicateErr("model.manifest_signature: status %q with keyid %q, which is no key's keyid (the hex SHA-256 of its public key)", s.Status, s.KeyID)
		}
	default:
		return predicateErr("model.manifest_signature.status %q: want %s, %s or %s", s.Status, SignatureNone, SignaturePresent, SignatureVerified)
	}
	return nil
}

// ManifestSignatureFacts is what the verifier itself knows of the model's
// signature, to check a report's manifest_signature claim against.
type ManifestSignatureFacts struct {
	// Envelope is the manifest.sig.json found beside the manifest; nil when
	// there is none.
	Envelope []byte
	// TrustedKeyIDs are the keyids of the keys the verifier trusts to sign
	// models (tarfa attest verify --manifest-pub); empty when it gave none.
	TrustedKeyIDs []string
	// VerifiedKeyID and VerifiedSubject say which of them verified Envelope
	// and for which model name; empty when the verifier did not verify it.
	VerifiedKeyID, VerifiedSubject string
}

// CheckManifestSignature checks a report's manifest_signature claim
// against what the verifier knows (f): a "verified" claim must name one of
// the verifier's trusted keys when it has any, and where the envelope the
// run saw is at hand (same SHA-256) the claim's keyid and model name must
// be the ones it carries and that verified it. It returns what it checked
// and what it could not check; a claim they contradict matches
// ErrVerification.
func CheckManifestSignature(s RunManifestSignature, f ManifestSignatureFacts) (checked, stated string, err error) {
	if err := s.checkShape(); err != nil {
		return "", "", err
	}
	if s.Status == SignatureNone {
		return "", "model.manifest_signature: the run saw no manifest.sig.json", nil
	}
	claim := fmt.Sprintf("model.manifest_signature: %s, keyid %s", s.Status, s.KeyID)
	var facts []string
	if s.Status == SignatureVerified && len(f.TrustedKeyIDs) > 0 {
		if !slices.Contains(f.TrustedKeyIDs, s.KeyID) {
			return "", "", predicateErr("model.manifest_signature: verified by keyid %s, which is none of the trusted manifest keys (%s)", s.KeyID, strings.Join(f.TrustedKeyIDs, ", "))
		}
		facts = append(facts, "one of the trusted manifest keys")
	}
	if f.Envelope != nil {
		if d := jnf.SHA256Bytes(f.Envelope); !d.Equal(*s.Envelope) {
			if facts == nil {
				return "", claim + fmt.Sprintf(" (the run saw manifest.sig.json %s; the one beside the manifest is %s)", s.Envelope, d), nil
			}
		} else {
			if env, err := ParseEnvelope(f.Envelope); err == nil && len(env.Signatures) == 1 && env.Signatures[0].KeyID != "" && env.Signatures[0].KeyID != s.KeyID {
				return "", "", predicateErr("model.manifest_signature: keyid %s, but the manifest.sig.json it names (%s) is signed by keyid %s", s.KeyID, s.Envelope, env.Signatures[0].KeyID)
			}
			if f.VerifiedKeyID != "" && s.Status == SignatureVerified && (f.VerifiedKeyID != s.KeyID || f.VerifiedSubject != s.Subject) {
				return "", "", predicateErr("model.manifest_signature: verified by keyid %s for %q, but that manifest.sig.json verifies with keyid %s for %q", s.KeyID, s.Subject, f.VerifiedKeyID, f.VerifiedSubject)
			}
			facts = append(facts, "the keyid of the manifest.sig.json beside the manifest, whose sha256 it records")
			if f.VerifiedKeyID != "" {
				facts = append(facts, "which verifies with that key")
			}
		}
	}
	if facts == nil {
		return "", claim + " (give --manifest-pub, or the manifest.sig.json beside the manifest, to check it)", nil
	}
	return claim + ": " + strings.Join(facts, ", "), "", nil
}

// RunTotals sums what every prompt's ledger says into the run's experts
// list and k per layer, as a run predicate states them (the union over the
// prompts).
type RunTotals struct {
	experts map[ledger.ExpertKey]*ledger.ExpertUse
	kper    map[int]map[int]int64
}

// Add adds one prompt's ledger.
func (t *RunTotals) Add(s *ledger.Summary) {
	if t.experts == nil {
		t.experts, t.kper = map[ledger.ExpertKey]*ledger.ExpertUse{}, map[int]map[int]int64{}
	}
	for _, u := range s.Experts {
		k := ledger.ExpertKey{Layer: u.Layer, Expert: u.Expert}
		e := t.experts[k]
		if e == nil {
			e = &ledger.ExpertUse{Layer: u.Layer, Expert: u.Expert, Digest: u.Digest, Uses: map[ledger.Tier]int64{}}
			t.experts[k] = e
		}
		e.Tokens += u.Tokens
		for tier, n := range u.Uses {
			e.Uses[tier] += n
		}
	}
	for _, lk := range s.KPerLayer {
		if t.kper[lk.Layer] == nil {
			t.kper[lk.Layer] = map[int]int64{}
		}
		for k, n := range lk.K {
			t.kper[lk.Layer][k] += n
		}
	}
}

// Experts is the experts list, sorted by layer, then expert.
func (t *RunTotals) Experts() []ledger.ExpertUse {
	out := make([]ledger.ExpertUse, 0, len(t.experts))
	for _, e := range t.experts {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.Layer < b.Layer || a.Layer == b.Layer && a.Expert < b.Expert
	})
	return out
}

// KPerLayer is k per layer, sorted by layer.
func (t *RunTotals) KPerLayer() []ledger.LayerK {
	out := make([]ledger.LayerK, 0, len(t.kper))
	for l, k := range t.kper {
		out = append(out, ledger.LayerK{Layer: l, K: k})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Layer < out[j].Layer })
	return out
}

// Difference is one claim of a run report that a replay did not re-derive.
type Difference struct {
	// Field is the predicate field, e.g. "experts", "k_per_layer",
	// "prompts[1].stop_reason".
	Field string `json:"field"`
	// Prompt is the prompt's index, −1 for a field of the run as a whole.
	Prompt int `json:"prompt"`
	// Claimed and Replayed are the first differing item, as the report
	// states it and as the replay computed it.
	Claimed  string `json:"claimed"`
	Replayed string `json:"replayed"`
}

func (d Difference) String() string {
	return fmt.Sprintf("%s: the report says %s, the replay %s", d.Field, d.Claimed, d.Replayed)
}

// CompareRuns compares a report's predicate (claimed) with the predicate a
// replay of its prompts produced (replayed): everything the run computed —
// the model's identity, the mode, every prompt's tokens, stop reason,
// chains, routing entries, transcript and experts_used, the experts list
// (layer, expert, digest, token slots), k per layer, and the golden
// verdicts when the replay compared with a golden record (replayed.Golden
// set). It returns every difference, each with the first differing item;
// none when the replay re-derives the report. What CompareRuns does not
// compare is Stated.
func CompareRuns(claimed, replayed *RunPredicate) []Difference {
	var out []Difference
	run := func(field string, c, r any) {
		if cs, rs := fmt.Sprint(c), fmt.Sprint(r); cs != rs {
			out = append(out, Difference{Field: field, Prompt: -1, Claimed: cs, Replayed: rs})
		}
	}
	cm, rm := claimed.Model, replayed.Model
	run("model.root", cm.Root, rm.Root)
	run("model.weights_root", cm.WeightsRoot, rm.WeightsRoot)
	run("model.config_json", jnf.SHA256Bytes([]byte(cm.ConfigJSON)), jnf.SHA256Bytes([]byte(rm.ConfigJSON)))
	run("model (arch, layers, experts, top_k)", fmt.Sprint(cm.Arch, cm.Layers, cm.Experts, cm.TopK), fmt.Sprint(rm.Arch, rm.Layers, rm.Experts, rm.TopK))
	run("model.files", cm.Files, rm.Files) // fmt prints maps sorted by key
	run("mode", claimed.Mode, replayed.Mode)
	if len(claimed.Prompts) != len(replayed.Prompts) {
		run("prompts", fmt.Sprintf("%d prompts", len(claimed.Prompts)), fmt.Sprintf("%d prompts", len(replayed.Prompts)))
	}
	for i := range min(len(claimed.Prompts), len(replayed.Prompts)) {
		out = append(out, comparePrompt(&claimed.Prompts[i], &replayed.Prompts[i], replayed.Golden != nil)...)
	}
	if c, r, ok := firstDiff(claimed.Experts, replayed.Experts, expertItem); !ok {
		out = append(out, Difference{Field: "experts", Prompt: -1, Claimed: c, Replayed: r})
	}
	if c, r, ok := firstDiff(claimed.KPerLayer, replayed.KPerLayer, layerKItem); !ok {
		out = append(out, Difference{Field: "k_per_layer", Prompt: -1, Claimed: c, Replayed: r})
	}
	if replayed.Golden != nil {
		if claimed.Golden == nil {
			run("golden", "no golden comparison", *replayed.Golden)
		} else {
			run("golden.id", claimed.Golden.ID, replayed.Golden.ID)
			run("golden.exact", claimed.Golden.Exact, replayed.Golden.Exact)
		}
	}
	return out
}

// comparePrompt compares one prompt's claims with its replay.
func comparePrompt(c, r *RunPrompt, golden bool) []Difference {
	var out []Difference
	field := func(name string, cv, rv any) {
		if cs, rs := fmt.Sprint(cv), fmt.Sprint(rv); cs != rs {
			out = append(out, Difference{Field: fmt.Sprintf("prompts[%d].%s", c.Index, name), Prompt: c.Index, Claimed: cs, Replayed: rs})
		}
	}
	if cs, rs, ok := firstDiff(c.Generated, r.Generated, strconv.Itoa); !ok {
		out = append(out, Difference{Field: fmt.Sprintf("prompts[%d].generated", c.Index), Prompt: c.Index, Claimed: cs, Replayed: rs})
	}
	// A served response that a stop string ended replays with max_tokens
	// the tokens it generated, so its replay stops for length.
	if !(c.StopReason == StopSequence && r.StopReason == StopLength) {
		field("stop_reason", c.StopReason, r.StopReason)
	}
	field("logits_chain", c.LogitsChain, r.LogitsChain)
	field("routing_digest", c.RoutingDigest, r.RoutingDigest)
	field("routing_entries", c.RoutingEntries, r.RoutingEntries)
	field("transcript", c.Transcript, r.Transcript)
	field("experts_used", c.ExpertsUsed, r.ExpertsUsed)
	if golden {
		field("golden", goldenItem(c.Golden), goldenItem(r.Golden))
	}
	return out
}

func goldenItem(g *PromptGolden) string {
	if g == nil {
		return "none"
	}
	return fmt.Sprintf("exact=%v tokens_equal=%v %d/%d steps identical, first divergent step %d, max_abs %g",
		g.Exact, g.TokensEqual, g.Identical, g.Steps, g.FirstDivergent, g.MaxAbs)
}

func expertItem(u ledger.ExpertUse) string {
	return fmt.Sprintf("layer %d expert %d (%s, %d token slots)", u.Layer, u.Expert, u.Digest, u.Tokens)
}

func layerKItem(lk ledger.LayerK) string {
	ks := make([]int, 0, len(lk.K))
	for k := range lk.K {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("k=%d: %d entries", k, lk.K[k]))
	}
	return fmt.Sprintf("layer %d (%s)", lk.Layer, strings.Join(parts, ", "))
}

// firstDiff compares two lists item by item (as item formats them) and
// returns the first differing item of each ("item i: …", or "no item i"
// where one list is shorter); ok when they are equal.
func firstDiff[T any](c, r []T, item func(T) string) (cs, rs string, ok bool) {
	for i := range max(len(c), len(r)) {
		ci, ri := fmt.Sprintf("no item %d (%d items)", i, len(c)), fmt.Sprintf("no item %d (%d items)", i, len(r))
		if i < len(c) {
			ci = fmt.Sprintf("item %d: %s", i, item(c[i]))
		}
		if i < len(r) {
			ri = fmt.Sprintf("item %d: %s", i, item(r[i]))
		}
		if ci != ri {
			return ci, ri, false
		}
	}
	return "", "", true
}
