package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/internal/flock"
	"github.com/tarfa-ai/tarfa/reports"
)

type convertOptions struct {
	out            string
	layers         string
	workers        int
	verify         bool
	asJSON         bool
	followSymlinks bool
	noWait         bool
	force          bool
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

// convertResult is convert's --json output.
type convertResult struct {
	Out             string   `json:"out"`
	Root            string   `json:"root"`
	WeightsRoot     string   `json:"weights_root"`
	Complete        bool     `json:"complete"`
	Written         []string `json:"written"`
	Resumed         []string `json:"resumed"`
	Bytes           int64    `json:"bytes"`
	SalvagedBytes   int64    `json:"salvaged_bytes"`
	SalvagedRecords int      `json:"salvaged_records"`
	VerifiedBytes   int64    `json:"verified_bytes"`
	Seconds         float64  `json:"seconds"`
}

// followSymlinksHelp is the --follow-symlinks flag's help, shared by
// convert and inspect.
const followSymlinksHelp = "read symbolic links in the checkpoint whose fully resolved target stays inside it (in a Hugging Face hub cache snapshot: inside its models--ORG--NAME directory); whatever a link points to is hashed into the root and published with the model"

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

Conversion is parallel (--workers files at once, 1 to 64), bounded in memory,
atomic per file, deterministic, and resumable: rerun the same command after an
interruption (Ctrl-C stops it within about a second) and finished files, and the
finished records of interrupted ones, are re-hashed and kept, not trusted.
--layers A-B converts a subset; convert the rest later into the same --out.
--verify re-reads every written byte and compares it with the source.

Everything read from SRC ends up in the root that is signed and published, so
only regular files are read from it: a symbolic link is refused, naming the link
and its target, unless --follow-symlinks is given, and even then a link whose
resolved target is outside SRC is refused. A Hugging Face hub cache snapshot
(~/.cache/huggingface/hub/models--ORG--NAME/snapshots/REV) is all links to
../../blobs/SHA: with --follow-symlinks, links there may resolve anywhere inside
models--ORG--NAME. A FIFO or device is refused always.

DIR must not be SRC, inside it, or contain it, and must hold nothing but what a
convert into it wrote (the files its manifest lists, or what an interrupted run
recorded in DIR/.tarfa.written): any other file is named and refused, and nothing
is deleted or replaced, unless --force. Before writing, convert checks that
DIR's file system has room for the files still to write. While it writes DIR it
holds DIR/.tarfa.lock: a second tarfa writing the same DIR says which process
holds it and waits for it to finish (--no-wait: fail at once instead).

Exit statuses: 0 ok; 1 error (bad flags, SRC is no Hugging Face checkpoint, too
little space, DIR holds files convert did not write, DIR held by another tarfa with --no-wait); 3 verification failed
(--verify: a written record fails its digests or differs from the source); 130 interrupted (rerun the same
command to resume).`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if _, _, err := parseLayers(o.layers); err != nil {
				return err
			}
			if o.out == "" {
				return fmt.Errorf("--out DIR is required")
			}
			if o.workers < 1 || o.workers > convert.MaxWorkers {
				return fmt.Errorf("--workers %d: want 1 to %d (files converted in parallel)", o.workers, convert.MaxWorkers)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			first, last, _ := parseLayers(o.layers)
			stderr := cmd.ErrOrStderr()
			passes := "hash the source, write"
			if o.verify {
				passes += ", compare, re-hash"
			}
			bar, finish := byteProgress(stderr, "converting (bytes of every pass: "+passes+")")
			var work atomic.Int64 // bytes of every pass done
			update := func(done, total int64) { work.Store(done); bar(done, total) }
			start := time.Now()
			res, err := convert.Convert(cmd.Context(), args[0], o.out, convert.Options{
				FirstLayer: first, LastLayer: last, Workers: o.workers, Verify: o.verify,
				FollowSymlinks: o.followSymlinks, NoWait: o.noWait, Force: o.force,
				Waiting: func(pid int) {
					fmt.Fprintf(stderr, "%s is writing %s, waiting… (Ctrl-C stops; --no-wait fails at once)\n", holder(pid), o.out)
				},
				Progress: update, Log: slog.New(slog.NewTextHandler(stderr, nil)),
			})
			finish()
			var held *flock.HeldError
			if errors.As(err, &held) {
				return fmt.Errorf("%s is writing %s: not waiting for it (--no-wait)", holder(held.PID), o.out)
			}
			if errors.Is(err, fs.ErrPermission) {
				// A read-only or immutable --out (or its parent): say which flag.
				return fmt.Errorf("--out %s: cannot write there: %w", o.out, err)
			}
			if err != nil {
				return interrupted(err, "rerun the same command to resume; finished files and the journaled records of unfinished ones are re-hashed and kept")
			}
			secs := time.Since(start).Seconds()
			out := cmd.OutOrStdout()
			if o.asJSON {
				return writeJSON(out, convertResult{
					Out: o.out, Root: res.Manifest.Root, WeightsRoot: res.Manifest.WeightsRoot,
					Complete: res.Manifest.Complete, Written: res.Written, Resumed: res.Resumed,
					Bytes: res.Bytes, SalvagedBytes: res.Salvaged, SalvagedRecords: res.SalvagedRecords,
					VerifiedBytes: res.Verified, Seconds: secs,
				})
			}
			fmt.Fprintln(out, convertSummary(args[0], o.out, res, work.Load(), secs))
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
	f.IntVar(&o.workers, "workers", 2, fmt.Sprintf("files converted in parallel (1 to %d)", convert.MaxWorkers))
	f.BoolVar(&o.verify, "verify", false, "compare every written byte with the source")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	f.BoolVar(&o.followSymlinks, "follow-symlinks", false, followSymlinksHelp)
	f.BoolVar(&o.noWait, "no-wait", false, "fail at once if another tarfa is writing --out, instead of waiting for it")
	f.BoolVar(&o.force, "force", false, "convert into a DIR that holds files no conversion wrote (left alone; those at the names convert writes are replaced)")
	return cmd
}

// convertSummary is convert's first line: what was written and kept, and
// the rate over the bytes of every pass (hashing the source, writing,
// re-verifying kept files, comparing), which is what the time was spent
// on; a directory that was complete already says so.
func convertSummary(src, out string, res *convert.Result, work int64, secs float64) string {
	took := time.Duration(secs * float64(time.Second)).Round(time.Millisecond)
	if len(res.Written) == 0 && res.SalvagedRecords == 0 {
		return fmt.Sprintf("already converted: %s → %s, %s re-verified, nothing to write (%s re-hashed in %s)",
			src, out, plural(len(res.Resumed), "file", "files"), reports.Bytes(work), took)
	}
	s := fmt.Sprintf("converted %s → %s: %s written (%s)", src, out, plural(len(res.Written), "file", "files"), reports.Bytes(res.Bytes))
	if len(res.Resumed) > 0 {
		s += fmt.Sprintf(", %s kept after re-verification", plural(len(res.Resumed), "file", "files"))
	}
	return s + fmt.Sprintf("; %s read over every pass in %s (%s)", reports.Bytes(work), took, reports.Rate(work, secs))
}
