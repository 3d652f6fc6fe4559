package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/validation/synth"
)

// modelDir resolves the model directory argument; without one, the embedded
// default model is used: built on first use into the user cache directory
// (synth → convert → verify) and re-verified each time.
func modelDir(cmd *cobra.Command, args []string) (string, error) {
	if len(args) > 0 && args[0] != "" {
		return args[0], nil
	}
	return defaultModel(cmd)
}

// defaultModel returns the embedded default model's directory, verifying
// the cached copy (and saying so when it fails verification) or building it;
// concurrent tarfa processes wait for the one that builds it.
func defaultModel(cmd *cobra.Command) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no model directory given and no user cache directory for the default model: %w", err)
	}
	stderr := cmd.ErrOrStderr()
	done := stepProgress(stderr, "verifying the embedded default model")
	dir, built, err := synth.EnsureDefaultWith(cmd.Context(), filepath.Join(cache, "tarfa"), synth.EnsureOptions{
		Rebuilding: func(why string) {
			done()
			if !strings.HasPrefix(why, "no cached copy") {
				fmt.Fprintf(stderr, "embedded default model: %s; rebuilding it\n", why)
			}
			done = stepProgress(stderr, "building the embedded default model")
		},
		Waiting: func(pid int) {
			fmt.Fprintf(stderr, "%s is building the embedded default model, waiting… (Ctrl-C stops)\n", holder(pid))
		},
	})
	done()
	if err != nil {
		return "", interrupted(fmt.Errorf("embedded default model: %w", err),
			"the next command verifies the embedded default model again, or builds it anew")
	}
	if built {
		fmt.Fprintf(stderr, "built the embedded default model (synth → convert --verify → verify) in %s\n", dir)
	}
	return dir, nil
}
