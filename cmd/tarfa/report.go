package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/tokenizer"
)

func newReportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Run reports for people",
	}
	cmd.AddCommand(newReportShowCommand())
	return cmd
}

type reportShowOptions struct {
	format, out string
	pubs        []string
	manifest    string
	tokenizer   string
	force       bool
}

func newReportShowCommand() *cobra.Command {
	var o reportShowOptions
	cmd := &cobra.Command{
		Use:   "show REPORT [--format text|md|html|json] [--pub NAME.pub --manifest DIR] [--tokenizer DIR]",
		Short: "Show a run report: model, root, signer, mode, prompts and outputs, experts, k per layer",
		Long: `Show renders a run report (tarfa attest run) for people: the model and its
root, who signed the report, the mode, a table of the prompts (tokens, decode
speed, logits chain head, routing digest, golden verdict), each prompt's source
and what came out (decoded with --tokenizer DIR's tokenizer.json, else as token
ids), the routed experts used by layer and where their bytes came from, and
whether every routing entry used the model's top-k. --format html writes one self-contained page; --out FILE
writes to a file instead of standard output.

Without --pub the report is only read: the output says NOT VERIFIED at the top.
With --pub and --manifest it is verified first (as tarfa attest verify does
offline) and the output lists what was checked and what is stated, not checked.

Exit statuses: 0 shown; 1 error (flags, the report cannot be read); 3 the report
does not verify (with --pub); 130 interrupted.`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains(reports.RunFormats, o.format) {
				return fmt.Errorf("--format %q: want one of %s", o.format, strings.Join(reports.RunFormats, ", "))
			}
			if (len(o.pubs) == 0) != (o.manifest == "") {
				return fmt.Errorf("--pub and --manifest go together (verify the report), or neither (only read it)")
			}
			if o.out != "" && !o.force {
				if _, err := os.Lstat(o.out); err == nil {
					return fmt.Errorf("--out %s exists: give --force to replace it", o.out)
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			env, err := readEnvelope(args[0])
			if err != nil {
				return err
			}
			v := &reports.RunView{}
			if len(o.pubs) > 0 {
				keys, err := loadPubs("--pub", o.pubs)
				if err != nil {
					return err
				}
				man, _, _, err := loadManifestArg(o.manifest)
				if err != nil {
					return err
				}
				res, err := attest.VerifyRun(env, keys, man)
				if err != nil {
					return err
				}
				v.Predicate, v.KeyID, v.Verified, v.Stated = res.Predicate, res.KeyID, append([]string{attest.Offline}, res.Checked...), res.Stated
			} else if v.Predicate, v.KeyID, err = attest.ReadRunUnverified(env); err != nil {
				return err
			}
			if o.tokenizer != "" {
				if err := reportTokenizer(v, o.tokenizer); err != nil {
					return err
				}
			}
			var w io.Writer = cmd.OutOrStdout()
			var buf strings.Builder
			if o.out != "" {
				w = &buf
			}
			if err := reports.RenderRun(w, v, o.format); err != nil {
				return err
			}
			if o.out != "" {
				return jnf.WriteFileAtomic(o.out, []byte(buf.String()), 0o644)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.format, "format", "text", "text, md, html or json")
	f.StringVar(&o.out, "out", "", "write to FILE instead of standard output")
	f.BoolVar(&o.force, "force", false, "replace an existing --out file")
	f.StringArrayVar(&o.pubs, "pub", nil, "verify the report with this public key first (repeatable; with --manifest)")
	f.StringVar(&o.manifest, "manifest", "", "the model's manifest to verify the report against (a JNF directory or its manifest.json)")
	f.StringVar(&o.tokenizer, "tokenizer", "", "directory holding tokenizer.json (the model's directory): show the outputs as text")
	return cmd
}

// reportTokenizer sets v to decode the outputs with dir's tokenizer.json,
// saying whether it is the one the report's model lists.
func reportTokenizer(v *reports.RunView, dir string) error {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return fmt.Errorf("--tokenizer: %w", err)
	}
	path := filepath.Join(dir, tokenizer.TokenizerFile)
	b, err := jnf.ReadFileLimit(path, 1<<30, tokenizer.TokenizerFile)
	if err != nil {
		return fmt.Errorf("--tokenizer: %w", err)
	}
	d := jnf.SHA256Bytes(b)
	v.Decode, v.Tokenizer = tok.Decode, path
	switch want, ok := v.Predicate.Model.Files[tokenizer.TokenizerFile]; {
	case !ok:
		v.Tokenizer += " (the report's model lists no tokenizer.json)"
	case want.Equal(d):
		v.Tokenizer += " (the report's model's, by its sha256)"
	default:
		v.Tokenizer += fmt.Sprintf(" — NOT the report's model's tokenizer: sha256 %s, the report lists %s", d.Hex(), want.Hex())
	}
	return nil
}
