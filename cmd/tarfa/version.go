package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version and commit can be set at build time:
//
//	go build -ldflags "-X main.version=0.1.0 -X main.commit=$(git rev-parse HEAD)" ./cmd/tarfa
//
// Without -X main.commit the commit comes from the Go toolchain's VCS
// stamping (absent under go run, -buildvcs=false and in a git worktree) or from the module's
// pseudo-version (go install …@COMMIT); when neither has it, version says
// so and how to get it.
var (
	version = "0.1.0-dev"
	commit  = ""
)

// versionResult is version's --json output.
type versionResult struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	// CommitNote, when Commit is "unknown", says why and how to get it.
	CommitNote string `json:"commit_note,omitempty"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
}

func newVersionCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version and git commit (also tarfa --version)",
		Long: `Version prints the version and the git commit the binary was built from
(--json: with the Go version and platform too).

` + exitStatuses,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				rev, note := commitInfo()
				return writeJSON(cmd.OutOrStdout(), versionResult{Version: version, Commit: rev, CommitNote: note,
					Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH})
			}
			fmt.Fprint(cmd.OutOrStdout(), versionLine())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print version, commit, Go version and platform as JSON")
	return cmd
}

// versionLine is what version and --version print.
func versionLine() string {
	rev, note := commitInfo()
	if note != "" {
		rev += ": " + note
	}
	return fmt.Sprintf("tarfa %s (commit %s)\n", version, rev)
}

// gitCommit is the commit the binary was built from, or "unknown"
// (commitInfo says why).
func gitCommit() string {
	rev, _ := commitInfo()
	return rev
}

// noVCS is why the commit is unknown in a build without VCS information.
// Go stamps neither go run nor a git worktree (a .git file, not a
// directory: cmd/go's VCS lookup wants the directory).
const noVCS = "built without VCS information (go run, -buildvcs=false in go env GOFLAGS, a git worktree, or outside a git clone); " +
	`go build -buildvcs=true ./cmd/tarfa in a clone records it, -ldflags "-X main.commit=$(git rev-parse HEAD)" anywhere`

// commitInfo is the commit the binary was built from: -X main.commit,
// else the VCS revision the Go toolchain recorded (with -dirty for
// uncommitted changes), else the revision in the main module's
// pseudo-version (v0.0.0-20261201120000-0123456789ab: its first 12 hex
// digits). Otherwise it is "unknown", and note says why and how to get it.
func commitInfo() (rev, note string) {
	if commit != "" {
		return commit, ""
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown", "the binary has no build information"
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		if dirty {
			rev += "-dirty"
		}
		return rev, ""
	}
	v := bi.Main.Version
	if h := pseudoRevision(v); h != "" {
		return h, ""
	}
	if v != "" && v != "(devel)" {
		return "unknown", "built from module version " + v + ", which names it"
	}
	return "unknown", noVCS
}

// pseudoRevision is the revision of a pseudo-version
// (vX.Y.Z-[pre.]yyyymmddhhmmss-abcdef123456, +incompatible or +dirty
// allowed), or "".
func pseudoRevision(v string) string {
	v, _, _ = strings.Cut(v, "+")
	i := strings.LastIndexByte(v, '-')
	if i < 0 || len(v)-i-1 != 12 {
		return ""
	}
	h, ts := v[i+1:], v[:i]
	if j := max(strings.LastIndexByte(ts, '-'), strings.LastIndexByte(ts, '.')); j >= 0 {
		ts = ts[j+1:]
	}
	if len(ts) != 14 || strings.Trim(ts, "0123456789") != "" || strings.Trim(h, "0123456789abcdef") != "" {
		return ""
	}
	return h
}
