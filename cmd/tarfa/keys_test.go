package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/attest"
)

// runKeysCLI runs the CLI in-process and returns stdout and the error.
func runKeysCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestKeysGenerate(t *testing.T) {
	name := filepath.Join(t.TempDir(), "release-key")
	out, err := runKeysCLI(t, "keys", "generate", "--out", name)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := attest.LoadPrivateKey(name)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := attest.LoadPublicKey(name + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(priv.Public()) {
		t.Fatal("NAME.pub is not the public half of NAME")
	}
	id, _ := attest.KeyID(pub)
	want := "private key  " + name + "\npublic key   " + name + ".pub\nkeyid        " + id + "\n"
	if out != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want)
	}
	for path, mode := range map[string]os.FileMode{name: 0o600, name + ".pub": 0o644} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v (%v), want %o", path, fi.Mode().Perm(), err, mode)
		}
	}
	before, _ := os.ReadFile(name)

	// A second run refuses to replace the key, says how to, and exits 1.
	out, err = runKeysCLI(t, "keys", "generate", "--out", name)
	if !errors.Is(err, attest.ErrKeyExists) || !strings.Contains(err.Error(), "--force") || out != "" {
		t.Fatalf("second run: out %q err %v, want ErrKeyExists mentioning --force", out, err)
	}
	if code := exitCode(err); code != exitError {
		t.Errorf("exit code %d, want %d", code, exitError)
	}
	if after, _ := os.ReadFile(name); !bytes.Equal(before, after) {
		t.Fatal("key replaced without --force")
	}

	// --force replaces it with a new key.
	if _, err := runKeysCLI(t, "keys", "generate", "--out", name, "--force"); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(name); bytes.Equal(before, after) {
		t.Fatal("--force did not write a new key")
	}
}

func TestKeysGenerateUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"keys", "generate"},
		{"keys", "generate", "--out", ""},
		{"keys", "generate", "--out", filepath.Join(t.TempDir(), "k"), "extra"},
		{"keys", "generate", "--out", filepath.Join(t.TempDir(), "no", "such", "dir", "k")},
	} {
		if out, err := runKeysCLI(t, args...); err == nil {
			t.Errorf("tarfa %s: succeeded with output %q", strings.Join(args, " "), out)
		}
	}
}
