package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/verify"
)

// verifyResult is verify's --json output: the report and what it amounts
// to.
type verifyResult struct {
	// Status is "ok" (every record of a complete model re-hashed),
	// "partial" (a partial conversion, every record present re-hashed),
	// "sampled" (only a sample re-hashed) or "failed".
	Status string `json:"status"`
	*verify.Report
}

type verifyOptions struct {
	sample float64
	seed   uint64
	asJSON bool
}

func newVerifyCommand() *cobra.Command {
	var o verifyOptions
	cmd := &cobra.Command{
		Use:   "verify [DIR]",
		Short: "Re-hash every record of a JNF directory against its manifest",
		Long: `Verify checks a JNF directory from the raw bytes up: the manifest's roots
against its entries, the manifest against the files' record tables and the copied
config/tokenizer files, then every record's SHA-256 and BLAKE3 and every padding
byte. Without DIR, the embedded default model is verified.

It says what was checked: "ok" only when every record of a complete model was
re-hashed; "partial: layers … of N" for a partial conversion (--layers), every
record present re-hashed; "sampled: N of M records" with --sample P, which
re-hashes a random fraction P in (0, 1] of the records (--seed picks them). A
sample that would check no record is refused.

Exit statuses: 0 nothing wrong found (ok, partial or sampled); 1 error (not a JNF
directory, bad flags); 3 a mismatch was found (each one is named by file, layer,
expert and offset); 130 interrupted.`,
		Args: cobra.MaximumNArgs(1),
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("sample") && (math.IsNaN(o.sample) || !(o.sample > 0 && o.sample <= 1)) {
				return fmt.Errorf("--sample %g: want a fraction of the records in (0, 1]", o.sample)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := modelDir(cmd, args)
			if err != nil {
				return err
			}
			var total, records int64
			m, _, err := verify.LoadManifest(dir)
			if nj := (*verify.NotJNFError)(nil); errors.As(err, &nj) {
				return err
			}
			if err == nil {
				for _, e := range m.Entries {
					if e.Kind != jnf.KindFile {
						total += e.Length
						records++
					}
				}
				if o.sample > 0 && o.sample < 1 && o.sample*float64(records) < 1 {
					return fmt.Errorf("--sample %g of %d records would re-hash none: want at least %.3g", o.sample, records, 1/float64(max(records, 1)))
				}
			}
			if o.sample > 0 && o.sample < 1 {
				total = int64(float64(total) * o.sample)
			}
			update, finish := byteProgress(cmd.ErrOrStderr(), "verifying")
			var done int64
			rep, err := verify.Check(cmd.Context(), dir, verify.CheckOptions{Sample: o.sample, Seed: o.seed,
				OnRecord: func(_ string, r *jnf.Record) { done += r.Length; update(done, max(total, done)) }})
			finish()
			if err != nil {
				return err
			}
			if rep.OK() && rep.Records > 0 && rep.RecordsChecked == 0 {
				return fmt.Errorf("--sample %g re-hashed none of the %d records (--seed %d): give a larger fraction", o.sample, rep.Records, o.seed)
			}
			status := "ok"
			switch {
			case !rep.OK():
				status = "failed"
			case rep.RecordsChecked < rep.Records:
				status = "sampled"
			case !rep.Complete:
				status = "partial"
			}
			out := cmd.OutOrStdout()
			if o.asJSON {
				if err := writeJSON(out, verifyResult{Status: status, Report: rep}); err != nil {
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
				}
				partial := ""
				if !rep.Complete {
					partial = fmt.Sprintf("partial: layers %s of %d present", layerRanges(rep.LayersPresent), rep.Layers)
				}
				switch status {
				case "ok":
					fmt.Fprintf(out, "ok: root %s\n", rep.Root)
				case "partial":
					fmt.Fprintf(out, "%s, every record present re-hashed; root %s (convert the other layers with tarfa convert --layers)\n", partial, rep.Root)
				case "sampled":
					fmt.Fprintf(out, "sampled: %d of %d records re-hashed, no mismatch; root %s (not a full check: run without --sample)\n", rep.RecordsChecked, rep.Records, rep.Root)
					if partial != "" {
						fmt.Fprintln(out, partial)
					}
				}
			}
			if !rep.OK() {
				return fmt.Errorf("%s: %d problem(s), first: %w", dir, len(rep.Problems), rep.Problems[0])
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Float64Var(&o.sample, "sample", 0, "re-hash only this fraction of the records, in (0, 1]")
	f.Uint64Var(&o.seed, "seed", 1, "seed choosing the sampled records")
	f.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	return cmd
}

// layerRanges writes sorted layer numbers as ranges: "0-3, 7, 9-10".
func layerRanges(ls []int) string {
	s := ""
	for i := 0; i < len(ls); {
		j := i
		for j+1 < len(ls) && ls[j+1] == ls[j]+1 {
			j++
		}
		if s != "" {
			s += ", "
		}
		if j == i {
			s += strconv.Itoa(ls[i])
		} else {
			s += fmt.Sprintf("%d-%d", ls[i], ls[j])
		}
		i = j + 1
	}
	if s == "" {
		return "none"
	}
	return s
}
