package main

import (
	"fmt"
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

func init() { register(newVersionCommand) }

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and git commit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "tarfa %s (commit %s)\n", version, gitCommit())
			return nil
		},
	}
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
