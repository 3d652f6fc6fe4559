package tokenizer

type ChatTemplate struct{ src string }

func parseChatTemplate(name, src string, cfg configTokens) (*ChatTemplate, error) {
	return &ChatTemplate{src: src}, nil
}
