package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

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
					problemTable(out, rep.Problems)
					fmt.Fprintf(out, "(hashes shortened; every problem in full: tarfa verify %s --json)\n", dir)
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
				return fmt.Errorf("%s: %s, first: %w", dir, plural(len(rep.Problems), "problem", "problems"), rep.Problems[0])
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

// longHex is a run of hex digits long enough to be a digest.
var longHex = regexp.MustCompile(`[0-9a-f]{32,}`)

// problemWidth is the widest line of the problem column.
const problemWidth = 30

// problemTable writes verify's problems as a table that fits a terminal:
// the record as "layer L expert E" or "layer L" and the tensor's own name,
// digests cut to their first 12 hex digits (the error message and --json
// have them whole), a long problem broken over lines, and the records of
// one file with the same problem and no offset (a missing file) on one row.
func problemTable(w io.Writer, ps []verify.Problem) {
	var rows [][]string
	for i := 0; i < len(ps); i++ {
		p := ps[i]
		rec := p.Name
		switch {
		case p.Expert >= 0:
			rec = fmt.Sprintf("layer %d expert %d", p.Layer, p.Expert)
		case p.Layer >= 0 && p.Name == "":
			rec = fmt.Sprintf("layer %d", p.Layer)
		case p.Layer >= 0:
			rec = fmt.Sprintf("layer %d %s", p.Layer, strings.TrimPrefix(p.Name, fmt.Sprintf("model.layers.%d.", p.Layer)))
		}
		j := i + 1
		for j < len(ps) && p.Offset < 0 && ps[j].Offset < 0 && ps[j].File == p.File && ps[j].What == p.What {
			j++
		}
		if j-i > 2 {
			rec = fmt.Sprintf("%d records", j-i)
			i = j - 1
		}
		if rec == "" {
			rec = "-"
		}
		off := "-"
		if p.Offset >= 0 {
			off = strconv.FormatInt(p.Offset, 10)
		}
		what := longHex.ReplaceAllStringFunc(p.What, func(h string) string { return h[:12] + "…" })
		rows = append(rows, []string{p.File, rec, off, wrapText(what, problemWidth)})
	}
	reports.Table(w, []string{"file", "record", "offset", "problem"}, rows)
}

// wrapText breaks s after its colons and commas and between words so that
// no line is wider than width (a single longer word stays whole).
func wrapText(s string, width int) string {
	if len([]rune(s)) <= width {
		return s
	}
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len([]rune(line))+1+len([]rune(word)) > width:
			lines, line = append(lines, line), word
		default:
			line += " " + word
		}
		if strings.HasSuffix(word, ":") || strings.HasSuffix(word, ",") {
			lines, line = append(lines, line), ""
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}
