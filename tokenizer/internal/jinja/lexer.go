package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

type tokenKind int

const (
	tData tokenKind = iota
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
	tEOF
)

type token struct {
	kind tokenKind
	val  string // name, operator, decoded string literal, number text, data
	line int
}

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tVarEnd:
		return "'}}'"
	case tBlockEnd:
		return "'%}'"
	case tString:
		return strRepr(t.val)
	case tData:
		return "template data"
	}
	return "'" + t.val + "'"
}

// Options are the jinja2.Environment settings that change lexing. Hugging
// Face renders chat templates with TrimBlocks and LStripBlocks.
type Options struct {
	TrimBlocks   bool
	LStripBlocks bool
	// KeepTrailingNewline keeps a final "\n" of the template source.
	KeepTrailingNewline bool
	// Limits bound the parse and every render of the template (zero
	// fields: DefaultLimits).
	Limits Limits
}

// lex splits a template into tokens with jinja2.lexer.Lexer's rules for
// whitespace control ("-" / "+" modifiers, trim_blocks, lstrip_blocks).
func lex(src string, opt Options, b *budget) ([]token, error) {
	// Jinja normalises every newline of the source to "\n" and drops one
	// trailing newline before lexing.
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	if !opt.KeepTrailingNewline && strings.HasSuffix(src, "\n") {
		src = src[:len(src)-1]
	}
	lx := &lexer{src: src, opt: opt, b: b, line: 1, lineStarting: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	return lx.toks, nil
}

type lexer struct {
	src          string
	pos          int
	line         int
	opt          Options
	b            *budget
	err          error // the first budget error of emit
	toks         []token
	lineStarting bool // the last tag's end match ended with "\n"
}

// emit appends a token, charged to the budget; a charge that does not fit
// is kept in lx.err, which run and lexInside check.
func (lx *lexer) emit(kind tokenKind, val string) {
	if lx.err == nil {
		lx.err = lx.b.alloc(tokenSize, "parsing")
	}
	if len(lx.toks) == cap(lx.toks) { // double, so that all the copies add up to at most the final size
		lx.toks = append(make([]token, 0, 2*cap(lx.toks)+16), lx.toks...)
	}
	lx.toks = append(lx.toks, token{kind: kind, val: val, line: lx.line})
}

func (lx *lexer) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", lx.line, fmt.Sprintf(format, args...))
}

func (lx *lexer) advance(n int) {
	lx.line += strings.Count(lx.src[lx.pos:lx.pos+n], "\n")
	lx.pos += n
}

// pyRStrip is Python's str.rstrip().
func pyRStrip(s string) string { return strings.TrimRightFunc(s, pyIsSpace) }

func pyAllSpace(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !pyIsSpace(r) {
			return false
		}
	}
	return true
}

// spaceLen is the length of the Python-whitespace prefix of s (regex \s*).
func spaceLen(s string) int { return len(s) - len(strings.TrimLeftFunc(s, pyIsSpace)) }

func (lx *lexer) run() error {
	for lx.pos < len(lx.src) {
		if lx.err != nil {
			return lx.err
		}
		rest := lx.src[lx.pos:]
		i := indexTagStart(rest)
		if i < 0 {
			lx.emit(tData, rest)
			lx.advance(len(rest))
			break
		}
		text := rest[:i]
		open := rest[i : i+2]
		sign := byte(0)
		if i+2 < len(rest) && (rest[i+2] == '-' || rest[i+2] == '+') {
			sign = rest[i+2]
		}
		raw := open == "{%" && isRawBegin(rest[i:])
		switch {
		case sign == '-':
			text = pyRStrip(text)
		case sign != '+' && lx.opt.LStripBlocks && open != "{{":
			lpos := strings.LastIndexByte(text, '\n') + 1
			if (lpos > 0 || lx.lineStarting) && pyAllSpace(text[lpos:]) {
				text = text[:lpos]
			}
		}
		if text != "" {
			lx.emit(tData, text)
		}
		lx.advance(i)
		openLen := 2
		if sign != 0 {
			openLen = 3
		}
		switch {
		case raw:
			if err := lx.lexRaw(); err != nil {
				return err
			}
		case open == "{#":
			if err := lx.lexComment(openLen); err != nil {
				return err
			}
		case open == "{{":
			lx.emit(tVarBegin, "{{")
			lx.advance(openLen)
			if err := lx.lexInside(tVarEnd); err != nil {
				return err
			}
		default:
			lx.emit(tBlockBegin, "{%")
			lx.advance(openLen)
			if err := lx.lexInside(tBlockEnd); err != nil {
				return err
			}
		}
	}
	lx.emit(tEOF, "")
	return lx.err
}

func indexTagStart(s string) int {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '{' && (s[i+1] == '{' || s[i+1] == '%' || s[i+1] == '#') {
			return i
		}
	}
	return -1
}

// isRawBegin matches {%[-+]?\s*raw\s*[-+]?%} at the start of s.
func isRawBegin(s string) bool {
	_, ok := matchRawTag(s, "raw")
	return ok
}

// matchRawTag matches {%[-+]?\s*word\s*[-+]?%} at the start of s and returns
// its length.
func matchRawTag(s, word string) (int, bool) {
	i := 2
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	i += spaceLen(s[i:])
	if !strings.HasPrefix(s[i:], word) {
		return 0, false
	}
	i += len(word)
	i += spaceLen(s[i:])
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	if !strings.HasPrefix(s[i:], "%}") {
		return 0, false
	}
	return i + 2, true
}

func (lx *lexer) lexRaw() error {
	n, _ := matchRawTag(lx.src[lx.pos:], "raw")
	endSign := lx.src[lx.pos+n-3]
	lx.advance(n)
	lx.lineStarting = false
	if endSign == '-' {
		k := spaceLen(lx.src[lx.pos:])
		lx.advance(k)
		lx.lineStarting = k > 0 && lx.src[lx.pos-1] == '\n'
	}
	// The body runs to the first {% endraw %}.
	rest := lx.src[lx.pos:]
	for i := 0; i < len(rest); i++ {
		if !strings.HasPrefix(rest[i:], "{%") {
			continue
		}
		m, ok := matchRawTag(rest[i:], "endraw")
		if !ok {
			continue
		}
		body := rest[:i]
		switch sign := rest[i+2]; {
		case sign == '-':
			body = pyRStrip(body)
		case sign != '+' && lx.opt.LStripBlocks:
			lpos := strings.LastIndexByte(body, '\n') + 1
			if (lpos > 0 || lx.lineStarting) && pyAllSpace(body[lpos:]) {
				body = body[:lpos]
			}
		}
		if body != "" {
			lx.emit(tData, body)
		}
		lx.advance(i + m)
		lx.afterTagEnd(rest[i+m-3])
		return nil
	}
	return lx.errorf("missing end of raw directive")
}

// afterTagEnd applies "-%}" (strip following whitespace) or trim_blocks
// after a block or comment end; sign is the byte before "%}" / "#}".
func (lx *lexer) afterTagEnd(sign byte) {
	rest := lx.src[lx.pos:]
	consumed := lx.src[lx.pos-2 : lx.pos]
	switch {
	case sign == '-':
		n := spaceLen(rest)
		consumed = rest[:n]
		lx.advance(n)
	case sign == '+':
	case lx.opt.TrimBlocks && strings.HasPrefix(rest, "\n"):
		consumed = "\n"
		lx.advance(1)
	}
	lx.lineStarting = strings.HasSuffix(consumed, "\n")
}

func (lx *lexer) lexComment(openLen int) error {
	lx.advance(openLen)
	rest := lx.src[lx.pos:]
	k := strings.Index(rest, "#}")
	if k < 0 {
		return lx.errorf("missing end of comment tag")
	}
	sign := byte(0)
	if k > 0 && (rest[k-1] == '-' || rest[k-1] == '+') {
		sign = rest[k-1]
	}
	lx.advance(k + 2)
	lx.afterTagEnd(sign)
	return nil
}

var operators = []string{"//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", "<", ">", "=", ".", ":", "|", ",", ";"}

// lexInside tokenises the inside of {{ }} or {% %} up to its end marker.
func (lx *lexer) lexInside(end tokenKind) error {
	var stack []byte // open brackets: the end marker only counts when balanced
	for {
		if lx.err != nil {
			return lx.err
		}
		if lx.pos >= len(lx.src) {
			if end == tVarEnd {
				return lx.errorf("unexpected end of template, expected '}}'")
			}
			return lx.errorf("unexpected end of template, expected '%%}'")
		}
		rest := lx.src[lx.pos:]
		if len(stack) == 0 {
			if end == tVarEnd {
				if strings.HasPrefix(rest, "-}}") {
					lx.advance(3)
					n := spaceLen(lx.src[lx.pos:])
					lx.advance(n)
					lx.emit(tVarEnd, "}}")
					lx.lineStarting = n > 0 && lx.src[lx.pos-1] == '\n'
					return nil
				}
				if strings.HasPrefix(rest, "}}") {
					lx.advance(2)
					lx.emit(tVarEnd, "}}")
					lx.lineStarting = false
					return nil
				}
			} else {
				for _, s := range []string{"-%}", "+%}", "%}"} {
					if strings.HasPrefix(rest, s) {
						lx.advance(len(s))
						lx.emit(tBlockEnd, "%}")
						sign := byte(0)
						if len(s) == 3 {
							sign = s[0]
						}
						lx.afterTagEnd(sign)
						return nil
					}
				}
			}
		}
		c := rest[0]
		switch {
		case pyIsSpaceByte(rest):
			_, w := utf8.DecodeRuneInString(rest)
			lx.advance(w)
		case c == '\'' || c == '"':
			s, n, err := lexString(rest)
			if err != nil {
				return lx.errorf("%v", err)
			}
			lx.emit(tString, s)
			lx.advance(n)
		case c >= '0' && c <= '9':
			kind, n := lexNumber(rest)
			lx.emit(kind, strings.ReplaceAll(rest[:n], "_", ""))
			lx.advance(n)
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			n := 1
			for n < len(rest) && (rest[n] == '_' || rest[n] >= 'a' && rest[n] <= 'z' || rest[n] >= 'A' && rest[n] <= 'Z' || rest[n] >= '0' && rest[n] <= '9') {
				n++
			}
			lx.emit(tName, rest[:n])
			lx.advance(n)
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(rest, o) {
					op = o
					break
				}
			}
			if op == "" {
				r, _ := utf8.DecodeRuneInString(rest)
				return lx.errorf("unexpected char %s", strRepr(string(r)))
			}
			switch op {
			case "(", "[", "{":
				stack = append(stack, op[0])
			case ")", "]", "}":
				want := byte('(')
				switch op[0] {
				case ']':
					want = '['
				case '}':
					want = '{'
				}
				if len(stack) == 0 {
					return lx.errorf("unexpected '%s'", op)
				}
				if stack[len(stack)-1] != want {
					return lx.errorf("unexpected '%s', expected closing of '%c'", op, stack[len(stack)-1])
				}
				stack = stack[:len(stack)-1]
			}
			lx.emit(tOp, op)
			lx.advance(len(op))
		}
	}
}

func pyIsSpaceByte(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return pyIsSpace(r)
}

// lexNumber matches an integer or float literal (with "_" separators).
func lexNumber(s string) (tokenKind, int) {
	digits := func(i int) int {
		j := i
		for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '_' && j > i && j+1 < len(s) && s[j+1] >= '0' && s[j+1] <= '9') {
			j++
		}
		return j
	}
	n := digits(0)
	kind := tInt
	if n+1 < len(s) && s[n] == '.' && s[n+1] >= '0' && s[n+1] <= '9' {
		n = digits(n + 1)
		kind = tFloat
	}
	if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		j := n + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && s[j] >= '0' && s[j] <= '9' {
			n = digits(j)
			kind = tFloat
		}
	}
	return kind, n
}

// lexString reads a quoted literal and decodes it as Jinja does (Python's
// "unicode-escape" codec).
func lexString(s string) (string, int, error) {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case q:
			v, err := unescape(s[1:i])
			return v, i + 1, err
		}
	}
	return "", 0, fmt.Errorf("unterminated string")
}

func unescape(s string) (string, error) {
	if strings.IndexByte(s, '\\') < 0 {
		return s, nil
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			sb.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case '\n':
		case '\\', '\'', '"':
			sb.WriteByte(e)
		case 'a':
			sb.WriteByte(7)
		case 'b':
			sb.WriteByte(8)
		case 'f':
			sb.WriteByte(12)
		case 'n':
			sb.WriteByte('\n')
		case 'r':
			sb.WriteByte('\r')
		case 't':
			sb.WriteByte('\t')
		case 'v':
			sb.WriteByte(11)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			v, _ := strconv.ParseUint(s[i:j], 8, 32)
			sb.WriteRune(rune(v))
			i = j - 1
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+n > len(s) {
				return "", fmt.Errorf("truncated \\%c escape", e)
			}
			v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil || v > utf8.MaxRune {
				return "", fmt.Errorf("invalid \\%c escape %q", e, s[i+1:i+1+n])
			}
			sb.WriteRune(rune(v))
			i += n
		default:
			sb.WriteByte('\\')
			sb.WriteByte(e)
		}
	}
	return sb.String(), nil
}
