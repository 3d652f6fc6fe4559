package main

import (
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	old := commit
	commit = "0123abc"
	defer func() { commit = old }()
	out, err := runCLI(t, "", "version")
	if err != nil || !strings.Contains(out, "tarfa "+version) || !strings.Contains(out, "commit 0123abc") {
		t.Errorf("version: %q %v", out, err)
	}
}
