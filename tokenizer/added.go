package tokenizer

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// AddedToken is an entry of tokenizer.json's "added_tokens": a string that is
// cut out of the text whole, before normalisation and BPE, and gets its own id.
type AddedToken struct {
	ID      int    `json:"id"`
	Content string `json:"content"`
	// SingleWord: match only when not touching a word character on either side.
	SingleWord bool `json:"single_word"`
	// LStrip / RStrip: the match swallows the whitespace on its left / right.
	LStrip bool `json:"lstrip"`
	RStrip bool `json:"rstrip"`
	// Normalized: matched against the normalised text rather than the raw text.
	Normalized bool `json:"normalized"`
	// Special: a control token (Decode can skip it; see DecodeSkipSpecial).
	Special bool `json:"special"`
}

// matcher finds added tokens in text with the semantics of Hugging Face's
// AddedVocabulary: leftmost-longest non-overlapping matches (Aho-Corasick
// MatchKind::LeftmostLongest), then the single_word / lstrip / rstrip rules.
// The tokens form a byte trie, so the longest token at a position is found
// by reading at most as many bytes as the longest token has, however many
// tokens there are.
type matcher struct {
	first [256]bool
	nodes []trieNode // nodes[0] is the root
}

type trieNode struct {
	edges []trieEdge // sorted by byte
	tok   *AddedToken
}

type trieEdge struct {
	b  byte
	to int32
}

func newMatcher(tokens []*AddedToken) *matcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &matcher{nodes: make([]trieNode, 1)}
	for _, tok := range tokens {
		n := int32(0)
		for i := 0; i < len(tok.Content); i++ {
			n = m.child(n, tok.Content[i], true)
		}
		if m.nodes[n].tok == nil { // of equal contents, the first wins
			m.nodes[n].tok = tok
		}
		m.first[tok.Content[0]] = true
	}
	return m
}

// child follows the edge of n labelled c, adding it when add is set (else
// -1 when there is none).
func (m *matcher) child(n int32, c byte, add bool) int32 {
	edges := m.nodes[n].edges
	i, found := slices.BinarySearchFunc(edges, c, func(e trieEdge, c byte) int { return int(e.b) - int(c) })
	if found {
		return edges[i].to
	}
	if !add {
		return -1
	}
	to := int32(len(m.nodes))
	m.nodes = append(m.nodes, trieNode{})
	m.nodes[n].edges = slices.Insert(edges, i, trieEdge{c, to})
	return to
}

// next returns the leftmost-longest match at or after from, or ok == false.
func (m *matcher) next(s string, from int) (tok *AddedToken, start int, ok bool) {
	for i := from; i < len(s); i++ {
		if !m.first[s[i]] {
			continue
		}
		n := int32(0)
		for j := i; j < len(s); j++ {
			if n = m.child(n, s[j], false); n < 0 {
				break
			}
			if t := m.nodes[n].tok; t != nil {
				tok = t
			}
		}
		if tok != nil {
			return tok, i, true
		}
	}
	return nil, 0, false
}

// split cuts s into added tokens and the text between them and calls emit
// for each piece in order: with tok != nil for a token, else with the text.
func (m *matcher) split(s string, emit func(text string, tok *AddedToken)) {
	if m == nil {
		if s != "" {
			emit(s, nil)
		}
		return
	}
	offset := 0 // end of what has been emitted
	for from := 0; from < len(s); {
		tok, start, ok := m.next(s, from)
		if !ok {
			break
		}
		stop := start + len(tok.Content)
		from = stop
		if tok.SingleWord {
			startOK := start == 0 || !endsWithWord(s[:start])
			stopOK := stop == len(s) || !startsWithWord(s[stop:])
			if !startOK || !stopOK {
				continue
			}
		}
		if tok.LStrip {
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), offset)
		}
		if tok.RStrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
		}
		if start > offset {
			emit(s[offset:start], nil)
		}
		emit(s[start:stop], tok)
		offset = stop
	}
	if offset < len(s) {
		emit(s[offset:], nil)
	}
}

// isWordRune is Rust regex's Unicode \w: Alphabetic, marks, decimal digits,
// connector punctuation and the joiners.
func isWordRune(r rune) bool {
	return unicode.Is(letter16, r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Join_Control, r)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordRune(r)
}
