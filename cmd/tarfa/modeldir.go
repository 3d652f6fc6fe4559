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

func defaultModel(cmd *cobra.Command) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no model directory given and no user cache directory for the default model: %w", err)
	}
	stderr := cmd.ErrOrStderr()
	dir, built, err := synth.EnsureDefaultWith(cmd.Context(), filepath.Join(cache, "tarfa"), synth.EnsureOptions{
		Rebuilding: func(why string) {
			if !strings.HasPrefix(why, "no cached copy") {
				fmt.Fprintf(stderr, "embedded default model: %s; rebuilding it\n", why)
			}
		},
		Waiting: func(pid int) {
			fmt.Fprintf(stderr, "another tarfa (pid %d) is building the embedded default model, waiting…\n", pid)
		},
	})
	if err != nil {
		return "", fmt.Errorf("embedded default model: %w", err)
	}
	if built {
		fmt.Fprintf(stderr, "built the embedded default model (synth → convert --verify → verify) in %s\n", dir)
	}
	return dir, nil
}
