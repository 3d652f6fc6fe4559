package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/jnf/convert"
	"github.com/tarfa-ai/tarfa/reports"
)

func init() { register(newConvertCommand) }

type convertOptions struct {
	out     string
	layers  string
	workers int
	verify  bool
	asJSON  bool
}

// parseLayers parses "A-B" or "N" (inclusive); "" means all.
func parseLayers(s string) (first, last int, err error) {
	if s == "" {
		return 0, -1, nil
	}
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	if first, err = strconv.Atoi(a); err == nil {
		last, err = strconv.Atoi(b)
	}
	if err != nil || first < 0 || last < first {
		return 0, 0, fmt.Errorf("--layers %q: want A-B with 0 <= A <= B", s)
	}
	return first, last, nil
}

func newConvertCommand() *cobra.Command {
	var o convertOptions
	cmd := &cobra.Command{
		Use:   "convert SRC --out DIR",
		Short: "Convert a Hugging Face checkpoint into a verified JNF directory",
		Long: `Convert streams a Hugging Face checkpoint into the JNF format: every routed
expert becomes one 4096-aligned record holding its gate, up and down bytes exactly
as in the source; every other tensor its own aligned record; config and tokenizer
files are copied; manifest.json records SHA-256 and BLAKE3 of every byte range and
the Merkle root.

Conversion is parallel (--workers files at once), bounded in memory, atomic per
file, deterministic, and resumable: rerun the same command after an interruption
and finished files, and the finished records of interrupted ones, are re-hashed
and kept, not trusted. --layers A-B converts a subset;
convert the rest later into the same --out. --verify re-reads every written byte
and compares it with the source.

Exit statuses: 0 ok, 1 error (including a --verify mismatch).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			first, last, err := parseLayers(o.layers)
			if err != nil {
				return err
			}
			if o.out == "" {
				return fmt.Errorf("--out DIR is required")
			}
			update, finish := byteProgress(cmd.ErrOrStderr(), "converting")
			start := time.Now()
			res, err := convert.Convert(cmd.Context(), args[0], o.out, convert.Options{
				FirstLayer: first, LastLayer: last, Workers: o.workers, Verify: o.verify,
				Progress: update, Log: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)),
			})
			finish()
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("interrupted (%w): rerun the same command to resume; finished files and the journaled records of unfinished ones are re-hashed and kept", err)
			}
			if err != nil {
				return err
			}
			secs := time.Since(start).Seconds()
			out := cmd.OutOrStdout()
			if o.asJSON {
				return json.NewEncoder(out).Encode(map[string]any{
					"out": o.out, "root": res.Manifest.Root, "weights_root": res.Manifest.WeightsRoot,
					"complete": res.Manifest.Complete, "written": res.Written, "resumed": res.Resumed,
					"bytes": res.Bytes, "salvaged_bytes": res.Salvaged, "salvaged_records": res.SalvagedRecords,
					"verified_bytes": res.Verified, "seconds": secs,
				})
			}
			fmt.Fprintf(out, "converted %s → %s: %d files written (%s, %s), %d kept after re-verification\n",
				args[0], o.out, len(res.Written), reports.Bytes(res.Bytes), reports.Rate(res.Bytes, secs), len(res.Resumed))
			if res.SalvagedRecords > 0 {
				fmt.Fprintf(out, "resumed: %d records (%s) of interrupted files kept after re-hashing\n", res.SalvagedRecords, reports.Bytes(res.Salvaged))
			}
			if o.verify {
				fmt.Fprintf(out, "verified: %s compared byte for byte with the source\n", reports.Bytes(res.Verified))
			}
			if !res.Manifest.Complete {
				fmt.Fprintf(out, "incomplete: layers present %v of %d; convert the remaining layers with --layers\n", res.Manifest.LayersHeld, res.Manifest.Layers)
			}
			fmt.Fprintf(out, "root %s\n", res.Manifest.Root)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.out, "out", "", "output JNF directory")
	f.StringVar(&o.layers, "layers", "", "convert only layers A-B (inclusive)")
	f.IntVar(&o.workers, "workers", 2, "files converted in parallel")
	f.BoolVar(&o.verify, "verify", false, "compare every written byte with the source")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	return cmd
}
