package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/verify"
)

func newManifestCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "manifest",
		Short: "Show, sign and verify the manifest of a JNF directory",
	}
	cmd.AddCommand(newManifestShowCommand(), newManifestSignCommand(), newManifestVerifyCommand())
	return cmd
}

func newManifestShowCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show [DIR]",
		Short: "Print the manifest root and every entry",
		Long: `Show prints the manifest root and every entry (files, tensors, expert records)
with its JNF file, offset, length and SHA-256, and the manifest's own fields (arch,
layers, sources with their SHA-256, ignored tensors).

Nothing printed is unchecked: the manifest is checked against itself (both roots
recomputed from its fields and entries; the root covers every field), and against
the files — the record tables and auxiliary files are re-derived and must give the
same root. Record bytes are not re-hashed here: tarfa verify does that. Shard
digests are as the converter computed them from the source checkpoint (compare
them with the Hub's LFS object ids; tarfa convert --verify re-reads the source).
--json prints the manifest itself: "root" and an "entries" array whose items
carry name, file, offset, length and sha256 (hex), among other fields.

Exit statuses: 0 ok, 1 error (not a JNF directory), 3 the manifest or the files
do not check, 130 interrupted.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := modelDir(cmd, args)
			if err != nil {
				return err
			}
			d, err := verify.OpenDir(cmd.Context(), dir)
			if err != nil {
				return openError(err)
			}
			d.Close()
			m, raw := d.Manifest, d.ManifestBytes
			out := cmd.OutOrStdout()
			if asJSON {
				_, err := out.Write(raw)
				return err
			}
			fmt.Fprintf(out, "root          %s\nweights_root  %s\narch          %s (%s), layout %s, %d layers, present %d, complete: %v\n",
				m.Root, m.WeightsRoot, m.Arch, m.ModelType, m.Layout, m.Layers, len(m.LayersHeld), m.Complete)
			for _, src := range m.Sources {
				fmt.Fprintf(out, "source        %s  %d bytes  sha256 %s\n", src.File, src.Size, src.SHA256)
			}
			for _, ig := range m.Ignored {
				fmt.Fprintf(out, "ignored       %s (%d bytes): %s\n", ig.Name, ig.Bytes, ig.Reason)
			}
			fmt.Fprintln(out, "checked       manifest against itself and against the record tables and auxiliary files (record bytes: tarfa verify)")
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
