package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/tokenizer"
)

func newTokenizeCommand() *cobra.Command {
	var dir string
	var decode bool
	cmd := &cobra.Command{
		Use:   "tokenize --tokenizer DIR [TEXT...]",
		Short: "Turn text into token ids (or ids into text with --decode)",
		Long: `Tokenize loads DIR/tokenizer.json (a Hugging Face byte-level BPE tokenizer such as
Qwen3's) and prints, for each TEXT argument, one JSON line {"ids": [...]}: the ids
Hugging Face tokenizers gives for encode(text), special tokens inside the text
included. With --decode each argument is a list of ids ("9707,11,1879") and the
output is {"text": "..."}; an id that no token has is an error.

Without arguments it reads standard input: one JSON object per line,
{"text": "..."} (or {"ids": [...]} with --decode; strict JSON: valid UTF-8, no key
twice), and writes one line for each,
flushed at once, so that a program can talk to it line by line.

  tarfa tokenize --tokenizer DIR "Hello, world!"
  echo '{"text": "Hello"}' | tarfa tokenize --tokenizer DIR

` + exitStatuses,
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := tokenizer.Load(dir)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(args) > 0 {
				return tokenizeArgs(tok, args, out, decode)
			}
			stdin := cmd.InOrStdin()
			if isTerminal(stdin) {
				want := `{"text": "..."}`
				if decode {
					want = `{"ids": [...]}`
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "reading %s lines from standard input (Ctrl-D ends; or give TEXT arguments)…\n", want)
			}
			in := contextReader(cmd.Context(), stdin)
			defer in.Close()
			return runTokenize(tok, in, out, decode)
		},
	}
	cmd.Flags().StringVar(&dir, "tokenizer", "", "directory holding tokenizer.json (required)")
	cmd.Flags().BoolVar(&decode, "decode", false, `arguments (or {"ids": [...]} lines) are ids; write {"text": "..."}`)
	_ = cmd.MarkFlagRequired("tokenizer")
	return cmd
}

// tokenizeArgs encodes (or decodes) each argument to one JSON line.
func tokenizeArgs(tok *tokenizer.Tokenizer, args []string, out io.Writer, decode bool) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for i, a := range args {
		if !decode {
			if err := enc.Encode(struct {
				IDs []int `json:"ids"`
			}{nonNil(tok.Encode(a))}); err != nil {
				return err
			}
			continue
		}
		ids, err := parseIDs(fmt.Sprintf("argument %d", i+1), a)
		if err != nil {
			return err
		}
		text, err := tok.Decode(ids)
		if err != nil {
			return fmt.Errorf("argument %d: %w", i+1, err)
		}
		if err := enc.Encode(struct {
			Text string `json:"text"`
		}{text}); err != nil {
			return err
		}
	}
	return nil
}

func nonNil(ids []int) []int {
	if ids == nil {
		return []int{}
	}
	return ids
}

// maxTokenizeLine bounds one line of standard input (a text to encode of
// up to this many bytes).
const maxTokenizeLine = jnf.MaxAuxFileSize

func runTokenize(tok *tokenizer.Tokenizer, in io.Reader, out io.Writer, decode bool) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), maxTokenizeLine)
	w := bufio.NewWriter(out)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		n++
		var rec struct {
			Text *string `json:"text"`
			IDs  []int   `json:"ids"`
		}
		// Each line is one JSON object, read strictly (no key twice,
		// valid UTF-8, nothing after it).
		if err := jnf.DecodeForeignJSON(line, &rec); err != nil {
			return fmt.Errorf("stdin record %d: %w (want one JSON object per line, %s)", n, err, wantLine(decode))
		}
		if decode {
			if rec.IDs == nil {
				return fmt.Errorf("stdin record %d: no \"ids\" list (want %s)", n, wantLine(decode))
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
				return fmt.Errorf("stdin record %d: no \"text\" string (want %s)", n, wantLine(decode))
			}
			if err := enc.Encode(struct {
				IDs []int `json:"ids"`
			}{nonNil(tok.Encode(*rec.Text))}); err != nil {
				return err
			}
		}
		// One line in, one line out: flush so that a caller can interleave.
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("stdin record %d: a line of more than %d bytes", n+1, maxTokenizeLine)
		}
		return fmt.Errorf("stdin record %d: %w", n+1, err)
	}
	return w.Flush()
}

func wantLine(decode bool) string {
	if decode {
		return `{"ids": [...]}`
	}
	return `{"text": "..."}`
}
