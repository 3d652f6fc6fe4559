package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeFlagLimits: the upper bounds of --max-batch and --max-queue
// and the API key file's size and form are refused with errors naming
// them, before anything is opened.
func TestServeFlagLimits(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-batch", "1025"}, "--max-batch 1025"},
		{[]string{"--max-queue", "65537"}, "--max-queue 65537"},
	} {
		_, err := runCLI(t, "", append([]string{"serve", "--model", "/nonexistent/model"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err) != exitError {
			t.Errorf("serve %v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name, key, want string
	}{
		{"large", strings.Repeat("k", maxAPIKeyFile+1), "API key file"},
		{"spaced", "two words", "byte 3 is 0x20"},
		{"blank", " \n", "empty"},
	} {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, []byte(c.key), 0o600); err != nil {
			t.Fatal(err)
		}
		if k, err := readAPIKey(path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s key file: %.20q %v, want an error naming %q", c.name, k, err, c.want)
		}
	}
	path := filepath.Join(dir, "good")
	if err := os.WriteFile(path, []byte(" "+strings.Repeat("k", maxAPIKeyFile-2)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := readAPIKey(path); err != nil || k != strings.Repeat("k", maxAPIKeyFile-2) {
		t.Errorf("a key file at the limit: %d bytes %v", len(k), err)
	}
}
