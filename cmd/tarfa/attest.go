package main

import (
	"cmp"
	"crypto"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/golden"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/verify"
)

func newAttestCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "attest",
		Short: "Signed run reports: what model ran, with which code, and what came out",
	}
	cmd.AddCommand(newAttestRunCommand(), newAttestVerifyCommand())
	return cmd
}

type attestRunOptions struct {
	model, prompts, key, out, golden string
	manifestPubs                     []string
	manifestName                     string
	threads                          int
	force, asJSON                    bool
	tier                             tierFlags
}

// attestRunResult is attest run's --json output.
type attestRunResult struct {
	Report    string `json:"report"`
	KeyID     string `json:"keyid"`
	ModelRoot string `json:"model_root"`
	Prompts   int    `json:"prompts"`
	Generated int    `json:"generated_tokens"`
	Golden    string `json:"golden,omitempty"`
	Exact     *bool  `json:"golden_exact,omitempty"`
}

func newAttestRunCommand() *cobra.Command {
	var o attestRunOptions
	cmd := &cobra.Command{
		Use:   "run --prompts FILE --key NAME --out REPORT [--model DIR] [--golden G]",
		Short: "Run prompts and write a signed report of the run",
		Long: `Attest run runs every prompt of a JSONL prompt file (the format golden record
reads) on the CPU reference, each with its own ledger, and writes REPORT: a DSSE
envelope (Ed25519, with the key NAME) around an in-toto statement whose subjects
are the prompts' transcripts and whose predicate
(https://tarfa.dev/attestation/run/v1, attest/PREDICATE.md) says which model ran
(its manifest root, its exact config.json, its tokenizer and template digests, its
signature status), with which build, in which mode, and for every prompt the
tokens, the logits chain, the routing-trace digest, the sampling settings and the
timings; and which routed experts were computed with (each the manifest's record)
at which k per layer. tarfa attest verify checks it offline with only the model's
manifest, or by replay with the model.

With --golden G every prompt is compared step by step with the golden record
(the prompt file must be the one it was recorded from); the verdict goes into the
report, and a report whose run is not bit-identical to G exits 3. With
--manifest-pub the model's own signature (manifest.sig.json) is verified first
and the report says by which key.

Exit statuses: 0 written (and, with --golden, bit-identical); 1 error (flags, the
key, the prompt file, REPORT exists without --force); 3 verification failed (the
model does not verify, its signature does not verify with --manifest-pub, the run
is not bit-identical to --golden); 130 interrupted (nothing is written).`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if o.prompts == "" || o.key == "" || o.out == "" {
				return fmt.Errorf("--prompts FILE, --key NAME and --out REPORT are required")
			}
			if err := threadsFlag(o.threads); err != nil {
				return err
			}
			if _, err := o.tier.options(); err != nil {
				return err
			}
			if _, err := os.Lstat(o.out); err == nil && !o.force {
				return fmt.Errorf("--out %s exists: give --force to replace it", o.out)
			}
			return checkWritable(filepath.Dir(o.out))
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			priv, err := attest.LoadPrivateKey(o.key)
			if err != nil {
				return fmt.Errorf("--key: %w", err)
			}
			ps, err := golden.ReadPromptFile(o.prompts)
			if err != nil {
				return fmt.Errorf("--prompts: %w", err)
			}
			var mkeys []ed25519.PublicKey
			for _, p := range o.manifestPubs {
				k, err := attest.LoadAnyPublicKey(p)
				if err != nil {
					return fmt.Errorf("--manifest-pub: %w", err)
				}
				ek, ok := k.(ed25519.PublicKey)
				if !ok {
					// The report records the DSSE manifest signature; an
					// OMS one (model.sig) is checked by its own command.
					return fmt.Errorf("--manifest-pub %s: an %s key, which checks an OMS signature (model.sig); attest run verifies and records the model's DSSE signature (%s, an Ed25519 key): check model.sig first with `tarfa manifest verify %s --pub %s`", p, attest.KeyTypeName(k), verify.SignatureFile, cmp.Or(o.model, "DIR"), p)
				}
				mkeys = append(mkeys, ek)
			}
			aopt := runner.AttestOptions{Host: runner.HostFacts(), ManifestKeys: mkeys, ManifestName: o.manifestName}
			if o.golden != "" {
				if aopt.Golden, aopt.GoldenRuns, err = golden.Read(o.golden); err != nil {
					return fmt.Errorf("--golden: %w", err)
				}
			}
			r, load, err := openRunner(cmd, o.model, o.threads, &o.tier)
			if err != nil {
				return err
			}
			defer r.Close()
			aopt.LoadSeconds = load.Seconds()
			aopt.Build = buildFacts(r)
			update, finish := countProgress(cmd.ErrOrStderr(), "attesting prompts")
			update(0, len(ps))
			aopt.OnPrompt = func(i int, _ attest.RunPrompt) { update(i+1, len(ps)) }
			p, runs, err := r.AttestRun(cmd.Context(), ps, aopt)
			finish()
			if err != nil {
				return interrupted(err, "no report was written")
			}
			env, err := attest.SignRun(priv, *p)
			if err != nil {
				return err
			}
			b, err := json.MarshalIndent(env, "", "  ")
			if err != nil {
				return err
			}
			if err := jnf.WriteFileAtomic(o.out, append(b, '\n'), 0o644); err != nil {
				return fmt.Errorf("--out: %w", err)
			}
			kid, _ := attest.KeyID(priv.Public().(ed25519.PublicKey))
			res := attestRunResult{Report: o.out, KeyID: kid, ModelRoot: p.Model.Root.Hex(), Prompts: len(p.Prompts)}
			for _, run := range runs {
				res.Generated += len(run.Run.Generated)
			}
			if p.Golden != nil {
				res.Golden, res.Exact = p.Golden.ID, &p.Golden.Exact
			}
			if o.asJSON {
				if err := writeJSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "report %s: %s, %s generated, model root %s, signed by keyid %s\n",
					o.out, nounCount(res.Prompts, "prompt"), nounCount(res.Generated, "token"), res.ModelRoot, kid)
				if p.Golden != nil {
					fmt.Fprintf(cmd.OutOrStdout(), "golden %s: exact=%v\n", p.Golden.ID, p.Golden.Exact)
				}
			}
			if p.Golden != nil && !p.Golden.Exact {
				return failVerification(fmt.Errorf("the run is not bit-identical to the golden record %s (the report says so)", o.golden))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", "", "JNF model directory (default: the embedded default model)")
	f.StringVar(&o.prompts, "prompts", "", "JSONL prompt file")
	f.StringVar(&o.key, "key", "", "private key file (tarfa keys generate) that signs the report")
	f.StringVar(&o.out, "out", "", "report file to write")
	f.StringVar(&o.golden, "golden", "", "golden record to compare every step with")
	f.StringArrayVar(&o.manifestPubs, "manifest-pub", nil, "verify the model's manifest.sig.json with this public key first (repeatable)")
	f.StringVar(&o.manifestName, "manifest-name", "", "the signed model name to require with --manifest-pub (default: the one the signature names)")
	f.IntVar(&o.threads, "threads", 0, fmt.Sprintf("CPU threads, 0 (all cores) to %d", maxThreads))
	f.BoolVar(&o.force, "force", false, "replace an existing REPORT")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	o.tier.add(cmd)
	return cmd
}

// buildFacts describes this binary for a run report.
func buildFacts(r *runner.Runner) attest.RunBuild {
	b := attest.RunBuild{Tarfa: version, Commit: gitCommit(), Go: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		Kernels: "scalar", Backend: r.Engine.Backend().Name(), Threads: r.Threads}
	if canon.HasVectorKernels() {
		b.Kernels = "avx2"
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "GOAMD64" {
				b.GOAMD64 = s.Value
			}
		}
	}
	return b
}

type attestVerifyOptions struct {
	pubs, manifestPubs      []string
	manifest, model, golden string
	replay, asJSON          bool
	threads                 int
	tier                    tierFlags
}

// attestVerifyResult is attest verify's --json output.
type attestVerifyResult struct {
	Report    string `json:"report"`
	KeyID     string `json:"keyid"`
	ModelRoot string `json:"model_root"`
	// Proves says what the checks show: the offline line, and the replay
	// line after a replay (attest.Offline, attest.Replayed).
	Proves  []string `json:"proves"`
	Checked []string `json:"checked"`
	// Stated are the report's claims that were not checked.
	Stated      []string            `json:"stated"`
	Replay      []runner.ReplayDiff `json:"replay,omitempty"`
	Differences []attest.Difference `json:"differences,omitempty"`
	Exact       bool                `json:"exact"`
}

func newAttestVerifyCommand() *cobra.Command {
	var o attestVerifyOptions
	cmd := &cobra.Command{
		Use:   "verify REPORT --pub NAME.pub (--manifest DIR | --model DIR) [--replay [--golden G]]",
		Short: "Check a signed run report offline, or by replaying it",
		Long: `Attest verify checks a run report (tarfa attest run) without trusting the
machine that wrote it.

Offline, with no weights, it shows that the signer's claims are consistent with
the model's manifest and with each other: the signature by one of the --pub keys;
the statement and predicate (strict JSON, mode and stop reasons from their sets,
each stop reason as the tokens, stop tokens and max_tokens imply); that every
subject is the transcript digest of its prompt; and against the manifest
(--manifest DIR: a directory holding manifest.json — a few MB even for a 122B
model — or that file itself): that the report's model root and weights_root are
the manifest's, that the config.json it carries is the one the manifest hashes,
that the auxiliary file digests are exactly the manifest's, that the experts list
is sorted and unique and every item the manifest's record of that layer and index
with that digest, that every MoE layer's token slots add up to top-k × the
positions run, that every routing entry of every MoE layer used the model's top-k,
for every position. The manifest_signature claim is checked against the
manifest.sig.json beside the manifest, and with --manifest-pub the model's own
signature is verified and a "verified" claim must name one of those keys.

With --model DIR --replay, every prompt is run again on the CPU reference with the
report's tokens and settings, and everything the run computed must come out the
same: every prompt's generated tokens, stop reason, logits chain, routing digest
and entries, transcript and experts used, and the run's experts list (layer,
expert, digest, token slots) and k per layer. With --golden G (the golden record
the report names) the golden verdicts are re-derived too. A replay shows the
claims true on this machine.

What neither re-derives (build, host, timings, where expert bytes came from,
bytes hashed, scrubbing) is printed as "stated, not checked".

Exit statuses: 0 verified (and replayed bit for bit); 1 error (flags, a key or
the report cannot be read, REPORT is not a DSSE envelope, DIR is no JNF
directory); 3 verification failed (a tampered byte, another key, another model, a
claim the manifest or the report itself contradicts, a replay that differs — each
named by its field and first differing item); 130 interrupted.`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if len(o.pubs) == 0 {
				return fmt.Errorf("--pub NAME.pub is required (the key that signed the report)")
			}
			if (o.manifest == "") == (o.model == "") {
				return fmt.Errorf("give exactly one of --manifest DIR (offline) and --model DIR (with the weights)")
			}
			if o.replay && o.model == "" {
				return fmt.Errorf("--replay needs --model DIR (the weights)")
			}
			if o.golden != "" && !o.replay {
				return fmt.Errorf("--golden G needs --replay (the golden verdicts are re-derived by running the prompts)")
			}
			if err := threadsFlag(o.threads); err != nil {
				return err
			}
			_, err := o.tier.options()
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := loadPubs("--pub", o.pubs)
			if err != nil {
				return err
			}
			mkeys, err := loadAnyPubs("--manifest-pub", o.manifestPubs)
			if err != nil {
				return err
			}
			env, err := readEnvelope(args[0])
			if err != nil {
				return err
			}
			ropt := runner.ReplayOptions{}
			if o.golden != "" {
				if ropt.Golden, ropt.GoldenRuns, err = golden.Read(o.golden); err != nil {
					return fmt.Errorf("--golden: %w", err)
				}
			}
			dir := o.manifest
			if dir == "" {
				dir = o.model
			}
			man, manBytes, mdir, err := loadManifestArg(dir)
			if err != nil {
				return err
			}
			vopt, sigChecked, err := manifestSignatureFacts(mdir, manBytes, mkeys)
			if err != nil {
				return err
			}
			res, err := attest.VerifyRunWith(env, keys, man, vopt)
			if err != nil {
				return err
			}
			if ropt.Golden != nil && res.Predicate.Golden == nil {
				return fmt.Errorf("--golden %s: the report names no golden record", o.golden)
			}
			out := attestVerifyResult{Report: args[0], KeyID: res.KeyID, ModelRoot: man.Root, Proves: []string{attest.Offline},
				Checked: res.Checked, Stated: res.Stated, Exact: true}
			if sigChecked != "" {
				out.Checked = append(out.Checked, sigChecked)
			}
			if o.replay {
				r, _, err := openRunner(cmd, o.model, o.threads, &o.tier)
				if err != nil {
					return err
				}
				defer r.Close()
				update, finish := countProgress(cmd.ErrOrStderr(), "replaying prompts")
				update(0, len(res.Predicate.Prompts))
				rep, err := r.ReplayRun(cmd.Context(), &res.Predicate, ropt)
				finish()
				if err != nil {
					return err
				}
				out.Proves = append(out.Proves, attest.Replayed)
				out.Replay, out.Differences, out.Exact = rep.Prompts, rep.Differences, rep.Exact()
				if out.Exact {
					what := "generated tokens, stop reasons, logits chains, routing digests and entries, transcripts, experts used"
					out.Checked = append(out.Checked,
						fmt.Sprintf("replay of %s on %s (%s): %s — identical", nounCount(len(rep.Prompts), "prompt"), r.Engine.Backend().Name(), nounCount(r.Threads, "thread"), what),
						fmt.Sprintf("experts (%s: layer, expert, digest, token slots) and k_per_layer: re-derived, identical", nounCount(len(res.Predicate.Experts), "item")))
					if ropt.Golden != nil {
						out.Checked = append(out.Checked, fmt.Sprintf("golden verdicts: re-derived against %s, identical", o.golden))
					}
				}
				out.Stated = slices.DeleteFunc(out.Stated, func(s string) bool {
					return s == attest.StatedUntilReplay || ropt.Golden != nil && strings.HasPrefix(s, "golden verdict")
				})
			}
			w := cmd.OutOrStdout()
			if o.asJSON {
				if err := writeJSON(w, out); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(w, "report %s: %s mode, model root %s, signed by keyid %s\n", args[0], strings.ToUpper(res.Predicate.Mode), man.Root, res.KeyID)
				for _, p := range out.Proves {
					fmt.Fprintf(w, "%s\n", p)
				}
				for _, c := range out.Checked {
					fmt.Fprintf(w, "  ✓ %s\n", c)
				}
				for _, d := range out.Differences {
					fmt.Fprintf(w, "  ✗ %s\n", d)
				}
				if len(out.Stated) > 0 {
					fmt.Fprintln(w, "stated, not checked:")
					for _, s := range out.Stated {
						fmt.Fprintf(w, "  - %s\n", s)
					}
				}
				if out.Exact {
					fmt.Fprintln(w, "ok")
				}
			}
			if !out.Exact {
				var bad []string
				for _, d := range out.Differences {
					bad = append(bad, d.String())
				}
				return failVerification(fmt.Errorf("the replay differs from the report: %s", strings.Join(bad, "; ")))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.pubs, "pub", nil, "public key the report must be signed by (repeatable)")
	f.StringVar(&o.manifest, "manifest", "", "the model's manifest: a JNF directory or its manifest.json (offline)")
	f.StringVar(&o.model, "model", "", "the model's JNF directory (with the weights)")
	f.BoolVar(&o.replay, "replay", false, "run every prompt again (needs --model) and compare everything it computed")
	f.StringVar(&o.golden, "golden", "", "with --replay: the golden record the report names, to re-derive its golden verdicts")
	f.StringArrayVar(&o.manifestPubs, "manifest-pub", nil, "also verify the model's signature (manifest.sig.json with an Ed25519 key, model.sig with an ECDSA one) with this key (repeatable)")
	f.IntVar(&o.threads, "threads", 0, fmt.Sprintf("CPU threads for --replay, 0 (all cores) to %d", maxThreads))
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	o.tier.add(cmd)
	return cmd
}

// manifestSignatureFacts reads the manifest.sig.json beside the manifest
// (if any) and, with mkeys, verifies the model's signature that those keys
// can check (manifest.sig.json for Ed25519 keys, model.sig, OMS v1.0, for
// ECDSA ones): what attest.VerifyRunWith checks the report's
// manifest_signature claim against (the run records the DSSE form), and
// the check line of the model's own signature ("" without mkeys).
func manifestSignatureFacts(mdir string, manBytes []byte, mkeys []crypto.PublicKey) (attest.VerifyRunOptions, string, error) {
	var opt attest.VerifyRunOptions
	sig, err := jnf.ReadFileLimit(filepath.Join(mdir, verify.SignatureFile), jnf.MaxEnvelopeSize, verify.SignatureFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return opt, "", err
	default:
		opt.Signature.Envelope = sig
	}
	if len(mkeys) == 0 {
		return opt, "", nil
	}
	for _, k := range mkeys {
		ek, ok := k.(ed25519.PublicKey)
		if !ok {
			continue // an OMS key: the run's claim is about manifest.sig.json
		}
		kid, err := attest.KeyID(ek)
		if err != nil {
			return opt, "", fmt.Errorf("--manifest-pub: %w", err)
		}
		opt.Signature.TrustedKeyIDs = append(opt.Signature.TrustedKeyIDs, kid)
	}
	ms, err := manifestSignatureFor(mdir, mkeys)
	if err != nil {
		return opt, "", err
	}
	mr, err := attest.VerifyManifestBytesAny(manBytes, ms.Data, "", mkeys)
	if err != nil {
		return opt, "", fmt.Errorf("the model's signature: %w", err)
	}
	what := "the model's manifest signature"
	if ms.Form == attest.FormOMS {
		what = "the model's OMS v1.0 signature (model.sig, manifest.json and every file it names)"
	} else {
		opt.Signature.VerifiedKeyID, opt.Signature.VerifiedSubject = mr.KeyID, mr.MatchedSubject.Name
	}
	return opt, fmt.Sprintf("%s: keyid %s, model name %q", what, mr.KeyID, mr.MatchedSubject.Name), nil
}

func loadPubs(flag string, paths []string) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for _, p := range paths {
		k, err := attest.LoadPublicKey(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// loadAnyPubs is loadPubs for keys of either type (Ed25519 or ECDSA).
func loadAnyPubs(flag string, paths []string) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for _, p := range paths {
		k, err := attest.LoadAnyPublicKey(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// manifestSignatureFor picks the signature of dir that keys can check:
// manifest.sig.json (DSSE) for Ed25519 keys, model.sig (OMS) for ECDSA ones.
func manifestSignatureFor(dir string, keys []crypto.PublicKey) (attest.ManifestSignature, error) {
	sigs, err := attest.FindManifestSignatures(dir)
	if err != nil {
		return attest.ManifestSignature{}, err
	}
	if len(sigs) == 0 {
		return attest.ManifestSignature{}, fmt.Errorf("--manifest-pub: %s holds no %s nor %s (the model is not signed): %w", dir, verify.SignatureFile, verify.OMSSignatureFile, jnf.ErrVerification)
	}
	for _, s := range sigs {
		if attest.KeysFor(s.Form, keys) == nil {
			return s, nil
		}
	}
	return attest.ManifestSignature{}, fmt.Errorf("--manifest-pub: %s: %w", sigs[0].Path, attest.KeysFor(sigs[0].Form, keys))
}

// readEnvelope reads a report file (bounded) as a DSSE envelope. A file
// that is not a JSON object with the envelope's three members is the wrong
// kind of input (exit 1); a malformed envelope is a verification failure.
func readEnvelope(path string) (attest.Envelope, error) {
	b, err := jnf.ReadFileLimit(path, jnf.MaxEnvelopeSize, "report")
	if err != nil {
		return attest.Envelope{}, err
	}
	var shape map[string]json.RawMessage
	if err := json.Unmarshal(b, &shape); err != nil {
		return attest.Envelope{}, fmt.Errorf("%s is not a run report: not a JSON object (a report is the DSSE envelope tarfa attest run writes)", path)
	}
	for _, k := range []string{"payloadType", "payload", "signatures"} {
		if _, ok := shape[k]; !ok {
			return attest.Envelope{}, fmt.Errorf("%s is not a run report: a JSON object without %q (a report is the DSSE envelope tarfa attest run writes)", path, k)
		}
	}
	env, err := attest.ParseEnvelope(b)
	if err != nil {
		return attest.Envelope{}, fmt.Errorf("%s: %w", path, err)
	}
	return env, nil
}

// loadManifestArg loads a manifest given as a JNF directory or as the path
// of a manifest.json, and returns it with its bytes and directory.
func loadManifestArg(p string) (*verify.Manifest, []byte, string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, nil, "", err
	}
	if st.IsDir() {
		m, raw, err := verify.LoadManifest(p)
		return m, raw, p, err
	}
	raw, err := jnf.ReadFileLimit(p, jnf.MaxManifestSize, "manifest.json")
	if err != nil {
		return nil, nil, "", err
	}
	m, err := verify.ParseManifest(raw)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", p, err)
	}
	return m, raw, filepath.Dir(p), nil
}

// nounCount is "1 prompt", "2 prompts".
func nounCount(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
