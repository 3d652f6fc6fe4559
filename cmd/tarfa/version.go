package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit can be set at build time:
//
//	go build -ldflags "-X main.version=0.1.0 -X main.commit=$(git rev-parse HEAD)" ./cmd/tarfa
//
// Without -X main.commit the commit comes from the Go toolchain's VCS
// stamping (absent under -buildvcs=false).
var (
	version = "0.1.0-dev"
	commit  = ""
)

// versionResult is version's --json output.
type versionResult struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
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
				return writeJSON(cmd.OutOrStdout(), versionResult{Version: version, Commit: gitCommit(),
					Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "tarfa %s (commit %s)\n", version, gitCommit())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print version, commit, Go version and platform as JSON")
	return cmd
}

// gitCommit is the VCS revision recorded by the Go toolchain, or "unknown"
// when the binary was built without VCS information (-buildvcs=false).
func gitCommit() string {
	if commit != "" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
