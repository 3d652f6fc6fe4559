package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/engine/tokenizer"
)

func init() { register(newTokenizeCommand) }

func newTokenizeCommand() *cobra.Command {
	var dir string
	var decode bool
	cmd := &cobra.Command{
		Use:   "tokenize --tokenizer DIR",
		Short: "Turn JSON lines of text into token ids (or ids into text with --decode)",
		Long: `Tokenize loads DIR/tokenizer.json (a Hugging Face byte-level BPE tokenizer such as
Qwen3's) and reads JSON objects {"text": "..."} from standard input, one per line,
writing {"ids": [...]} for each: the ids Hugging Face tokenizers gives for
encode(text), special tokens inside the text included.

With --decode it reads {"ids": [...]} and writes {"text": "..."}; an id that no
token has is an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok, err := tokenizer.Load(dir)
			if err != nil {
				return err
			}
			return runTokenize(tok, cmd.InOrStdin(), cmd.OutOrStdout(), decode)
		},
	}
	cmd.Flags().StringVar(&dir, "tokenizer", "", "directory holding tokenizer.json (required)")
	cmd.Flags().BoolVar(&decode, "decode", false, `read {"ids": [...]} and write {"text": "..."}`)
	_ = cmd.MarkFlagRequired("tokenizer")
	return cmd
}

func runTokenize(tok *tokenizer.Tokenizer, in io.Reader, out io.Writer, decode bool) error {
	dec := json.NewDecoder(bufio.NewReader(in))
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for n := 1; ; n++ {
		var rec struct {
			Text *string `json:"text"`
			IDs  []int   `json:"ids"`
		}
		if err := dec.Decode(&rec); errors.Is(err, io.EOF) {
			return w.Flush()
		} else if err != nil {
			return fmt.Errorf("stdin record %d: %w", n, err)
		}
		if decode {
			if rec.IDs == nil {
				return fmt.Errorf("stdin record %d: no \"ids\" list", n)
			}
			text, err := tok.Decode(rec.IDs)
			if err != nil {
				return fmt.Errorf("stdin record %d: %w", n, err)
			}
			if err := enc.Encode(struct {
				Text string `json:"text"`
			}{text}); err != nil {
				return err
			}
		} else {
			if rec.Text == nil {
				return fmt.Errorf("stdin record %d: no \"text\" string", n)
			}
			if err := enc.Encode(struct {
				IDs []int `json:"ids"`
			}{tok.Encode(*rec.Text)}); err != nil {
				return err
			}
		}
		// One line in, one line out: flush so that a caller can interleave.
		if err := w.Flush(); err != nil {
			return err
		}
	}
}
