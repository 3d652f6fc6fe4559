package attest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/verify"
)

// PredicateRun is the predicateType of a signed run report (RunPredicate);
// PREDICATE.md specifies it for independent verifiers.
const PredicateRun = "https://tarfa.dev/attestation/run/v1"

// RunPredicate says what one `tarfa attest run` did: which model (by its
// manifest root, with the exact config.json so that a verifier needs only
// the manifest), which code, in which mode, and for every prompt what came
// out and the commitments a replay re-derives.
type RunPredicate struct {
	Model      RunModel           `json:"model"`
	Build      RunBuild           `json:"build"`
	Mode       string             `json:"mode"` // ledger.ModeExact, or ledger.ModeExactFP8 for a block-FP8 checkpoint
	Host       RunHost            `json:"host"`
	Load       RunLoad            `json:"load"`
	Prompts    []RunPrompt        `json:"prompts"`
	Experts    []ledger.ExpertUse `json:"experts"`      // every routed expert used, by layer then expert (union over prompts)
	KPerLayer  []ledger.LayerK    `json:"k_per_layer"`  // union over prompts
	Hashed     map[jnf.Alg]int64  `json:"bytes_hashed"` // by algorithm, load and generation together
	Integrity  RunIntegrity       `json:"integrity"`
	Golden     *RunGolden         `json:"golden,omitempty"`
	StartedAt  time.Time          `json:"started_at"`
	FinishedAt time.Time          `json:"finished_at"`
}

// RunModel identifies the model that ran.
type RunModel struct {
	Root        jnf.Digest `json:"root"`         // manifest root (sha256)
	WeightsRoot jnf.Digest `json:"weights_root"` // sha256
	Arch        string     `json:"arch"`
	Layers      int        `json:"layers"`
	Experts     int        `json:"experts"`
	TopK        int        `json:"top_k"`
	// ConfigJSON is config.json, base64 (standard, padded): its SHA-256 is
	// the manifest's config_sha256, so a verifier holding the manifest reads
	// the configuration (top-k, layers) from the report.
	ConfigJSON string `json:"config_json"`
	// Files are the SHA-256 digests of every auxiliary file (tokenizer,
	// chat template, …) the manifest lists, by name.
	Files     map[string]jnf.Digest `json:"files"`
	Signature RunManifestSignature  `json:"manifest_signature"`
}

// Manifest signature states in a run report.
const (
	SignatureNone     = "none"     // the model directory has no manifest.sig.json
	SignaturePresent  = "present"  // it has one, not checked at run time (no key given)
	SignatureVerified = "verified" // checked at run time against a trusted key
)

// RunManifestSignature is what the run knew of the model's signature.
type RunManifestSignature struct {
	Status string `json:"status"`
	// KeyID names the key: the one that verified it, or the envelope's hint.
	KeyID string `json:"keyid,omitempty"`
	// Subject is the signed model name.
	Subject string `json:"subject,omitempty"`
	// Envelope is the SHA-256 of manifest.sig.json.
	Envelope *jnf.Digest `json:"envelope,omitempty"`
}

// RunBuild identifies the code.
type RunBuild struct {
	Tarfa   string `json:"tarfa"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
	GOOS    string `json:"goos"`
	GOARCH  string `json:"goarch"`
	GOAMD64 string `json:"goamd64,omitempty"`
	Kernels string `json:"kernels"` // "avx2" or "scalar"
	Backend string `json:"backend"`
	Threads int    `json:"threads"`
}

// RunHost describes the machine (for people; nothing is verified from it).
type RunHost struct {
	OS       string `json:"os"`
	CPU      string `json:"cpu"`
	Cores    int    `json:"cores"`
	MemBytes int64  `json:"memory_bytes"`
}

// RunIntegrity is what the run re-verified of the copies it kept resident
// (scrubbing). A fault found by a scrub stops the run, so a signed report
// never covers tokens computed from a copy found changed; ScrubFailures
// counts copies that an on-use check found changed before they were used,
// read again from storage (outputs unaffected).
type RunIntegrity struct {
	// Scrub is the schedule: "off", "use" (every resident copy re-hashed
	// before each use), a duration (a background pass that often), or both.
	Scrub         string `json:"scrub"`
	Passes        int64  `json:"scrub_passes"`
	ScrubbedBytes int64  `json:"scrubbed_bytes"` // passes and on-use checks, the final one included
	ScrubFailures int64  `json:"scrub_failures"`
	// FinalBytes were re-hashed after the last prompt, before signing:
	// every copy still resident then (experts and non-expert tensors, and
	// the routed experts a device backend keeps in device memory).
	FinalBytes int64 `json:"final_scrub_bytes"`
	// DeviceVerify says a device backend hashed every routed expert it
	// copied into device memory again there, against its digest, before
	// any token was produced from it (tarfa's --device-verify);
	// DeviceVerifiedBytes are the bytes those checks hashed and
	// DeviceScrubbedBytes those its scrubs of the resident device copies
	// hashed, since the backend opened. Absent on the CPU backend.
	DeviceVerify        bool  `json:"device_verify,omitempty"`
	DeviceVerifiedBytes int64 `json:"device_verified_bytes,omitempty"`
	DeviceScrubbedBytes int64 `json:"device_scrubbed_bytes,omitempty"`
}

// RunLoad is what opening the model verified.
type RunLoad struct {
	Tensors int     `json:"tensors_verified"`
	Bytes   int64   `json:"bytes_hashed"`
	Seconds float64 `json:"seconds"`
}

// RunPrompt is one prompt of the run.
type RunPrompt struct {
	Index        int             `json:"index"`
	Source       string          `json:"source"` // the prompt file line
	PromptTokens []int           `json:"prompt_tokens"`
	Generated    []int           `json:"generated"`
	MaxTokens    int             `json:"max_tokens"`
	Stop         []int           `json:"stop"`
	Sampling     golden.Sampling `json:"sampling"`
	StopReason   string          `json:"stop_reason"`
	// Transcript is TranscriptDigest of the tokens: the statement subject
	// "prompt-<index>".
	Transcript     jnf.Digest        `json:"transcript"`
	LogitsChain    string            `json:"logits_chain"`   // hex head of golden's chain
	RoutingDigest  string            `json:"routing_digest"` // hex head of the ledger's routing chain
	RoutingEntries int64             `json:"routing_entries"`
	ExpertsUsed    int               `json:"experts_used"`
	Hashed         map[jnf.Alg]int64 `json:"bytes_hashed"`
	PrefillSeconds float64           `json:"prefill_s"`
	DecodeSeconds  float64           `json:"decode_s"`
	Golden         *PromptGolden     `json:"golden,omitempty"`
}

// RunGolden is the comparison with a golden record, when one was given.
type RunGolden struct {
	ID    string `json:"id"` // golden.Golden.ID
	Exact bool   `json:"exact"`
}

// PromptGolden is one prompt's comparison with its golden run. Exact holds
// exactly when the prompt and every generated token are the golden's
// (TokensEqual), every step's logits are bit-identical (Identical = Steps)
// and no step diverged (FirstDivergent = −1).
type PromptGolden struct {
	Exact          bool    `json:"exact"`
	TokensEqual    bool    `json:"tokens_equal"`
	Steps          int     `json:"steps"`
	Identical      int     `json:"identical_steps"`
	FirstDivergent int     `json:"first_divergent_step"`
	MaxAbs         float64 `json:"max_abs"`
}

// TranscriptDigest commits to one prompt's tokens:
//
//	SHA-256("tarfa-transcript-v1\n" ‖ model root (32 bytes) ‖ u64 len(prompt) ‖ prompt as u64 ‖ u64 len(generated) ‖ generated as u64)
//
// (little-endian).
func TranscriptDigest(root jnf.Digest, prompt, generated []int) jnf.Digest {
	h := sha256.New()
	h.Write([]byte("tarfa-transcript-v1\n"))
	h.Write(root.Sum[:])
	var b [8]byte
	for _, xs := range [][]int{prompt, generated} {
		binary.LittleEndian.PutUint64(b[:], uint64(len(xs)))
		h.Write(b[:])
		for _, x := range xs {
			binary.LittleEndian.PutUint64(b[:], uint64(x))
			h.Write(b[:])
		}
	}
	d := jnf.Digest{Alg: jnf.SHA256}
	h.Sum(d.Sum[:0])
	return d
}

// PromptSubject is the statement subject name of prompt i.
func PromptSubject(i int) string { return "prompt-" + strconv.Itoa(i) }

// NewRunStatement builds the statement of a run report: one subject per
// prompt (its transcript digest) and the predicate. It checks the
// predicate's internal consistency first (VerifyRunPredicate's
// manifest-free checks), so a report that would not verify is never signed.
func NewRunStatement(p RunPredicate) (Statement, error) {
	if err := p.checkSelf(); err != nil {
		return Statement{}, err
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return Statement{}, err
	}
	st := Statement{Type: StatementTypeV1, PredicateType: PredicateRun, Predicate: raw}
	for _, pr := range p.Prompts {
		st.Subject = append(st.Subject, Subject{Name: PromptSubject(pr.Index), Digest: NewDigestSet(pr.Transcript)})
	}
	return st, nil
}

// SignRun signs a run report.
func SignRun(priv ed25519.PrivateKey, p RunPredicate) (Envelope, error) {
	st, err := NewRunStatement(p)
	if err != nil {
		return Envelope{}, err
	}
	return SignStatement(priv, st)
}

// RunResult is a verified run report.
type RunResult struct {
	KeyID     string       `json:"keyid"`
	Predicate RunPredicate `json:"predicate"`
	// Config is the model's configuration, parsed from the report's
	// config.json (whose digest the manifest records).
	Config *hf.Config `json:"-"`
	// Checked lists what was verified, for people.
	Checked []string `json:"checked"`
	// Stated lists the report's claims that were not checked (Stated, and
	// what only a replay re-derives), for people.
	Stated []string `json:"stated"`
}

// Offline is what an offline verification shows, and Replayed what one by
// replay adds; verifiers print them above their checks.
const (
	Offline  = "offline: the signer's claims are consistent with the manifest and with each other"
	Replayed = "replay: the claims are true on this machine (every prompt run again and compared bit for bit)"
)

// StatedUntilReplay is the offline Stated line that a replay checks.
const StatedUntilReplay = "the generated tokens, logits chains, routing digests, stop reasons, experts list and k per layer themselves (committed and consistent; --replay re-derives them)"

// VerifyRunOptions are what the verifier knows besides the report, the
// keys and the manifest.
type VerifyRunOptions struct {
	// Signature is what the verifier knows of the model's own signature,
	// to check the report's manifest_signature claim against.
	Signature ManifestSignatureFacts
}

// Run decodes a run-report predicate strictly and checks it against
// itself (modes, stop reasons, golden verdicts): what needs no manifest.
func (s Statement) Run() (RunPredicate, error) {
	if s.PredicateType != PredicateRun {
		return RunPredicate{}, fmt.Errorf("%w: got %q, want %q", ErrPredicateType, s.PredicateType, PredicateRun)
	}
	var p RunPredicate
	if err := jnf.DecodeJSON(s.Predicate, &p); err != nil {
		return RunPredicate{}, fmt.Errorf("%w: run predicate: %v", ErrPredicate, err)
	}
	if err := p.checkSelf(); err != nil {
		return RunPredicate{}, err
	}
	return p, nil
}

// promptSubjects is the subject check of a run report (Policy.Subjects):
// subject i is prompt i's, named PromptSubject(index), with the transcript
// digest of its tokens.
func promptSubjects(subjects []Subject, r *Result) error {
	p := r.Run
	if len(subjects) != len(p.Prompts) {
		return fmt.Errorf("%w: %s for %s", ErrSubject, plural(len(subjects), "subject"), plural(len(p.Prompts), "prompt"))
	}
	for i, pr := range p.Prompts {
		sub := subjects[i]
		d, err := sub.Digest.Get(jnf.SHA256)
		if err != nil || sub.Name != PromptSubject(pr.Index) || !d.Equal(pr.Transcript) {
			return fmt.Errorf("%w: subject %d is %q %v, want %s with the transcript digest %s of prompt %d", ErrSubject, i, sub.Name, sub.Digest, PromptSubject(pr.Index), pr.Transcript, pr.Index)
		}
	}
	return nil
}

// VerifyRun is VerifyRunWith with no facts about the model's signature.
func VerifyRun(env Envelope, trusted []ed25519.PublicKey, man *verify.Manifest) (*RunResult, error) {
	return VerifyRunWith(env, trusted, man, VerifyRunOptions{})
}

// VerifyRunWith checks a run report offline, with no weights: the DSSE
// signature by one of trusted, the statement and predicate (strict JSON,
// modes and stop reasons from their sets, stop reasons as the tokens and
// settings imply), that every subject is the transcript digest of its
// prompt, and against man (a manifest that LoadManifest checked): the model
// root and weights_root, config.json (carried in the report) by the
// manifest's config_sha256, every auxiliary file digest, that the experts
// list is sorted and unique and every item the manifest's expert of that
// layer and index with that BLAKE3 digest, that every MoE layer's token
// slots sum to top-k × positions, that every routing entry used the
// configuration's top-k, for every position of every MoE layer, and the
// manifest_signature claim against opt.Signature. This shows the claims
// consistent, not true: that takes a replay. Every failure matches
// ErrVerification and names the field that is wrong.
func VerifyRunWith(env Envelope, trusted []ed25519.PublicKey, man *verify.Manifest, opt VerifyRunOptions) (*RunResult, error) {
	v, err := Verify(env, Policy{TrustedKeys: trusted, PredicateType: PredicateRun, Subjects: promptSubjects})
	if err != nil {
		return nil, err
	}
	p, st := *v.Run, v.Statement
	res := &RunResult{KeyID: v.KeyID, Predicate: p}
	res.Checked = append(res.Checked, "signature by key "+v.KeyID,
		"statement and predicate: strict JSON; mode and every stop_reason from their allowed sets, each stop_reason as the tokens, stop tokens and max_tokens imply")
	res.Checked = append(res.Checked, plural(len(st.Subject), "subject")+": the transcript digests of the prompts' tokens")
	cfg, positions, err := p.checkManifest(man)
	if err != nil {
		return nil, err
	}
	res.Config = cfg
	res.Checked = append(res.Checked,
		"model root and weights_root: the manifest's",
		"config.json in the report: the manifest's config_sha256 (arch, layers, experts, top-k as it says); auxiliary files: exactly the manifest's, with its digests",
		fmt.Sprintf("mode %q: the precision of the model's config.json (%s)", p.Mode, cfg.Precision()),
		fmt.Sprintf("experts: %s, sorted and unique, each the manifest's record (layer, index, BLAKE3); in every MoE layer %s = top-k %d × %s, none over %d",
			plural(len(p.Experts), "routed expert"), plural(int(positions)*cfg.TopK, "token slot"), cfg.TopK, plural(int(positions), "position"), positions),
		fmt.Sprintf("k_per_layer: every MoE layer, k = top-k %d in all %s; each prompt's routing_entries = its positions × MoE layers", cfg.TopK, plural(int(positions), "entry")))
	if p.Golden != nil {
		res.Checked = append(res.Checked, "golden verdicts: each agrees with its own step counts")
	}
	checked, stated, err := CheckManifestSignature(p.Model.Signature, opt.Signature)
	if err != nil {
		return nil, err
	}
	if checked != "" {
		res.Checked = append(res.Checked, checked)
	}
	res.Stated = append(res.Stated, StatedUntilReplay)
	if p.Golden != nil {
		res.Stated = append(res.Stated, fmt.Sprintf("golden verdict against %s (--replay --golden re-derives it)", p.Golden.ID))
	}
	if stated != "" {
		res.Stated = append(res.Stated, stated)
	}
	res.Stated = append(res.Stated, Stated...)
	return res, nil
}

// plural is "1 prompt", "2 prompts" (nouns ending in y: "entries").
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return strconv.Itoa(n) + " " + noun[:len(noun)-1] + "ies"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func predicateErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrPredicate, fmt.Sprintf(format, a...))
}

// checkSelf checks what a run predicate says about itself: subjects'
// inputs, per-prompt counts, the union of k per layer.
func (p *RunPredicate) checkSelf() error {
	if p.Mode != ledger.ModeExact && p.Mode != ledger.ModeExactFP8 && p.Mode != ledger.ModeFast {
		return predicateErr("mode %q, want %q, %q or %q", p.Mode, ledger.ModeExact, ledger.ModeExactFP8, ledger.ModeFast)
	}
	if p.Model.Root.Alg != jnf.SHA256 || p.Model.WeightsRoot.Alg != jnf.SHA256 {
		return predicateErr("model root and weights_root must be sha256 digests")
	}
	if len(p.Prompts) == 0 {
		return predicateErr("no prompts")
	}
	for i, pr := range p.Prompts {
		if pr.Index != i {
			return predicateErr("prompt %d has index %d", i, pr.Index)
		}
		if len(pr.PromptTokens) == 0 || len(pr.Generated) == 0 {
			return predicateErr("prompt %d: %d prompt and %d generated tokens (both must be > 0)", i, len(pr.PromptTokens), len(pr.Generated))
		}
		if d := TranscriptDigest(p.Model.Root, pr.PromptTokens, pr.Generated); !d.Equal(pr.Transcript) {
			return predicateErr("prompt %d: transcript %s, its tokens hash to %s", i, pr.Transcript, d)
		}
		for _, h := range []struct{ field, hex string }{{"logits_chain", pr.LogitsChain}, {"routing_digest", pr.RoutingDigest}} {
			if _, err := jnf.ParseHex(jnf.SHA256, h.hex); err != nil {
				return predicateErr("prompts[%d].%s %q: want 64 lower-case hex digits", i, h.field, h.hex)
			}
		}
		if err := checkStop(&pr); err != nil {
			return err
		}
		if g := pr.Golden; g != nil && g.Exact != (g.TokensEqual && g.Identical == g.Steps && g.FirstDivergent < 0) {
			return predicateErr("prompt %d: golden verdict exact=%v with tokens equal %v, %d of %d steps identical, first divergent step %d", i, g.Exact, g.TokensEqual, g.Identical, g.Steps, g.FirstDivergent)
		}
	}
	for _, pr := range p.Prompts {
		if (pr.Golden != nil) != (p.Golden != nil) {
			return predicateErr("prompts[%d].golden and the run's golden: one is there without the other", pr.Index)
		}
	}
	if p.Golden != nil {
		if d, err := jnf.ParseDigest(p.Golden.ID); err != nil || d.Alg != jnf.SHA256 {
			return predicateErr("golden.id %q: want sha256:<hex>", p.Golden.ID)
		}
		exact := true
		for _, pr := range p.Prompts {
			exact = exact && pr.Golden != nil && pr.Golden.Exact
		}
		if p.Golden.Exact != exact {
			return predicateErr("golden verdict exact=%v, the prompts' verdicts say %v", p.Golden.Exact, exact)
		}
	}
	if err := p.checkExperts(); err != nil {
		return err
	}
	return p.Model.Signature.checkShape()
}

// checkManifest checks the predicate against a manifest and returns the
// configuration from the report's config.json and the positions the prompts
// ran.
func (p *RunPredicate) checkManifest(man *verify.Manifest) (*hf.Config, int64, error) {
	if root, err := man.RootDigest(); err != nil || !root.Equal(p.Model.Root) {
		return nil, 0, fmt.Errorf("%w: the report is for the model with root %s, the manifest's root is %s", ErrSubject, p.Model.Root.Hex(), man.Root)
	}
	if p.Model.WeightsRoot.Hex() != man.WeightsRoot {
		return nil, 0, predicateErr("model.weights_root %s, the manifest's is %s", p.Model.WeightsRoot.Hex(), man.WeightsRoot)
	}
	cfgBytes, err := base64.StdEncoding.Strict().DecodeString(p.Model.ConfigJSON)
	if err != nil {
		return nil, 0, predicateErr("config_json: %v", err)
	}
	if got := jnf.SHA256Bytes(cfgBytes).Hex(); got != man.ConfigSHA256 {
		return nil, 0, predicateErr("the report's config.json has sha256 %s, the manifest records %s", got, man.ConfigSHA256)
	}
	cfg, err := hf.ParseConfig(cfgBytes)
	if err != nil {
		return nil, 0, predicateErr("config.json: %v", err)
	}
	if cfg.TopK != p.Model.TopK || cfg.Layers != p.Model.Layers || cfg.Experts != p.Model.Experts || string(cfg.Arch) != p.Model.Arch {
		return nil, 0, predicateErr("model says arch %s, %d layers, %d experts, top-k %d; its config.json says %s, %d, %d, %d",
			p.Model.Arch, p.Model.Layers, p.Model.Experts, p.Model.TopK, cfg.Arch, cfg.Layers, cfg.Experts, cfg.TopK)
	}
	// The mode names the checkpoint's precision: an exact run of a
	// block-FP8 checkpoint is never reported as plain "exact", nor a BF16
	// one as FP8.
	if want := ledger.ModeOf(cfg.Quant != nil); p.Mode != want && p.Mode != ledger.ModeFast {
		return nil, 0, predicateErr("mode %q, but the model's config.json makes an exact run %q", p.Mode, want)
	}
	entries := map[string]*verify.Entry{}
	files := 0
	for i := range man.Entries {
		e := &man.Entries[i]
		entries[e.Name] = e
		if e.Kind == jnf.KindFile {
			files++
			d, ok := p.Model.Files[e.Name]
			if !ok || d.Alg != jnf.SHA256 || d.Hex() != e.SHA256 {
				return nil, 0, predicateErr("model.files: auxiliary file %s: the report says %v, the manifest %s", e.Name, d, e.SHA256)
			}
		}
	}
	if len(p.Model.Files) != files {
		return nil, 0, predicateErr("model.files: the report lists %d auxiliary files, the manifest %d", len(p.Model.Files), files)
	}
	// Positions the model ran: every prompt token and every generated
	// token but the last (which is not run through the model), as the
	// routing chain counts them (PREDICATE.md §4).
	positions := int64(0)
	for _, pr := range p.Prompts {
		positions += int64(len(pr.PromptTokens) + len(pr.Generated) - 1)
	}
	slots := map[int]int64{}
	for i, u := range p.Experts {
		e, ok := entries[hf.ExpertName(u.Layer, u.Expert)]
		if !ok || e.Kind != jnf.KindExpert || e.Layer != u.Layer || e.Expert != u.Expert {
			return nil, 0, predicateErr("experts[%d]: layer %d expert %d: the manifest has no such expert record", i, u.Layer, u.Expert)
		}
		if u.Digest.Alg != jnf.BLAKE3 || u.Digest.Hex() != e.BLAKE3 {
			return nil, 0, predicateErr("experts[%d]: layer %d expert %d: the report says digest %s, the manifest's record is blake3:%s", i, u.Layer, u.Expert, u.Digest, e.BLAKE3)
		}
		// A position routes to k distinct experts: one slot each at most.
		if u.Tokens > positions {
			return nil, 0, predicateErr("experts[%d]: layer %d expert %d: %d token slots, but the prompts ran %d positions (one slot a position at most)", i, u.Layer, u.Expert, u.Tokens, positions)
		}
		slots[u.Layer] += u.Tokens
	}
	moe := 0
	var want []int
	for l, sparse := range cfg.Sparse {
		if sparse {
			moe++
			want = append(want, l)
		}
	}
	var got []int
	for _, lk := range p.KPerLayer {
		got = append(got, lk.Layer)
		for k, n := range lk.K {
			if k != cfg.TopK {
				return nil, 0, predicateErr("k_per_layer: layer %d: %d routing entries with k = %d, the model's top-k is %d", lk.Layer, n, k, cfg.TopK)
			}
		}
		if n := lk.K[cfg.TopK]; n != positions {
			return nil, 0, predicateErr("k_per_layer: layer %d: %d routing entries, the prompts ran %d positions", lk.Layer, n, positions)
		}
	}
	if !slices.Equal(got, want) {
		return nil, 0, predicateErr("k_per_layer: routing entries for layers %v, the model's MoE layers are %v", got, want)
	}
	// Every position sends top-k token slots to the experts of every MoE
	// layer, so each layer's experts hold top-k × positions slots.
	for _, l := range want {
		if n := slots[l]; n != int64(cfg.TopK)*positions {
			return nil, 0, predicateErr("experts: layer %d has %d token slots, want top-k %d × %d positions = %d", l, n, cfg.TopK, positions, int64(cfg.TopK)*positions)
		}
		delete(slots, l)
	}
	for l := range slots {
		return nil, 0, predicateErr("experts: layer %d is not a MoE layer of the model", l)
	}
	if err := p.checkExpertsUsed(); err != nil {
		return nil, 0, err
	}
	for _, pr := range p.Prompts {
		if want := int64(len(pr.PromptTokens)+len(pr.Generated)-1) * int64(moe); pr.RoutingEntries != want {
			return nil, 0, predicateErr("prompts[%d].routing_entries %d, want %d (positions × MoE layers)", pr.Index, pr.RoutingEntries, want)
		}
	}
	return cfg, positions, nil
}

// ReadRunUnverified decodes a run report without checking its signature,
// for display only: what the report says, and the keyid it names. Anything
// decided on must come from VerifyRun.
func ReadRunUnverified(env Envelope) (RunPredicate, string, error) {
	if env.PayloadType != PayloadTypeInToto {
		return RunPredicate{}, "", fmt.Errorf("%w: %q", ErrPayloadType, env.PayloadType)
	}
	payload, err := decodeBase64("payload", env.Payload)
	if err != nil {
		return RunPredicate{}, "", err
	}
	st, err := ParseStatement(payload)
	if err != nil {
		return RunPredicate{}, "", err
	}
	if st.PredicateType != PredicateRun {
		return RunPredicate{}, "", fmt.Errorf("%w: got %q, want %q", ErrPredicateType, st.PredicateType, PredicateRun)
	}
	var p RunPredicate
	if err := jnf.DecodeJSON(st.Predicate, &p); err != nil {
		return RunPredicate{}, "", fmt.Errorf("%w: run predicate: %v", ErrPredicate, err)
	}
	keyID := ""
	if len(env.Signatures) == 1 {
		keyID = env.Signatures[0].KeyID
	}
	return p, keyID, nil
}
