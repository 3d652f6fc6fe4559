package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/tokenizer"
)

func newTemplateCommand() *cobra.Command {
	var (
		dir     string
		withIDs bool
		system  string
		think   bool
	)
	cmd := &cobra.Command{
		Use:   "template --tokenizer DIR [MESSAGE | -]",
		Short: "Render a conversation with the tokenizer's chat template",
		Long: `Template prints the chat template of DIR (chat_template.jinja, else the
"chat_template" of tokenizer_config.json) rendered exactly as transformers'
apply_chat_template renders it, with nothing added.

With a MESSAGE argument it renders one user turn (after a --system turn, if
given) with the generation prompt added; --think false (or --think=false) sets
enable_thinking to false.

Without an argument (or with "-") it reads one JSON object from standard input,

  {"messages": [...], "add_generation_prompt": bool, "enable_thinking": bool, "tools": [...]}

whose every member (and every member of a "kwargs" object) is a template
variable; "messages" is required.

With --ids it prints {"rendered": "...", "ids": [...]} instead, the ids being the
tokenization of the rendering.

  tarfa template --tokenizer DIR "What is 2+2?" --think false

` + exitStatuses,
		Args: oneText("MESSAGE"),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 0 || args[0] == "-") && (system != "" || cmd.Flags().Changed("think")) {
				return fmt.Errorf("--system and --think go with a MESSAGE argument; in a JSON object on standard input, give the system turn and enable_thinking there")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// The template first: a wrong DIR fails before standard input
			// is waited for.
			var (
				tok  *tokenizer.Tokenizer
				tmpl *tokenizer.ChatTemplate
				err  error
			)
			if withIDs {
				if tok, err = tokenizer.Load(dir); err != nil {
					return err
				}
				tmpl, err = tok.ChatTemplate()
			} else {
				tmpl, err = tokenizer.LoadChatTemplate(dir)
			}
			if err != nil {
				return err
			}
			var input []byte
			if len(args) == 1 && args[0] != "-" {
				var turns []map[string]string
				if system != "" {
					turns = append(turns, map[string]string{"role": "system", "content": system})
				}
				in := map[string]any{"messages": append(turns, map[string]string{"role": "user", "content": args[0]}), "add_generation_prompt": true}
				if cmd.Flags().Changed("think") {
					in["enable_thinking"] = think
				}
				input, _ = json.Marshal(in)
			} else {
				stdin := cmd.InOrStdin()
				if isTerminal(stdin) {
					fmt.Fprintln(cmd.ErrOrStderr(), `reading one JSON object {"messages": [...], ...} from standard input (Ctrl-D ends; or give a MESSAGE argument)…`)
				}
				in := contextReader(cmd.Context(), stdin)
				defer in.Close()
				if input, err = jnf.ReadAllLimit(in, "standard input", jnf.MaxAuxFileSize, "template input"); err != nil {
					return fmt.Errorf("reading standard input: %w", err)
				}
			}
			rendered, err := tmpl.RenderJSON(input)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !withIDs {
				_, err := io.WriteString(out, rendered)
				return err
			}
			enc := json.NewEncoder(out)
			enc.SetEscapeHTML(false)
			return enc.Encode(struct {
				Rendered string `json:"rendered"`
				IDs      []int  `json:"ids"`
			}{rendered, nonNil(tok.Encode(rendered))})
		},
	}
	cmd.Flags().StringVar(&dir, "tokenizer", "", "directory holding tokenizer_config.json (required)")
	cmd.Flags().BoolVar(&withIDs, "ids", false, `print {"rendered": ..., "ids": [...]} (loads tokenizer.json too)`)
	cmd.Flags().StringVar(&system, "system", "", "a system turn before MESSAGE")
	cmd.Flags().Var(newBoolValue(&think, true), "think", "enable_thinking for MESSAGE: --think false or --think=false (passed only when given)")
	_ = cmd.MarkFlagRequired("tokenizer")
	return cmd
}
