package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/verify"
)

func init() { register(newManifestCommand) }

func newManifestCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "manifest",
		Short: "Show, sign and verify the manifest of a JNF directory",
	}
	cmd.AddCommand(newManifestShowCommand())
	for _, f := range manifestSubcommands {
		cmd.AddCommand(f())
	}
	return cmd
}

// manifestSubcommands are added by other files (sign, verify).
var manifestSubcommands []func() *cobra.Command

func newManifestShowCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show [DIR]",
		Short: "Print the manifest root and every entry",
		Long: `Show prints the manifest root and every entry (files, tensors, expert records)
with its JNF file, offset, length and SHA-256. The stored roots are recomputed from
the entries first; an edited manifest is an error. --json prints the manifest
itself: "root" and an "entries" array whose items carry name, file, offset, length
and sha256 (hex), among other fields.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := modelDir(cmd, args)
			if err != nil {
				return err
			}
			m, raw, err := verify.LoadManifest(dir)
			if err != nil {
				return failVerification(err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				_, err := out.Write(raw)
				return err
			}
			fmt.Fprintf(out, "root          %s\nweights_root  %s\narch          %s (%s), %d layers, complete: %v\n",
				m.Root, m.WeightsRoot, m.Arch, m.ModelType, m.Layers, m.Complete)
			rows := make([][]string, 0, len(m.Entries))
			for _, e := range m.Entries {
				rows = append(rows, []string{e.Kind, e.Name, e.File, strconv.FormatInt(e.Offset, 10), strconv.FormatInt(e.Length, 10), e.SHA256})
			}
			return reports.Table(out, []string{"kind", "name", "file", "offset", "length", "sha256"}, rows)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the manifest JSON")
	return cmd
}
