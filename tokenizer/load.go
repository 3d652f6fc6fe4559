package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"

	"golang.org/x/text/unicode/norm"

	"github.com/tarfa-ai/tarfa/jnf"
)

// File names inside a tokenizer directory.
const (
	TokenizerFile       = "tokenizer.json"
	TokenizerConfigFile = "tokenizer_config.json"
	// ChatTemplateFile, when present, holds the chat template and takes
	// precedence over tokenizer_config.json's "chat_template", as in
	// transformers.
	ChatTemplateFile = "chat_template.jinja"
)

// tokenizerJSON is the part of tokenizer.json that this package reads.
// "truncation" and "padding" are ignored, as transformers does when asked to
// encode without truncation or padding.
type tokenizerJSON struct {
	AddedTokens   []AddedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type                    string          `json:"type"`
		Dropout                 *float64        `json:"dropout"`
		UnkToken                *string         `json:"unk_token"`
		ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
		FuseUnk                 bool            `json:"fuse_unk"`
		ByteFallback            bool            `json:"byte_fallback"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		Vocab                   json.RawMessage `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
	} `json:"model"`
}

// decodeTokenizerJSON splits tokenizer.json into members without decoding
// the big ones (model.vocab, model.merges), which build reads directly, and
// decodes the rest with jnf.DecodeForeignJSON.
func decodeTokenizerJSON(data []byte) (*tokenizerJSON, error) {
	// The whole document follows the strict JSON rules first
	// (jnf.CheckJSON): no key twice in any object, vocab included, and
	// valid UTF-8, so what is read here is what any other reader reads.
	if err := jnf.CheckJSON(data); err != nil {
		return nil, err
	}
	// Members of "model" come back as "model.type", "model.vocab", ...
	members, err := splitObject(data, "model")
	if err != nil {
		return nil, err
	}
	if _, ok := members["model"]; !ok {
		return nil, errors.New("no \"model\"")
	}
	var tj tokenizerJSON
	m := &tj.Model
	for _, f := range []struct {
		name string
		dst  any
	}{
		{"added_tokens", &tj.AddedTokens},
		{"normalizer", &tj.Normalizer},
		{"pre_tokenizer", &tj.PreTokenizer},
		{"post_processor", &tj.PostProcessor},
		{"decoder", &tj.Decoder},
		{"model.type", &m.Type},
		{"model.dropout", &m.Dropout},
		{"model.unk_token", &m.UnkToken},
		{"model.continuing_subword_prefix", &m.ContinuingSubwordPrefix},
		{"model.end_of_word_suffix", &m.EndOfWordSuffix},
		{"model.fuse_unk", &m.FuseUnk},
		{"model.byte_fallback", &m.ByteFallback},
		{"model.ignore_merges", &m.IgnoreMerges},
	} {
		if raw, ok := members[f.name]; ok {
			if err := jnf.DecodeForeignJSON(raw, f.dst); err != nil {
				return nil, fmt.Errorf("%s: %w", f.name, err)
			}
		}
	}
	m.Vocab, m.Merges = members["model.vocab"], members["model.merges"]
	return &tj, nil
}

type component struct {
	Type           string            `json:"type"`
	Normalizers    []json.RawMessage `json:"normalizers"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	Pattern        *splitPattern     `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
}

type splitPattern struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// LoadOptions are what a caller knows about a tokenizer beyond its files.
// The zero value is what Load, LoadFS and Parse use.
type LoadOptions struct {
	// ModelVocab, when > 0, is the vocabulary size of the model the
	// tokenizer belongs to (its embedding rows): a token id at or beyond it
	// is refused before anything is allocated for it.
	ModelVocab int
}

// Load reads dir/tokenizer.json and, when present, dir/tokenizer_config.json
// and dir/chat_template.jinja. Each file must be a regular file of at most
// jnf.MaxAuxFileSize bytes.
func Load(dir string) (*Tokenizer, error) { return LoadOptions{}.Load(dir) }

// LoadFS is Load over a file system (the directory is its root).
func LoadFS(fsys fs.FS) (*Tokenizer, error) { return LoadOptions{}.LoadFS(fsys) }

// Parse builds a Tokenizer from the bytes of tokenizer.json and of
// tokenizer_config.json (which may be nil: then there is no chat template and
// no EOS token).
func Parse(tokenizerJSON, configJSON []byte) (*Tokenizer, error) {
	return LoadOptions{}.Parse(tokenizerJSON, configJSON)
}

// Load is the package's Load with these options.
func (o LoadOptions) Load(dir string) (*Tokenizer, error) {
	t, err := o.load(dirReader(dir))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, dir)
	}
	return t, nil
}

// LoadFS is the package's LoadFS with these options.
func (o LoadOptions) LoadFS(fsys fs.FS) (*Tokenizer, error) { return o.load(fsReader(fsys)) }

func (o LoadOptions) load(read readFunc) (*Tokenizer, error) {
	tj, err := read(TokenizerFile)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	cfg, err := read(TokenizerConfigFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := o.Parse(tj, cfg)
	if err != nil {
		return nil, err
	}
	tmpl, err := read(ChatTemplateFile)
	switch {
	case err == nil:
		t.chat, t.chatErr = parseChatTemplate(ChatTemplateFile, string(tmpl), t.config)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// readFunc reads one file of a tokenizer directory whole (an error
// matching fs.ErrNotExist when it is absent).
type readFunc func(name string) ([]byte, error)

// dirReader reads the files of dir: regular files only (a FIFO is refused
// without blocking), at most jnf.MaxAuxFileSize bytes each.
func dirReader(dir string) readFunc {
	return func(name string) ([]byte, error) {
		return jnf.ReadFileLimit(filepath.Join(dir, name), jnf.MaxAuxFileSize, name)
	}
}

// fsReader reads the files of fsys with the same rules as dirReader: the
// mode is checked before the file is opened (fs.Stat), the size before and
// while it is read.
func fsReader(fsys fs.FS) readFunc {
	return func(name string) ([]byte, error) {
		st, err := fs.Stat(fsys, name)
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			return nil, &jnf.NotRegularError{Path: name, Mode: st.Mode()}
		}
		if st.Size() > jnf.MaxAuxFileSize {
			return nil, &jnf.LimitError{Path: name, Size: st.Size(), Max: jnf.MaxAuxFileSize, Which: name}
		}
		f, err := fsys.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return jnf.ReadAllLimit(f, name, jnf.MaxAuxFileSize, name)
	}
}

// Parse is the package's Parse with these options.
func (o LoadOptions) Parse(tokenizerJSONBytes, configJSON []byte) (*Tokenizer, error) {
	tj, err := decodeTokenizerJSON(tokenizerJSONBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", TokenizerFile, err)
	}
	t, err := build(tj, o)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", TokenizerFile, err)
	}
	if configJSON != nil {
		if err := t.applyConfig(configJSON); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", TokenizerConfigFile, err)
		}
	}
	return t, nil
}

// Bounds on what a tokenizer.json may ask for, so that loading one takes
// memory in proportion to its size. Hugging Face's own files stay far
// inside them (Qwen3: 151,669 dense ids, 26 added tokens of at most 20
// bytes).
const (
	// maxUnusedIDs is how many ids below the largest one may belong to no
	// token. tokenizers accepts any id, but a vocabulary with holes is not
	// one it writes, and each id costs memory whether used or not.
	maxUnusedIDs = 1024
	// maxAddedTokenLen bounds one added token's content (after
	// normalisation), and maxAddedBytes all of them: they are matched in
	// every text encoded.
	maxAddedTokenLen = 1024
	maxAddedBytes    = 1 << 20
)

func build(tj *tokenizerJSON, o LoadOptions) (*Tokenizer, error) {
	m := &tj.Model
	if m.Type != "BPE" {
		return nil, fmt.Errorf("model.type %q is not supported (want \"BPE\")", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("model.dropout %v is not supported (want null)", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("model.continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("model.end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	if m.ByteFallback {
		return nil, errors.New("model.byte_fallback true is not supported (byte-level BPE needs none)")
	}
	// tokenizers' BPE deserializer requires both members, as lists.
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"model.vocab", m.Vocab}, {"model.merges", m.Merges}} {
		switch {
		case len(f.raw) == 0:
			return nil, fmt.Errorf("%s is missing (Hugging Face tokenizers refuses a BPE model without it)", f.name)
		case string(f.raw) == "null":
			return nil, fmt.Errorf("%s is null (Hugging Face tokenizers refuses it; an empty one is written {} or [])", f.name)
		}
	}
	vocab, top, err := parseVocab(m.Vocab)
	if err != nil {
		return nil, err
	}
	if len(vocab) == 0 {
		return nil, errors.New("model.vocab is empty")
	}
	t := &Tokenizer{
		vocab:        vocab, // added tokens are inserted below
		ignoreMerges: m.IgnoreMerges,
		eos:          -1,
		cache:        newWordCache(),
	}

	for b := range 256 {
		s := string(byteToRune[b])
		id, ok := vocab[s]
		if !ok {
			return nil, fmt.Errorf("model.vocab lacks the byte-level symbol %q for byte 0x%02x (only byte-level BPE is supported)", s, b)
		}
		t.byteID[b] = id
	}

	// Added tokens get the ids Hugging Face would give them: their vocab id
	// if the content is in the vocab, else the next free id after the model.
	// They are checked before anything is sized by an id.
	modelSize := len(vocab)
	nextAdded := -1
	fresh := map[string]int32{} // added tokens that are not model.vocab entries
	t.added = make([]AddedToken, len(tj.AddedTokens))
	copy(t.added, tj.AddedTokens)
	maxID, maxWhat := int(top.id), fmt.Sprintf("model.vocab[%q]", top.tok)
	for i := range t.added {
		a := &t.added[i]
		if a.Content == "" {
			return nil, fmt.Errorf("added_tokens[%d] (id %d): empty content", i, a.ID)
		}
		want, ok := vocab[a.Content]
		if !ok {
			if want, ok = fresh[a.Content]; !ok {
				if nextAdded < 0 {
					nextAdded = modelSize
				}
				want = int32(nextAdded)
			}
		}
		if int(want) != a.ID {
			return nil, fmt.Errorf("added_tokens[%d] %q: id %d, but Hugging Face tokenizers would assign id %d", i, truncate(a.Content, 80), a.ID, want)
		}
		if _, inVocab := vocab[a.Content]; !inVocab && int(want) == nextAdded {
			nextAdded++
			fresh[a.Content] = want
			if a.ID > maxID {
				maxID, maxWhat = a.ID, fmt.Sprintf("added_tokens[%d] %q", i, truncate(a.Content, 80))
			}
		}
	}
	if ids := len(vocab) + len(fresh); maxID >= ids+maxUnusedIDs {
		return nil, fmt.Errorf("%s: id %d, but there are only %d tokens: at most %d ids may be unused", maxWhat, maxID, ids, maxUnusedIDs)
	}
	if o.ModelVocab > 0 && maxID >= o.ModelVocab {
		return nil, fmt.Errorf("%s: id %d is beyond the model's vocabulary of %d", maxWhat, maxID, o.ModelVocab)
	}

	// Vocabulary.
	t.tokens = make([]string, maxID+1)
	t.kind = make([]uint8, maxID+1)
	for tok, id := range vocab {
		if t.kind[id] != kindHole {
			return nil, fmt.Errorf("model.vocab: id %d is given to both %q and %q", id, t.tokens[id], tok)
		}
		t.tokens[id], t.kind[id] = tok, kindModel
	}
	// Merges, in rank order. Map lookups with string(bytes) do not allocate.
	t.merges = make(map[uint64]merge, len(m.Merges)/24)
	var buf []byte
	err = eachMerge(m.Merges, func(rank int, pa, pb []byte) error {
		a, okA := t.vocab[string(pa)]
		b, okB := t.vocab[string(pb)]
		buf = append(append(buf[:0], pa...), pb...)
		c, okC := t.vocab[string(buf)]
		if !okA || !okB || !okC {
			return fmt.Errorf("[%q, %q]: token not in model.vocab", pa, pb)
		}
		k := pairKey(a, b)
		if _, dup := t.merges[k]; !dup { // the first (lowest-rank) occurrence wins
			t.merges[k] = merge{rank: int32(rank), id: c}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}

	var raw, normalized []*AddedToken
	freshID := map[int]bool{}
	for i := range t.added {
		a := &t.added[i]
		if id, ok := fresh[a.Content]; ok && !freshID[a.ID] {
			if t.kind[id] != kindHole {
				return nil, fmt.Errorf("added_tokens[%d] %q: id %d, which model.vocab gives to %q", i, truncate(a.Content, 80), id, t.tokens[id])
			}
			t.vocab[a.Content] = id
			t.tokens[id] = a.Content
			freshID[a.ID] = true
		}
		if a.Special {
			t.kind[a.ID] = kindSpecial
		} else {
			t.kind[a.ID] = kindAdded
		}
		if a.Normalized {
			normalized = append(normalized, a)
		} else {
			raw = append(raw, a)
		}
	}

	if t.normalize, err = parseNormalizer(tj.Normalizer); err != nil {
		return nil, err
	}
	// A normalised token is matched in normalised text, so its content is
	// normalised too (as AddedVocabulary.refresh_added_tokens does).
	if t.normalize != nil {
		for i, a := range normalized {
			c := *a
			c.Content = t.normalize(a.Content)
			if c.Content == "" {
				return nil, fmt.Errorf("added token %q normalises to the empty string", a.Content)
			}
			normalized[i] = &c
		}
	}
	if err := checkAddedSizes(append(append([]*AddedToken(nil), raw...), normalized...)); err != nil {
		return nil, err
	}
	t.rawMatcher = newMatcher(raw)
	t.normMatcher = newMatcher(normalized)
	if err := checkPreTokenizer(tj.PreTokenizer); err != nil {
		return nil, err
	}
	if err := checkByteLevel("post_processor", tj.PostProcessor, true); err != nil {
		return nil, err
	}
	if err := checkByteLevel("decoder", tj.Decoder, false); err != nil {
		return nil, err
	}
	if m.UnkToken != nil {
		if _, ok := t.vocab[*m.UnkToken]; !ok {
			return nil, fmt.Errorf("model.unk_token %q is not in the vocabulary", *m.UnkToken)
		}
	}

	// Decoded bytes of every id, in one buffer. A normalised added token
	// decodes to its normalised content (tokenizers 0.23 decodes the
	// added token "\u2126" as "\u03a9"), then through the ByteLevel decoder.
	decodeAs := append([]string(nil), t.tokens...)
	for _, a := range normalized {
		if freshID[a.ID] {
			decodeAs[a.ID] = a.Content
		}
	}
	t.decOff = make([]uint32, len(t.tokens)+1)
	for id, tok := range decodeAs {
		t.decOff[id] = uint32(len(t.decBuf))
		if t.kind[id] != kindHole {
			t.decBuf = append(t.decBuf, byteLevelDecode(tok)...)
		}
	}
	t.decOff[len(t.tokens)] = uint32(len(t.decBuf))
	return t, nil
}

const maxVocabID = 1<<31 - 2

// checkAddedSizes bounds the contents the matchers hold (normalised ones as
// normalised).
func checkAddedSizes(tokens []*AddedToken) error {
	total := 0
	for _, a := range tokens {
		if len(a.Content) > maxAddedTokenLen {
			return fmt.Errorf("added token %d %q: %d bytes, more than the %d accepted", a.ID, truncate(a.Content, 40), len(a.Content), maxAddedTokenLen)
		}
		total += len(a.Content)
	}
	if total > maxAddedBytes {
		return fmt.Errorf("added_tokens: %d bytes of content, more than the %d accepted", total, maxAddedBytes)
	}
	return nil
}

func parseNormalizer(raw json.RawMessage) (func(string) string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c component
	if err := jnf.DecodeForeignJSON(raw, &c); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		return hfNormalizer(norm.NFC), nil
	case "NFD":
		return hfNormalizer(norm.NFD), nil
	case "NFKC":
		return hfNormalizer(norm.NFKC), nil
	case "NFKD":
		return hfNormalizer(norm.NFKD), nil
	case "Sequence":
		var fns []func(string) string
		for _, sub := range c.Normalizers {
			f, err := parseNormalizer(sub)
			if err != nil {
				return nil, err
			}
			if f != nil {
				fns = append(fns, f)
			}
		}
		if len(fns) == 0 {
			return nil, nil
		}
		return func(s string) string {
			for _, f := range fns {
				s = f(s)
			}
			return s
		}, nil
	}
	return nil, fmt.Errorf("normalizer type %q is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence of these)", c.Type)
}

// checkPreTokenizer accepts exactly the Qwen pipeline: Split(QwenPattern,
// Isolated) then ByteLevel without its own regex.
func checkPreTokenizer(raw json.RawMessage) error {
	var c component
	if len(raw) == 0 || string(raw) == "null" {
		return errors.New("pre_tokenizer is null; want Sequence[Split(Qwen pattern), ByteLevel]")
	}
	if err := jnf.DecodeForeignJSON(raw, &c); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	if c.Type != "Sequence" || len(c.Pretokenizers) != 2 {
		return fmt.Errorf("pre_tokenizer type %q is not supported; want Sequence[Split(Qwen pattern), ByteLevel]", c.Type)
	}
	var split component
	if err := jnf.DecodeForeignJSON(c.Pretokenizers[0], &split); err != nil {
		return fmt.Errorf("pre_tokenizer.pretokenizers[0]: %w", err)
	}
	if split.Type != "Split" {
		return fmt.Errorf("pre_tokenizer.pretokenizers[0]: type %q is not supported; want Split", split.Type)
	}
	if split.Pattern == nil || split.Pattern.Regex == nil {
		return errors.New("pre_tokenizer.pretokenizers[0]: Split without a Regex pattern is not supported")
	}
	if *split.Pattern.Regex != QwenPattern {
		return fmt.Errorf("pre_tokenizer.pretokenizers[0]: unsupported Split pattern %q (only the Qwen2/Qwen3 pattern %q is implemented)", *split.Pattern.Regex, QwenPattern)
	}
	if split.Behavior != "Isolated" || split.Invert {
		return fmt.Errorf("pre_tokenizer.pretokenizers[0]: Split behavior %q invert %v is not supported; want Isolated, false", split.Behavior, split.Invert)
	}
	var bl component
	if err := jnf.DecodeForeignJSON(c.Pretokenizers[1], &bl); err != nil {
		return fmt.Errorf("pre_tokenizer.pretokenizers[1]: %w", err)
	}
	if bl.Type != "ByteLevel" {
		return fmt.Errorf("pre_tokenizer.pretokenizers[1]: type %q is not supported; want ByteLevel", bl.Type)
	}
	if bl.AddPrefixSpace {
		return errors.New("pre_tokenizer.pretokenizers[1]: ByteLevel add_prefix_space true is not supported")
	}
	// tokenizers defaults use_regex to true when the field is absent.
	if bl.UseRegex == nil || *bl.UseRegex {
		return errors.New("pre_tokenizer.pretokenizers[1]: ByteLevel with use_regex true (its GPT-2 pattern) is not supported")
	}
	return nil
}

// checkByteLevel accepts a ByteLevel decoder or post-processor (their other
// fields only move offsets). A null one is accepted too when nullOK.
func checkByteLevel(where string, raw json.RawMessage, nullOK bool) error {
	if len(raw) == 0 || string(raw) == "null" {
		if nullOK {
			return nil
		}
		return fmt.Errorf("%s is null; want ByteLevel", where)
	}
	var c component
	if err := jnf.DecodeForeignJSON(raw, &c); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if c.Type != "ByteLevel" {
		return fmt.Errorf("%s type %q is not supported; want ByteLevel", where, c.Type)
	}
	return nil
}

// tokenizerConfig is the part of tokenizer_config.json this package reads.
type tokenizerConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	EOSToken     json.RawMessage `json:"eos_token"`
	BOSToken     json.RawMessage `json:"bos_token"`
	PADToken     json.RawMessage `json:"pad_token"`
	UNKToken     json.RawMessage `json:"unk_token"`
	Additional   json.RawMessage `json:"additional_special_tokens"`
	CleanUp      *bool           `json:"clean_up_tokenization_spaces"`
}

// configTokens are the special-token strings handed to the chat template.
type configTokens struct {
	bos, eos, pad, unk *string
	additional         []string
}

func (c *tokenizerConfig) tokens() (configTokens, error) {
	var tokens configTokens
	var err error
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  **string
	}{
		{"bos_token", c.BOSToken, &tokens.bos},
		{"eos_token", c.EOSToken, &tokens.eos},
		{"pad_token", c.PADToken, &tokens.pad},
		{"unk_token", c.UNKToken, &tokens.unk},
	} {
		if *f.dst, err = tokenString(f.raw); err != nil {
			return tokens, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if len(c.Additional) > 0 && string(c.Additional) != "null" {
		var list []json.RawMessage
		if err := jnf.DecodeForeignJSON(c.Additional, &list); err != nil {
			return tokens, fmt.Errorf("additional_special_tokens: %w", err)
		}
		for i, raw := range list {
			s, err := tokenString(raw)
			if err != nil || s == nil {
				return tokens, fmt.Errorf("additional_special_tokens[%d]: want a string or {\"content\": ...}", i)
			}
			tokens.additional = append(tokens.additional, *s)
		}
	}
	return tokens, nil
}

func (t *Tokenizer) applyConfig(data []byte) error {
	var c tokenizerConfig
	if err := jnf.DecodeForeignJSON(data, &c); err != nil {
		return err
	}
	if c.CleanUp != nil && *c.CleanUp {
		return errors.New("clean_up_tokenization_spaces true is not supported (Decode returns the tokens' text unchanged, as with false)")
	}
	var err error
	if t.config, err = c.tokens(); err != nil {
		return err
	}
	if e := t.config.eos; e != nil {
		id, ok := t.vocab[*e]
		if !ok {
			return fmt.Errorf("eos_token %q is not in the vocabulary", *e)
		}
		t.eos = int(id)
	}
	src, err := chatTemplateSource(c.ChatTemplate)
	if err != nil {
		return err
	}
	if src != "" {
		// A template this package cannot parse does not stop tokenisation;
		// ChatTemplate reports it.
		t.chat, t.chatErr = parseChatTemplate(TokenizerConfigFile+" chat_template", src, t.config)
	}
	return nil
}

// tokenString reads a special token given either as a string or as an
// AddedToken object {"content": ...}; null gives nil.
func tokenString(raw json.RawMessage) (*string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := jnf.DecodeForeignJSON(raw, &s); err == nil {
		return &s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := jnf.DecodeForeignJSON(raw, &obj); err != nil || obj.Content == nil {
		return nil, fmt.Errorf("want a string or {\"content\": ...}, got %s", truncate(string(raw), 80))
	}
	return obj.Content, nil
}

// chatTemplateSource reads "chat_template": a string, or a list of
// {"name", "template"} from which the one named "default" is used.
func chatTemplateSource(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := jnf.DecodeForeignJSON(raw, &s); err == nil {
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := jnf.DecodeForeignJSON(raw, &list); err != nil {
		return "", fmt.Errorf("chat_template: want a string or a list of {name, template}: %w", err)
	}
	names := make([]string, 0, len(list))
	for _, e := range list {
		if e.Name == "default" {
			return e.Template, nil
		}
		names = append(names, e.Name)
	}
	sort.Strings(names)
	return "", fmt.Errorf("chat_template: no template named \"default\" among %q", names)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
