package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/verify"
)

// The OMS form end to end: an ECDSA key, manifest sign --format oms writes
// model.sig, manifest verify finds it (beside the DSSE one) and checks each
// form with the keys of its type, and a wrong key type, an extra file or a
// tampered byte exit as the README's table says.
func TestManifestSignVerifyOMS(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "release")
	mustCLI(t, "convert", devACheckpoint, "--out", model)
	ec, ed := filepath.Join(dir, "ec"), filepath.Join(dir, "ed")
	out := mustOut(t, "keys", "generate", "--type", "ecdsa-p256", "--out", ec)
	if !strings.Contains(out, "oms hint") {
		t.Errorf("keys generate --type ecdsa-p256: %s", out)
	}
	mustCLI(t, "keys", "generate", "--out", ed)
	if _, err := runCLI(t, "", "manifest", "sign", model, "--key", ed, "--format", "oms"); exitCode(err) != exitError || !strings.Contains(err.Error(), "--type ecdsa-p256") {
		t.Errorf("OMS with an Ed25519 key: exit %d, %v", exitCode(err), err)
	}
	if _, err := runCLI(t, "", "manifest", "sign", model, "--key", ec); exitCode(err) != exitError || !strings.Contains(err.Error(), "--format oms") {
		t.Errorf("DSSE with an ECDSA key: exit %d, %v", exitCode(err), err)
	}
	out = mustOut(t, "manifest", "sign", model, "--key", ec, "--format", "oms", "--json")
	var sr manifestSignResult
	if err := json.Unmarshal([]byte(out), &sr); err != nil || sr.Form != "oms" || filepath.Base(sr.Signature) != verify.OMSSignatureFile {
		t.Errorf("sign --format oms --json: %v %s", err, out)
	}
	out = mustOut(t, "manifest", "verify", model, "--pub", ec+".pub")
	if !strings.Contains(out, `is "release"`) || !strings.Contains(out, "OMS v1.0 signature over") {
		t.Errorf("verify OMS: %s", out)
	}
	if _, err := runCLI(t, "", "manifest", "verify", model, "--pub", ed+".pub"); exitCode(err) != exitError || !strings.Contains(err.Error(), "ECDSA") {
		t.Errorf("OMS with an Ed25519 key: exit %d, %v", exitCode(err), err)
	}
	mustCLI(t, "manifest", "sign", model, "--key", ed)
	// attest run verifies and records the DSSE signature: an ECDSA key is
	// refused before the run, naming the command that checks model.sig.
	prompts := filepath.Join(dir, "prompts.jsonl")
	os.WriteFile(prompts, []byte(`{"tokens": [1, 2], "max_tokens": 2}`+"\n"), 0o644)
	_, err := runCLI(t, "", "attest", "run", "--model", model, "--key", ed, "--prompts", prompts, "--out", filepath.Join(dir, "r.json"), "--manifest-pub", ec+".pub")
	if exitCode(err) != exitError || err == nil || !strings.Contains(err.Error(), "an ecdsa-p256 key, which checks an OMS signature") || !strings.Contains(err.Error(), "tarfa manifest verify "+model+" --pub "+ec+".pub") {
		t.Errorf("attest run --manifest-pub ECDSA: exit %d, %v", exitCode(err), err)
	}
	// With an Ed25519 key and no --manifest-name, the signed name is taken
	// (it was "empty model name") and the report says the signature verified.
	mustCLI(t, "attest", "run", "--model", model, "--key", ed, "--prompts", prompts, "--out", filepath.Join(dir, "r.json"), "--manifest-pub", ed+".pub")
	if out := mustOut(t, "report", "show", filepath.Join(dir, "r.json")); !strings.Contains(out, "(verified at run time), model name \"release\"") {
		t.Errorf("attest show of a run with --manifest-pub: %s", out)
	}
	out = mustOut(t, "manifest", "verify", model, "--pub", ed+".pub", "--pub", ec+".pub", "--json")
	var both map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &both); err != nil || both["dsse"] == nil || both["oms"] == nil {
		t.Errorf("both forms --json: %v %s", err, out)
	}
	out = mustOut(t, "manifest", "verify", model, "--pub", ed+".pub")
	if !strings.Contains(out, "not checked: "+filepath.Join(model, "model.sig")) {
		t.Errorf("DSSE key only: %s", out)
	}
	os.WriteFile(filepath.Join(model, "README.md"), []byte("x"), 0o644)
	if _, err := runCLI(t, "", "manifest", "verify", model, "--pub", ec+".pub"); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "README.md: in the directory but not in the signature") {
		t.Errorf("extra file: exit %d, %v", exitCode(err), err)
	}
	// The DSSE form does not cover files outside the manifest.
	mustCLI(t, "manifest", "verify", model, "--pub", ed+".pub", "--format", "dsse")
	os.Remove(filepath.Join(model, "README.md"))
	p := filepath.Join(model, "layer-00002.jnf")
	b, _ := os.ReadFile(p)
	b[len(b)-1] ^= 1
	os.WriteFile(p, b, 0o644)
	if _, err := runCLI(t, "", "manifest", "verify", model, "--pub", ec+".pub"); exitCode(err) != exitNotExact || !strings.Contains(err.Error(), "layer-00002.jnf: sha256") {
		t.Errorf("flipped byte: exit %d, %v", exitCode(err), err)
	}
}

func mustOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runCLI(t, "", args...)
	if err != nil {
		t.Fatalf("tarfa %s: %v", strings.Join(args, " "), err)
	}
	return out
}
