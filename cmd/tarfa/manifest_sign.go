package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
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
	key, name     string
	force, noWait bool
	asJSON        bool
}

// manifestSignResult is manifest sign's --json output.
type manifestSignResult struct {
	Dir       string `json:"dir"`
	Name      string `json:"name"`
	Root      string `json:"root"`
	KeyID     string `json:"keyid"`
	Signature string `json:"signature"` // the envelope's path
}

func newManifestSignCommand() *cobra.Command {
	var o manifestSignOptions
	cmd := &cobra.Command{
		Use:   "sign DIR --key NAME",
		Short: "Sign the manifest root (DSSE envelope over an in-toto statement)",
		Long: `Sign writes DIR/manifest.sig.json: a DSSE envelope (payloadType
application/vnd.in-toto+json, one Ed25519 signature) over an in-toto Statement v1
whose subject is the model (--name, default the directory's name) with the manifest
root as its sha256 digest. The manifest is first checked against the files.

A signature already in DIR is not replaced unless --force is given. While it
writes DIR it holds DIR/.tarfa.lock, as convert does: a second tarfa writing DIR
waits for it (--no-wait: fails at once).

` + exitStatuses,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if o.key == "" {
				return fmt.Errorf("--key NAME is required (make one with `tarfa keys generate --out NAME`)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			priv, err := attest.LoadPrivateKey(o.key)
			if err != nil {
				return fmt.Errorf("--key: %w", err)
			}
			if err := jnfDir(dir); err != nil {
				return err
			}
			name, err := defaultModelName(dir, o.name)
			if err != nil {
				return err
			}
			sig := filepath.Join(dir, verify.SignatureFile)
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
			env, err := attest.SignManifest(dir, name, priv)
			if err != nil {
				return openError(err)
			}
			m, _, err := verify.LoadManifest(dir)
			if err != nil {
				return err
			}
			res := manifestSignResult{Dir: dir, Name: name, Root: m.Root, KeyID: env.Signatures[0].KeyID, Signature: sig}
			if o.asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed %s as %q with key %s → %s\n", dir, name, res.KeyID, sig)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.key, "key", "", "PKCS#8 PEM private key")
	f.StringVar(&o.name, "name", "", "model name in the statement subject (default: the directory name)")
	f.BoolVar(&o.force, "force", false, "replace an existing signature")
	f.BoolVar(&o.noWait, "no-wait", false, noWaitHelp)
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	return cmd
}

// signedNames reads DIR's signature, checks it under the trusted keys and
// returns the subject names of the signed statement. An unsigned directory
// is a usage error (status 1) saying how to sign it.
func signedNames(dir string, keys []ed25519.PublicKey) ([]string, error) {
	path := filepath.Join(dir, verify.SignatureFile)
	b, err := jnf.ReadFileLimit(path, jnf.MaxEnvelopeSize, verify.SignatureFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is not signed (no %s): sign it with tarfa manifest sign %s --key KEY", dir, verify.SignatureFile, dir)
	}
	if err != nil {
		return nil, err
	}
	env, err := attest.ParseEnvelope(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	payload, _, err := attest.VerifyEnvelope(env, attest.PayloadTypeInToto, keys)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	st, err := attest.ParseStatement(payload)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var names []string
	for _, s := range st.Subject {
		names = append(names, s.Name)
	}
	return names, nil
}

type manifestVerifyOptions struct {
	pubs             []string
	name             string
	asJSON, skipData bool
}

func newManifestVerifyCommand() *cobra.Command {
	var o manifestVerifyOptions
	cmd := &cobra.Command{
		Use:   "verify DIR --pub NAME.pub",
		Short: "Check the manifest signature and that the root matches the files",
		Long: `Verify checks DIR/manifest.sig.json against the trusted public key(s): the DSSE
signature, the statement (predicate type, subject name and digest = manifest root),
that the signed predicate describes this manifest byte for byte, and that the files
still hash to the signed root: record tables, copied config/tokenizer files, and
every record's bytes and padding (as ` + "`tarfa verify`" + `). --unsafe-skip-data leaves
out the record bytes (a changed expert byte then goes unnoticed).

The subject name is the one in the signature (printed), so a copy of a signed
model in a directory of another name verifies; --name NAME requires that name.

Exit statuses: 0 verified; 1 error (DIR is no JNF directory or is not signed, a
key cannot be read); 3 verification failed (signature, subject, manifest or record
bytes); 130 interrupted.`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if len(o.pubs) == 0 {
				return fmt.Errorf("--pub NAME.pub is required")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			var keys []ed25519.PublicKey
			for _, p := range o.pubs {
				k, err := attest.LoadPublicKey(p)
				if err != nil {
					return fmt.Errorf("--pub: %w", err)
				}
				keys = append(keys, k)
			}
			if err := jnfDir(dir); err != nil {
				return err
			}
			signed, err := signedNames(dir, keys)
			if err != nil {
				return err
			}
			name := o.name
			if name == "" {
				if len(signed) != 1 {
					return fmt.Errorf("the signature names %d models (%s): choose one with --name", len(signed), strings.Join(signed, ", "))
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
				return fmt.Errorf("%w; the signature names %s (leave out --name to accept the signed name, or pass --name %s)", err, quoteAll(signed), quoteAll(signed[:1]))
			}
			if err != nil {
				return openError(err)
			}
			if o.asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			how := "the name in the signature"
			if o.name != "" {
				how = "as --name requires"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %s is %q (%s), root %s, signed by key %s\n", dir, name, how, res.ModelManifest.Root.Hex(), res.KeyID)
			if o.skipData {
				fmt.Fprintln(cmd.OutOrStdout(), "UNSAFE: record data was not re-hashed (--unsafe-skip-data)")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.pubs, "pub", nil, "trusted SPKI PEM public key (repeatable)")
	f.StringVar(&o.name, "name", "", "require this model name in the signature (default: accept the signed name, printed)")
	f.BoolVar(&o.asJSON, "json", false, "print the verification result as JSON")
	f.BoolVar(&o.skipData, "unsafe-skip-data", false, "do not re-hash record data (UNSAFE: misses changed weights)")
	return cmd
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}
