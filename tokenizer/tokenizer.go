package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Kinds of id.
const (
	kindHole    = iota // no token has this id
	kindModel          // a BPE vocabulary entry
	kindAdded          // an added token that is not special
	kindSpecial        // an added token marked special
)

// Tokenizer is a loaded byte-level BPE tokenizer. It is safe for concurrent
// use.
type Tokenizer struct {
	vocab        map[string]int32 // token string (byte-level spelling) → id
	tokens       []string         // id → token string
	kind         []uint8          // id → kind*
	byteID       [256]int32       // byte → id of its one-byte token
	merges       map[uint64]merge // pairKey(left, right) → merge
	ignoreMerges bool

	added       []AddedToken
	rawMatcher  *matcher // added tokens matched in the raw text
	normMatcher *matcher // added tokens matched in the normalised text
	normalize   func(string) string

	decOff []uint32 // decoded bytes of id i: decBuf[decOff[i]:decOff[i+1]]
	decBuf []byte

	config  configTokens
	eos     int // -1 when tokenizer_config.json names none
	chat    *ChatTemplate
	chatErr error

	cache *wordCache
}

// VocabSize is one more than the largest id (ids in between that no token
// has are "holes").
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// TokenID returns the id of a vocabulary or added token, spelled as in
// tokenizer.json (byte-level alphabet for BPE entries, e.g. "Ġthe").
func (t *Tokenizer) TokenID(token string) (int, bool) {
	id, ok := t.vocab[token]
	return int(id), ok
}

// Token returns the tokenizer.json spelling of id.
func (t *Tokenizer) Token(id int) (string, error) {
	if err := t.checkID(id); err != nil {
		return "", err
	}
	return t.tokens[id], nil
}

// IsSpecial reports whether id is an added token marked "special".
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.kind) && t.kind[id] == kindSpecial
}

// AddedTokens returns the added tokens of tokenizer.json in file order.
func (t *Tokenizer) AddedTokens() []AddedToken { return append([]AddedToken(nil), t.added...) }

// EOS returns the id of tokenizer_config.json's eos_token, if it names one.
func (t *Tokenizer) EOS() (int, bool) { return t.eos, t.eos >= 0 }

// ChatTemplate returns the chat template. It is an error when the tokenizer
// has none, or has one this package cannot parse (the error names it).
func (t *Tokenizer) ChatTemplate() (*ChatTemplate, error) {
	if t.chatErr != nil {
		return nil, fmt.Errorf("tokenizer: %w", t.chatErr)
	}
	if t.chat == nil {
		return nil, fmt.Errorf("tokenizer: no chat template (neither %s nor a \"chat_template\" in %s)", ChatTemplateFile, TokenizerConfigFile)
	}
	return t.chat, nil
}

// Encode returns the ids of text exactly as Hugging Face tokenizers'
// encode(text, add_special_tokens=True) does for this tokenizer family:
// added tokens (special or not) inside the text are recognised, the rest is
// NFC-normalised, split by the Qwen pattern and merged by BPE.
//
// Invalid UTF-8 is first replaced as Python's bytes.decode("utf-8",
// "replace") would: each maximal invalid subsequence becomes U+FFFD.
func (t *Tokenizer) Encode(text string) []int {
	text = validUTF8String(text)
	ids := make([]int, 0, len(text)/4+4)
	var syms []int32
	t.rawMatcher.split(text, func(piece string, tok *AddedToken) {
		if tok != nil {
			ids = append(ids, tok.ID)
			return
		}
		if t.normalize != nil && !isASCII(piece) {
			piece = t.normalize(piece) // every normaliser here keeps ASCII as is
		}
		t.normMatcher.split(piece, func(piece string, tok *AddedToken) {
			if tok != nil {
				ids = append(ids, tok.ID)
				return
			}
			for i := 0; i < len(piece); {
				j := qwenNext(piece, i)
				ids, syms = t.encodeWord(ids, syms, piece[i:j])
				i = j
			}
		})
	})
	return ids
}

// isASCII reports whether s is all ASCII, eight bytes at a time.
func isASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if w&0x8080808080808080 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// encodeWord appends the BPE ids of one pre-tokenized word.
func (t *Tokenizer) encodeWord(ids []int, syms []int32, word string) ([]int, []int32) {
	if len(word) == 1 {
		return append(ids, int(t.byteID[word[0]])), syms
	}
	if cached, ok := t.cache.get(word); ok {
		for _, id := range cached {
			ids = append(ids, int(id))
		}
		return ids, syms
	}
	syms = syms[:0]
	for i := 0; i < len(word); i++ {
		syms = append(syms, t.byteID[word[i]])
	}
	var out []int32
	if t.ignoreMerges {
		if id, ok := t.vocab[byteLevelString([]byte(word))]; ok {
			out = append(syms[:0], id)
		}
	}
	if out == nil {
		out = t.bpe(syms)
	}
	t.cache.put(word, out)
	for _, id := range out {
		ids = append(ids, int(id))
	}
	return ids, syms
}

// IDError reports an id that no token has.
type IDError struct {
	ID        int
	VocabSize int
}

func (e *IDError) Error() string {
	if e.ID < 0 || e.ID >= e.VocabSize {
		return fmt.Sprintf("tokenizer: id %d out of range [0, %d)", e.ID, e.VocabSize)
	}
	return fmt.Sprintf("tokenizer: id %d is not assigned to any token (vocabulary of %d ids)", e.ID, e.VocabSize)
}

func (t *Tokenizer) checkID(id int) error {
	if id < 0 || id >= len(t.kind) || t.kind[id] == kindHole {
		return &IDError{ID: id, VocabSize: len(t.kind)}
	}
	return nil
}

// Bytes returns the raw bytes that id stands for (possibly part of a UTF-8
// character). The slice must not be modified.
func (t *Tokenizer) Bytes(id int) ([]byte, error) {
	if err := t.checkID(id); err != nil {
		return nil, err
	}
	return t.decBuf[t.decOff[id]:t.decOff[id+1]:t.decOff[id+1]], nil
}

// Decode returns the text of ids as Hugging Face's decode(ids,
// skip_special_tokens=False) does: the bytes of all tokens, concatenated, with
// invalid UTF-8 replaced by U+FFFD. Unlike Hugging Face, which drops unknown
// ids silently, an id that no token has is an *IDError.
func (t *Tokenizer) Decode(ids []int) (string, error) {
	return t.decode(ids, false)
}

// DecodeSkipSpecial is Decode with skip_special_tokens=True: added tokens
// marked special are left out.
func (t *Tokenizer) DecodeSkipSpecial(ids []int) (string, error) {
	return t.decode(ids, true)
}

func (t *Tokenizer) decode(ids []int, skipSpecial bool) (string, error) {
	buf := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		if err := t.checkID(id); err != nil {
			return "", err
		}
		if skipSpecial && t.kind[id] == kindSpecial {
			continue
		}
		buf = append(buf, t.decBuf[t.decOff[id]:t.decOff[id+1]]...)
	}
	if utf8.Valid(buf) {
		return string(buf), nil
	}
	return string(lossyUTF8(nil, buf)), nil
}

// wordCache memoises the BPE of frequent words. Reads are lock-free; it is
// bounded: when full it is replaced by an empty one.
type wordCache struct {
	m atomic.Pointer[cacheMap]
}

type cacheMap struct {
	sync.Map // string -> []int32
	n        atomic.Int32
}

const wordCacheSize = 1 << 16

func newWordCache() *wordCache {
	c := &wordCache{}
	c.m.Store(&cacheMap{})
	return c
}

func (c *wordCache) get(word string) ([]int32, bool) {
	if c == nil {
		return nil, false
	}
	v, ok := c.m.Load().Load(word)
	if !ok {
		return nil, false
	}
	return v.([]int32), true
}

func (c *wordCache) put(word string, ids []int32) {
	if c == nil || len(word) > 256 {
		return
	}
	m := c.m.Load()
	if m.n.Add(1) > wordCacheSize {
		c.m.CompareAndSwap(m, &cacheMap{})
		return
	}
	// Clone the key: word is a substring of the caller's text, which the
	// cache must not keep alive.
	m.Store(strings.Clone(word), append([]int32(nil), ids...))
}
