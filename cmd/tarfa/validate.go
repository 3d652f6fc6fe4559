package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/reports"
	"github.com/tarfa-ai/tarfa/validation/conformance"
)

func newValidateCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "validate", Short: "Conformance suites"}
	var (
		ckpt, ref string
		backend   string
		threads   int
		asJSON    bool
		positions bool
		scratch   string
	)
	hf := &cobra.Command{
		Use:   "hf --checkpoint HF_DIR --reference FIXTURE_DIR",
		Short: "Compare the CPU reference with Hugging Face reference logits",
		Long: `Validate hf converts the checkpoint to a temporary JNF directory (in a new
directory under --scratch DIR, default the system's temporary directory, removed
when done; it needs about the checkpoint's size free), runs every
prompt of FIXTURE_DIR/reference.json through the verified path and compares with
FIXTURE_DIR/reference.safetensors: max |Δ| of the fp32 logits at every position,
argmax agreement, the greedy continuation against greedy[promptI.fp32], and the
bf16 figures for information. --positions adds a table per prompt with every
position's max |Δ|; --json carries them too.

Exit statuses: 0 max |Δ| <= atol everywhere (reference.json "atol", else 5e-4) and
every fp32 greedy continuation identical; 1 error (HF_DIR is no Hugging Face
checkpoint, FIXTURE_DIR has no reference.json); 3 out of tolerance; 130
interrupted.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if ckpt == "" || ref == "" {
				return fmt.Errorf("--checkpoint and --reference are required")
			}
			if backend != "cpu" && backend != "cuda" {
				return fmt.Errorf("--backend %q: want cpu or cuda", backend)
			}
			return threadsFlag(threads)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The reference is checked before the checkpoint is converted.
			if st, err := os.Stat(filepath.Join(ref, "reference.json")); err != nil || !st.Mode().IsRegular() {
				return fmt.Errorf("--reference %s: no reference.json (a fixture directory of validation/testdata/fixtures holds one)", ref)
			}
			base := scratch
			if base == "" {
				base = os.TempDir()
			}
			if st, err := os.Stat(base); err != nil || !st.IsDir() {
				return fmt.Errorf("--scratch %s: not a directory (create it first)", base)
			}
			if err := checkFree("--scratch", base, safetensorsBytes(ckpt), "; give --scratch DIR on a file system with room for the converted checkpoint"); err != nil {
				return err
			}
			tmp, err := os.MkdirTemp(base, "tarfa-validate-")
			if err != nil {
				return fmt.Errorf("--scratch %s: %w", base, err)
			}
			defer os.RemoveAll(tmp)
			done := stepProgress(cmd.ErrOrStderr(), "converting "+ckpt+" (into "+tmp+") and comparing with "+ref)
			rep, err := conformance.Run(cmd.Context(), ckpt, ref, conformance.Options{Threads: threads, Backend: backend, Scratch: tmp})
			done()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSON(out, rep); err != nil {
					return err
				}
			} else {
				var rows [][]string
				for _, p := range rep.Prompts {
					rows = append(rows, []string{strconv.Itoa(p.Index), strconv.Itoa(p.Tokens), fmt.Sprintf("%.3g", p.MaxAbs),
						fmt.Sprintf("%d/%d", p.ArgmaxAgree, p.Tokens), fmt.Sprintf("%v", p.GreedyMatch),
						fmt.Sprintf("%.3g", p.MaxAbsBF16), fmt.Sprintf("%d/%d", p.GreedyBF16OK, len(p.Greedy)), passWord(p.Pass)})
				}
				reports.Table(out, []string{"prompt", "tokens", "max |Δ| fp32", "argmax", "greedy = fp32", "max |Δ| bf16 (info)", "greedy = bf16 (info)", "result"}, rows)
				if positions {
					for _, p := range rep.Prompts {
						var prow [][]string
						for i, d := range p.MaxAbsAt {
							prow = append(prow, []string{strconv.Itoa(i), fmt.Sprintf("%.3g", d), fmt.Sprint(p.ArgmaxAt[i]), passWord(d <= rep.Atol)})
						}
						fmt.Fprintf(out, "prompt %d:\n", p.Index)
						reports.Table(out, []string{"position", "max |Δ| fp32", "argmax agrees", "within atol"}, prow)
					}
				}
				fmt.Fprintf(out, "atol %g; routed experts per token = top-k in every MoE layer: %v; model root %s\n", rep.Atol, rep.ExpertEvalsOK, rep.Root)
			}
			if !rep.Pass {
				return failVerification(fmt.Errorf("%s does not conform to %s", ckpt, ref))
			}
			return nil
		},
	}
	hf.Flags().StringVar(&ckpt, "checkpoint", "", "Hugging Face checkpoint directory")
	hf.Flags().StringVar(&ref, "reference", "", "directory with reference.json and reference.safetensors")
	hf.Flags().IntVar(&threads, "threads", 0, "CPU threads")
	hf.Flags().StringVar(&backend, "backend", "cpu", "backend: cpu or cuda (a cuda build)")
	hf.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	hf.Flags().BoolVar(&positions, "positions", false, "also print max |Δ| at every position of every prompt")
	hf.Flags().StringVar(&scratch, "scratch", "", "directory for the temporary conversion, a new directory in it removed when done (default: the system's temporary directory)")
	cmd.AddCommand(hf)
	return cmd
}

func passWord(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// safetensorsBytes is the size of the .safetensors files of an HF
// checkpoint directory: about what converting it writes (0 if unreadable:
// the conversion then says what is wrong).
func safetensorsBytes(dir string) int64 {
	var n int64
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			n += st.Size()
		}
	}
	return n
}
