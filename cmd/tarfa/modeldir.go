package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// modelDir resolves the model directory argument; without one, the embedded
// default model is used (built on first use).
func modelDir(cmd *cobra.Command, args []string) (string, error) {
	if len(args) > 0 && args[0] != "" {
		return args[0], nil
	}
	return "", fmt.Errorf("no model directory given (the embedded default model is not available yet)")
}
