package main

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/verify"
)

func init() { register(newVerifyCommand) }

func newVerifyCommand() *cobra.Command {
	var (
		sample float64
		seed   uint64
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "verify [DIR]",
		Short: "Re-hash every record of a JNF directory against its manifest",
		Long: `Verify checks a JNF directory from the raw bytes up: the manifest's roots
against its entries, the manifest against the files' record tables and the copied
config/tokenizer files, then every record's SHA-256 and BLAKE3 and every padding
byte. --sample P re-hashes a random fraction P of the records (--seed picks them).
Without DIR, the embedded default model is verified.

Exit statuses: 0 everything verified, 1 error, 3 a mismatch was found (each one
is named by file, layer, expert and offset).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if sample < 0 || sample > 1 {
				return fmt.Errorf("--sample %g: want a fraction in (0, 1]", sample)
			}
			dir, err := modelDir(cmd, args)
			if err != nil {
				return err
			}
			update, finish := byteProgress(cmd.ErrOrStderr(), "verifying")
			var total, done int64
			if m, _, err := verify.LoadManifest(dir); err == nil {
				for _, e := range m.Entries {
					total += e.Length
				}
			}
			rep, err := verify.Check(cmd.Context(), dir, verify.CheckOptions{Sample: sample, Seed: seed,
				OnRecord: func(_ string, r *jnf.Record) { done += r.Length; update(done, total) }})
			finish()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := json.NewEncoder(out).Encode(rep); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "%s: %d files, %d of %d records re-hashed (%s)\n", dir, rep.Files, rep.RecordsChecked, rep.Records, reports.Bytes(rep.BytesChecked))
				if len(rep.Problems) > 0 {
					var rows [][]string
					for _, p := range rep.Problems {
						rows = append(rows, []string{p.File, p.Name, strconv.Itoa(p.Layer), strconv.Itoa(p.Expert), strconv.FormatInt(p.Offset, 10), p.What})
					}
					reports.Table(out, []string{"file", "name", "layer", "expert", "offset", "problem"}, rows)
				} else {
					fmt.Fprintf(out, "ok: root %s\n", rep.Root)
				}
			}
			if !rep.OK() {
				return failVerification(fmt.Errorf("%s: %d problem(s), first: %v", dir, len(rep.Problems), rep.Problems[0]))
			}
			return nil
		},
	}
	cmd.Flags().Float64Var(&sample, "sample", 0, "re-hash only this fraction of the records")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed choosing the sampled records")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
