package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/verify"
)

// defaultModelName is the subject name manifest sign uses when --name is
// not given: the directory's base name.
func defaultModelName(dir, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	return filepath.Base(abs), nil
}

// jnfDir checks that dir is a JNF directory before a command reads it:
// anything else (a Hugging Face checkpoint, an empty or missing directory)
// is a usage error naming what it is.
func jnfDir(dir string) error {
	_, _, err := verify.LoadManifest(dir)
	if nj := (*verify.NotJNFError)(nil); errors.As(err, &nj) {
		return err
	}
	return nil // a manifest that does not check is reported by what reads it
}

type manifestSignOptions struct {
	key, name, format string
	force, noWait     bool
	asJSON            bool
}

// manifestSignResult is manifest sign's --json output.
type manifestSignResult struct {
	Dir       string `json:"dir"`
	Name      string `json:"name"`
	Root      string `json:"root"`
	KeyID     string `json:"keyid"`
	Signature string `json:"signature"`      // the envelope's path
	Form      string `json:"form,omitempty"` // "oms" for an OMS v1.0 signature
}

func newManifestSignCommand() *cobra.Command {
	var o manifestSignOptions
	cmd := &cobra.Command{
		Use:   "sign DIR --key NAME",
		Short: "Sign the model: the manifest root (DSSE, Ed25519) or every file (OMS v1.0, ECDSA)",
		Long: `Sign writes DIR/manifest.sig.json: a DSSE envelope (payloadType
application/vnd.in-toto+json, one Ed25519 signature) over an in-toto Statement v1
whose subject is the model (--name, default the directory's name) with the manifest
root as its sha256 digest. The manifest is first checked against the files.

--format oms writes DIR/model.sig instead: an OpenSSF Model Signing (OMS) v1.0
signature, as model_signing (sigstore/model-transparency) writes and verifies
it: a Sigstore bundle v0.3 (key method, verificationMaterial.publicKey.hint)
around a DSSE envelope whose one ECDSA signature covers an in-toto statement of
predicateType https://model_signing/signature/v1.0 listing every file of DIR
with its SHA-256 ("files" serialization; manifest.json, config.json and every
.jnf file among them), except .git, .gitattributes, .github, .gitignore,
.tarfa.lock, manifest.sig.json and model.sig, which it records as ignore_paths.
It needs an ECDSA key (tarfa keys generate --type ecdsa-p256); the DSSE form
needs an Ed25519 key. Check it with tarfa manifest verify, or with
  model_signing verify key DIR --signature DIR/model.sig --public-key NAME.pub

A signature already in DIR is not replaced unless --force is given. While it
writes DIR it holds DIR/.tarfa.lock, as convert does: a second tarfa writing DIR
waits for it (--no-wait: fails at once).

` + exitStatuses,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if o.key == "" {
				return fmt.Errorf("--key NAME is required (make one with `tarfa keys generate --out NAME`)")
			}
			if o.format != attest.FormDSSE && o.format != attest.FormOMS {
				return fmt.Errorf("--format %q: want dsse or oms", o.format)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			priv, err := attest.LoadSigningKey(o.key)
			if err != nil {
				return fmt.Errorf("--key: %w", err)
			}
			if err := signingKeyFits(o.format, o.key, priv); err != nil {
				return err
			}
			if err := jnfDir(dir); err != nil {
				return err
			}
			name, err := defaultModelName(dir, o.name)
			if err != nil {
				return err
			}
			sig := filepath.Join(dir, attest.SignatureFileFor(o.format))
			signed := func() error {
				if _, err := os.Lstat(sig); err == nil && !o.force {
					return fmt.Errorf("%s is signed already (%s): pass --force to replace the signature", dir, sig)
				}
				return nil
			}
			if err := signed(); err != nil {
				return err
			}
			if err := checkWritable(dir); err != nil {
				return err
			}
			lock, err := lockDir(cmd, dir, o.noWait)
			if err != nil {
				return err
			}
			defer lock.Unlock()
			if err := signed(); err != nil { // another tarfa may have signed it meanwhile
				return err
			}
			var keyID string
			if o.format == attest.FormOMS {
				update, finish := byteProgress(cmd.ErrOrStderr(), "hashing files")
				var done int64
				_, err := attest.SignManifestOMS(cmd.Context(), dir, name, priv.(*ecdsa.PrivateKey), func(_ string, n int64) { done += n; update(done, done) })
				finish()
				if err != nil {
					return openError(err)
				}
				if keyID, err = attest.PublicKeyID(priv.Public()); err != nil {
					return err
				}
			} else {
				env, err := attest.SignManifest(dir, name, priv.(ed25519.PrivateKey))
				if err != nil {
					return openError(err)
				}
				keyID = env.Signatures[0].KeyID
			}
			m, _, err := verify.LoadManifest(dir)
			if err != nil {
				return err
			}
			res := manifestSignResult{Dir: dir, Name: name, Root: m.Root, KeyID: keyID, Signature: sig}
			if o.format == attest.FormOMS {
				res.Form = attest.FormOMS
			}
			if o.asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed %s as %q with key %s → %s\n", dir, name, res.KeyID, sig)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.format, "format", attest.FormDSSE, "dsse (manifest.sig.json, Ed25519 key) or oms (model.sig, OMS v1.0, ECDSA key)")
	f.StringVar(&o.key, "key", "", "PKCS#8 PEM private key")
	f.StringVar(&o.name, "name", "", "model name in the statement subject (default: the directory name)")
	f.BoolVar(&o.force, "force", false, "replace an existing signature")
	f.BoolVar(&o.noWait, "no-wait", false, noWaitHelp)
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	return cmd
}

// signingKeyFits says what is wrong when the key cannot make the form.
func signingKeyFits(format, path string, priv crypto.Signer) error {
	switch priv.(type) {
	case ed25519.PrivateKey:
		if format == attest.FormOMS {
			return fmt.Errorf("--key %s is an Ed25519 key, but OMS v1.0 signatures are ECDSA: make one with tarfa keys generate --type ecdsa-p256 --out NAME", path)
		}
	case *ecdsa.PrivateKey:
		if format != attest.FormOMS {
			return fmt.Errorf("--key %s is an ECDSA key, which signs the OMS v1.0 form: pass --format oms (the DSSE form, manifest.sig.json, is Ed25519)", path)
		}
	}
	return nil
}

type manifestVerifyOptions struct {
	pubs             []string
	name, format     string
	asJSON, skipData bool
}

func newManifestVerifyCommand() *cobra.Command {
	var o manifestVerifyOptions
	cmd := &cobra.Command{
		Use:   "verify DIR --pub NAME.pub",
		Short: "Check the model's signature(s) and that the files match them",
		Long: `Verify checks the signatures of DIR against the trusted public key(s). Two
forms exist, told apart by their file and checked to hold what the name says:

  manifest.sig.json  Tarfa's DSSE form (tarfa manifest sign), Ed25519 keys
  model.sig          OpenSSF Model Signing v1.0 (--format oms), ECDSA keys

Each form present for which a --pub key of its type is given is checked; a
form present without such a key is reported as not checked, and if none can
be checked that is an error saying which key type is needed. --format dsse or
--format oms checks that form only.

DSSE: the signature, the statement (predicate type, subject name and digest =
manifest root), that the signed predicate describes this manifest byte for byte,
and that the files still hash to the signed root: record tables, copied
config/tokenizer files, and every record's bytes and padding (as ` + "`tarfa verify`" + `).

OMS: the bundle (mediaType, ECDSA signature by the key its hint names), the
statement (predicateType https://model_signing/signature/v1.0, subject digest =
SHA-256 over the listed digests), then the spec's file rules: every regular file
under DIR that is not in the signed ignore_paths (nor model.sig) must be listed,
every listed file must exist and hash to its SHA-256, and symbolic links are
refused — what model_signing verify key checks. Then the signed manifest.json
must be DIR's manifest, every file it names must be signed, and the manifest must
match the files as for DSSE (record bytes included).

--unsafe-skip-data leaves out the record bytes (DSSE: a changed expert byte then
goes unnoticed; OMS: the whole-file SHA-256 still covers them, but the records
are not compared with the manifest's digests).

The subject name is the one in the signature (printed), so a copy of a signed
model in a directory of another name verifies; --name NAME requires that name.
--json prints the verification result; with both forms checked, an object with
"dsse" and "oms" results.

Exit statuses: 0 verified; 1 error (DIR is no JNF directory or is not signed, a
key cannot be read or is of the wrong type); 3 verification failed (signature,
subject, manifest, files or record bytes); 130 interrupted.`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if len(o.pubs) == 0 {
				return fmt.Errorf("--pub NAME.pub is required")
			}
			if o.format != "auto" && o.format != attest.FormDSSE && o.format != attest.FormOMS {
				return fmt.Errorf("--format %q: want auto, dsse or oms", o.format)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			var keys []crypto.PublicKey
			for _, p := range o.pubs {
				k, err := attest.LoadAnyPublicKey(p)
				if err != nil {
					return fmt.Errorf("--pub: %w", err)
				}
				keys = append(keys, k)
			}
			ed, ec, err := attest.SplitPublicKeys(keys)
			if err != nil {
				return fmt.Errorf("--pub: %w", err)
			}
			if err := jnfDir(dir); err != nil {
				return err
			}
			sigs, err := attest.FindManifestSignatures(dir)
			if err != nil {
				return openError(err)
			}
			if len(sigs) == 0 {
				return fmt.Errorf("%s is not signed (no %s): sign it with tarfa manifest sign %s --key KEY (nor %s: tarfa manifest sign --format oms)", dir, verify.SignatureFile, dir, verify.OMSSignatureFile)
			}
			var todo []attest.ManifestSignature
			var skipped []string
			for _, s := range sigs {
				if o.format != "auto" && s.Form != o.format {
					continue
				}
				if attest.KeysFor(s.Form, keys) != nil {
					skipped = append(skipped, s.Path)
					continue
				}
				todo = append(todo, s)
			}
			if len(todo) == 0 {
				if o.format != "auto" && len(skipped) == 0 {
					return fmt.Errorf("%s has no %s (--format %s); it has %s", dir, attest.SignatureFileFor(o.format), o.format, sigs[0].Path)
				}
				return fmt.Errorf("%s: %w", sigs[0].Path, attest.KeysFor(sigs[0].Form, keys))
			}
			results := map[string]*attest.Result{}
			for _, s := range todo {
				var res *attest.Result
				var err error
				if s.Form == attest.FormOMS {
					res, err = verifyOMS(cmd, dir, o, ec)
				} else {
					res, err = verifyDSSE(cmd, dir, o, ed)
				}
				if err != nil {
					return err
				}
				results[s.Form] = res
			}
			if o.asJSON {
				if len(results) == 1 {
					return writeJSON(cmd.OutOrStdout(), results[todo[0].Form])
				}
				return writeJSON(cmd.OutOrStdout(), results)
			}
			for _, p := range skipped {
				fmt.Fprintf(cmd.OutOrStdout(), "not checked: %s (no --pub key of its type)\n", p)
			}
			if o.skipData {
				fmt.Fprintln(cmd.OutOrStdout(), "UNSAFE: record data was not re-hashed (--unsafe-skip-data)")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.pubs, "pub", nil, "trusted SPKI PEM public key, Ed25519 (DSSE form) or ECDSA (OMS form) (repeatable)")
	f.StringVar(&o.name, "name", "", "require this model name in the signature (default: accept the signed name, printed)")
	f.StringVar(&o.format, "format", "auto", "which signature to check: auto (every form present with a key of its type), dsse or oms")
	f.BoolVar(&o.asJSON, "json", false, "print the verification result as JSON")
	f.BoolVar(&o.skipData, "unsafe-skip-data", false, "do not re-hash record data (UNSAFE: misses changed weights)")
	return cmd
}

// verifyDSSE checks DIR/manifest.sig.json (Tarfa's DSSE form) and prints
// the outcome unless --json.
func verifyDSSE(cmd *cobra.Command, dir string, o manifestVerifyOptions, keys []ed25519.PublicKey) (*attest.Result, error) {
	signed, err := attest.SignedManifestNames(dir, keys)
	if err != nil {
		return nil, err
	}
	name := o.name
	if name == "" {
		if len(signed) != 1 {
			return nil, fmt.Errorf("the signature names %d models (%s): choose one with --name", len(signed), strings.Join(signed, ", "))
		}
		name = signed[0]
	}
	update, finish := byteProgress(cmd.ErrOrStderr(), "verifying")
	var done, total int64
	if m, _, err := verify.LoadManifest(dir); err == nil {
		for _, e := range m.Entries {
			total += e.Length
		}
	}
	res, err := attest.VerifyManifest(dir, name, keys, attest.VerifyManifestOptions{Context: cmd.Context(), UnsafeSkipData: o.skipData,
		OnRecord: func(_ string, r *jnf.Record) { done += r.Length; update(done, max(done, total)) }})
	finish()
	if errors.Is(err, attest.ErrSubject) && o.name != "" && len(signed) > 0 {
		return nil, fmt.Errorf("%w; the signature names %s (leave out --name to accept the signed name, or pass --name %s)", err, quoteAll(signed), quoteAll(signed[:1]))
	}
	if err != nil {
		return nil, openError(err)
	}
	if !o.asJSON {
		how := "the name in the signature"
		if o.name != "" {
			how = "as --name requires"
		}
		fmt.Fprintf(cmd.OutOrStdout(), "ok: %s is %q (%s), root %s, signed by key %s\n", dir, name, how, res.ModelManifest.Root.Hex(), res.KeyID)
	}
	return res, nil
}

// verifyOMS checks DIR/model.sig (OMS v1.0) and prints the outcome unless
// --json.
func verifyOMS(cmd *cobra.Command, dir string, o manifestVerifyOptions, keys []*ecdsa.PublicKey) (*attest.Result, error) {
	update, finish := byteProgress(cmd.ErrOrStderr(), "verifying (OMS)")
	var done int64
	step := func(n int64) { done += n; update(done, done) }
	res, err := attest.VerifyManifestOMS(dir, o.name, keys, attest.VerifyManifestOptions{Context: cmd.Context(), UnsafeSkipData: o.skipData,
		OnFile:   func(_ string, n int64) { step(n) },
		OnRecord: func(_ string, r *jnf.Record) { step(r.Length) }})
	finish()
	if err != nil {
		return nil, openError(err)
	}
	if !o.asJSON {
		m, _, err := verify.LoadManifest(dir)
		if err != nil {
			return nil, err
		}
		how := "the name in the signature"
		if o.name != "" {
			how = "as --name requires"
		}
		fmt.Fprintf(cmd.OutOrStdout(), "ok: %s is %q (%s), OMS v1.0 signature over %d files (root %s), signed by key %s\n",
			dir, res.MatchedSubject.Name, how, len(res.OMS.Resources), m.Root, res.KeyID)
	}
	return res, nil
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
