package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/engine/tokenizer"
)

func init() { register(newTemplateCommand) }

func newTemplateCommand() *cobra.Command {
	var dir string
	var withIDs bool
	cmd := &cobra.Command{
		Use:   "template --tokenizer DIR",
		Short: "Render a conversation with the tokenizer's chat template",
		Long: `Template reads one JSON object from standard input,

  {"messages": [...], "add_generation_prompt": bool, "enable_thinking": bool, "tools": [...]}

and prints the chat template of DIR (chat_template.jinja, else the "chat_template"
of tokenizer_config.json) rendered exactly as transformers' apply_chat_template
renders it, with nothing added. Every member of the object (and of a "kwargs"
object) is a template variable; "messages" is required.

With --ids it prints {"rendered": "...", "ids": [...]} instead, the ids being
the tokenization of the rendering.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			input, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("reading stdin: %w", err)
			}
			var tok *tokenizer.Tokenizer
			var tmpl *tokenizer.ChatTemplate
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
			}{rendered, tok.Encode(rendered)})
		},
	}
	cmd.Flags().StringVar(&dir, "tokenizer", "", "directory holding tokenizer_config.json (required)")
	cmd.Flags().BoolVar(&withIDs, "ids", false, `print {"rendered": ..., "ids": [...]} (loads tokenizer.json too)`)
	_ = cmd.MarkFlagRequired("tokenizer")
	return cmd
}
