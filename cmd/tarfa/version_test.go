package main

import (
	"encoding/json"
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

// Without a commit set at build time or recorded by the toolchain (a test
// binary has no VCS stamp, like go run and -buildvcs=false builds),
// version and --version say the commit is unknown, why, and how to get it;
// the commit recorded in run reports stays plain "unknown".
func TestVersionWithoutVCS(t *testing.T) {
	old := commit
	commit = ""
	defer func() { commit = old }()
	if rev, note := commitInfo(); rev != "unknown" || note == "" {
		t.Fatalf("this test binary has a commit (%s %s): go test stamped VCS information, which this test assumes it never does", rev, note)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := runCLI(t, "", args...)
		want := "tarfa " + version + " (commit unknown: built without VCS information (go run, -buildvcs=false in go env GOFLAGS, a git worktree, or outside a git clone); " +
			`go build -buildvcs=true ./cmd/tarfa in a clone records it, -ldflags "-X main.commit=$(git rev-parse HEAD)" anywhere)` + "\n"
		if err != nil || out != want {
			t.Errorf("%v: %q %v, want %q", args, out, err, want)
		}
	}
	out, err := runCLI(t, "", "version", "--json")
	var v versionResult
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Commit != "unknown" || !strings.Contains(v.CommitNote, "-buildvcs=true") {
		t.Errorf("version --json: %s %v", out, err)
	}
	if gitCommit() != "unknown" {
		t.Errorf("gitCommit() = %q, want unknown", gitCommit())
	}
}

func TestPseudoRevision(t *testing.T) {
	for v, want := range map[string]string{
		"v0.0.0-20261201120000-0123456789ab":                "0123456789ab",
		"v0.0.0-20261201120000-0123456789ab+dirty":          "0123456789ab",
		"v1.2.4-0.20261201120000-0123456789ab":              "0123456789ab",
		"v1.2.3-pre.0.20261201120000-0123456789ab":          "0123456789ab",
		"v2.0.1-0.20261201120000-0123456789ab+incompatible": "0123456789ab",
		"v0.1.0":                              "",
		"(devel)":                             "",
		"v0.1.0-rc1":                          "",
		"v0.0.0-2026120112000-0123456789ab":   "", // 13-digit time
		"v0.0.0-20261201120000-0123456789AB":  "", // not lower-case hex
		"v0.0.0-20261201120000-0123456789abc": "",
		"v1.0.0-beta-0123456789ab":            "",
	} {
		if got := pseudoRevision(v); got != want {
			t.Errorf("pseudoRevision(%q) = %q, want %q", v, got, want)
		}
	}
}
