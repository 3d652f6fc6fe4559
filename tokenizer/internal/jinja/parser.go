package jinja

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// Statement nodes.
type (
	textNode   struct{ text string }
	outputNode struct {
		e    expr
		line int
	}
	ifNode struct {
		conds  []expr
		bodies [][]node
		els    []node
		line   int
	}
	forNode struct {
		target    target
		iter      expr
		cond      expr
		body, els []node
		line      int
	}
	setNode struct {
		target  target
		value   expr   // nil for a block set
		body    []node // block set
		filters []*filterExpr
		line    int
	}
	macroNode struct {
		name     string
		params   []string
		defaults []expr // aligned with the last len(defaults) params
		body     []node
	}
	filterBlockNode struct {
		filters []*filterExpr
		body    []node
	}
	withNode struct {
		targets []target
		values  []expr
		body    []node
	}
	breakNode    struct{}
	continueNode struct{}
)

type node any

// target is an assignment target: one name, a tuple of names, or ns.attr.
type target struct {
	names []string
	tuple bool
	attr  string // with names[0] the namespace variable
}

// Expression nodes.
type (
	constExpr struct{ v Value }
	nameExpr  struct {
		name string
		line int
	}
	getattrExpr struct {
		obj  expr
		attr string
		line int
	}
	getitemExpr struct {
		obj, key expr
		line     int
	}
	sliceExpr struct{ start, stop, step expr }
	callExpr  struct {
		fn     expr
		args   []expr
		kwargs []kwExpr
		line   int
	}
	kwExpr struct {
		name string
		e    expr
	}
	filterExpr struct {
		arg    expr // nil inside a filter block / block set
		name   string
		args   []expr
		kwargs []kwExpr
		line   int
	}
	testExpr struct {
		arg    expr
		name   string
		args   []expr
		kwargs []kwExpr
		line   int
	}
	binExpr struct {
		op   string
		l, r expr
		line int
	}
	unaryExpr struct {
		op   string
		e    expr
		line int
	}
	compareExpr struct {
		first expr
		ops   []string
		rest  []expr
		line  int
	}
	condExpr   struct{ test, yes, no expr }
	listExpr   struct{ items []expr }
	tupleExpr  struct{ items []expr }
	dictExpr   struct{ keys, vals []expr }
	concatExpr struct {
		parts []expr
	}
)

type expr any

type parser struct {
	toks  []token
	pos   int
	b     *budget
	depth int // of recursion, bounded by the Depth limit
}

// enter begins a nested construct (a block body, an expression, a prefix
// operator); leave ends it. The parser recurses once per level, so Depth
// bounds its stack.
func (p *parser) enter() error {
	if p.depth >= p.b.maxDepth() {
		return fmt.Errorf("line %d: %w", p.cur().line, p.b.depthErr("parsing"))
	}
	p.depth++
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) peek() token { return p.toks[min(p.pos+1, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("line %d: %s", p.cur().line, fmt.Sprintf(format, args...))
}

func (p *parser) isName(v string) bool { t := p.cur(); return t.kind == tName && t.val == v }
func (p *parser) isOp(v string) bool   { t := p.cur(); return t.kind == tOp && t.val == v }

func (p *parser) expectOp(v string) error {
	if !p.isOp(v) {
		return p.errorf("expected '%s', got %s", v, p.cur())
	}
	p.next()
	return nil
}

func (p *parser) expectName() (string, error) {
	if p.cur().kind != tName {
		return "", p.errorf("expected a name, got %s", p.cur())
	}
	return p.next().val, nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tBlockEnd {
		return p.errorf("expected '%%}', got %s", p.cur())
	}
	p.next()
	return nil
}

func parse(toks []token, b *budget) ([]node, error) {
	p := &parser{toks: toks, b: b}
	body, end, err := p.parseBody(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errorf("unexpected '%s'", end)
	}
	return body, nil
}

// parseBody parses nodes until a block tag whose first name is in ends (the
// tag name is returned, with the parser just after it) or the end of input.
// block reads the end of the current tag, then a body up to one of ends.
func (p *parser) block(ends ...string) ([]node, string, error) {
	if err := p.expectBlockEnd(); err != nil {
		return nil, "", err
	}
	return p.parseBody(ends)
}

func (p *parser) parseBody(ends []string) ([]node, string, error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer p.leave()
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			if ends != nil {
				return nil, "", p.errorf("unexpected end of template; expected one of %q", ends)
			}
			return body, "", nil
		case tData:
			p.next()
			body = append(body, &textNode{t.val})
		case tVarBegin:
			p.next()
			e, err := p.parseTuple(true, false)
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tVarEnd {
				return nil, "", p.errorf("expected '}}', got %s", p.cur())
			}
			p.next()
			body = append(body, &outputNode{e: e, line: t.line})
		case tBlockBegin:
			p.next()
			name := p.cur()
			if name.kind != tName {
				return nil, "", p.errorf("expected a statement name, got %s", name)
			}
			for _, e := range ends {
				if name.val == e {
					p.next()
					return body, e, nil
				}
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				body = append(body, n)
			}
		default:
			return nil, "", p.errorf("unexpected %s", t)
		}
	}
}

func (p *parser) parseStatement() (node, error) {
	t := p.next()
	switch t.val {
	case "if":
		return p.parseIf(t.line)
	case "for":
		return p.parseFor(t.line)
	case "set":
		return p.parseSet(t.line)
	case "macro":
		return p.parseMacro()
	case "filter":
		return p.parseFilterBlock()
	case "with":
		return p.parseWith()
	case "break", "continue":
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if t.val == "break" {
			return &breakNode{}, nil
		}
		return &continueNode{}, nil
	case "generation":
		// transformers' AssistantTracker extension: renders its body.
		body, _, err := p.block("endgeneration")
		if err != nil {
			return nil, err
		}
		return &withNode{body: body}, p.expectBlockEnd()
	}
	return nil, fmt.Errorf("line %d: unsupported statement %q", t.line, t.val)
}

func (p *parser) parseIf(line int) (node, error) {
	n := &ifNode{line: line}
	for {
		cond, err := p.parseTuple(false, false)
		if err != nil {
			return nil, err
		}
		body, end, err := p.block("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if n.els, _, err = p.block("endif"); err != nil {
				return nil, err
			}
		}
		return n, p.expectBlockEnd()
	}
}

func (p *parser) parseFor(line int) (node, error) {
	tgt, err := p.parseAssignTarget(false)
	if err != nil {
		return nil, err
	}
	if !p.isName("in") {
		return nil, p.errorf("expected 'in', got %s", p.cur())
	}
	p.next()
	iter, err := p.parseTuple(false, false)
	if err != nil {
		return nil, err
	}
	n := &forNode{target: tgt, iter: iter, line: line}
	if p.isName("if") {
		p.next()
		if n.cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.errorf("recursive for loops are not supported")
	}
	body, end, err := p.block("endfor", "else")
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if n.els, _, err = p.block("endfor"); err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseSet(line int) (node, error) {
	tgt, err := p.parseAssignTarget(true)
	if err != nil {
		return nil, err
	}
	n := &setNode{target: tgt, line: line}
	if p.isOp("=") {
		p.next()
		if n.value, err = p.parseTuple(true, false); err != nil {
			return nil, err
		}
		return n, p.expectBlockEnd()
	}
	for p.isOp("|") {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
	}
	if n.body, _, err = p.block("endset"); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseMacro() (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	n := &macroNode{name: name}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	err = p.commaList(")", false, func() error {
		param, err := p.expectName()
		if err != nil {
			return err
		}
		n.params = append(n.params, param)
		if p.isOp("=") {
			p.next()
			d, err := p.parseExpression(true)
			if err != nil {
				return err
			}
			n.defaults = append(n.defaults, d)
		} else if len(n.defaults) > 0 {
			return p.errorf("non-default argument %q follows default argument", param)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if n.body, _, err = p.block("endmacro"); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseFilterBlock() (node, error) {
	n := &filterBlockNode{}
	for {
		f, err := p.parseFilterCall(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
		if !p.isOp("|") {
			break
		}
		p.next()
	}
	var err error
	if n.body, _, err = p.block("endfilter"); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseWith() (node, error) {
	n := &withNode{}
	for p.cur().kind != tBlockEnd {
		if len(n.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		tgt, err := p.parseAssignTarget(false)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, tgt)
		n.values = append(n.values, v)
	}
	p.next()
	var err error
	if n.body, _, err = p.parseBody([]string{"endwith"}); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseAssignTarget(withNamespace bool) (target, error) {
	if withNamespace && p.cur().kind == tName && p.peek().kind == tOp && p.peek().val == "." {
		ns := p.next().val
		p.next()
		attr, err := p.expectName()
		if err != nil {
			return target{}, err
		}
		return target{names: []string{ns}, attr: attr}, nil
	}
	var tgt target
	for {
		name, err := p.expectName()
		if err != nil {
			return target{}, err
		}
		tgt.names = append(tgt.names, name)
		if !p.isOp(",") {
			break
		}
		p.next()
		tgt.tuple = true
		if p.isEnd() {
			break
		}
	}
	for _, n := range tgt.names {
		switch n {
		case "true", "false", "none", "True", "False", "None":
			return target{}, p.errorf("cannot assign to %q", n)
		}
	}
	return tgt, nil
}

// isEnd is Parser.is_tuple_end. Jinja2 3.1 also takes extra end rules
// ("name:in" after a for target, "name:recursive" after its iterable), but
// passes them to Token.test_any as one tuple argument, so they never match:
// "{% for a, in x %}" is a syntax error there and "{% for a in x, recursive %}"
// iterates over the tuple (x, recursive). The goldens pin both; Tarfa
// follows Jinja2, not its intent.
func (p *parser) isEnd() bool {
	t := p.cur()
	return t.kind == tVarEnd || t.kind == tBlockEnd || t.kind == tEOF || t.kind == tOp && t.val == ")"
}

// parseTuple is Parser.parse_tuple: one expression, or several separated by
// commas (a tuple).
func (p *parser) parseTuple(withCond bool, explicitParens bool) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isEnd() {
			break
		}
		e, err := p.parseExpression(withCond)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
		if !p.isOp(",") {
			break
		}
		isTuple = true
	}
	if !isTuple {
		if len(items) == 1 {
			return items[0], nil
		}
		if !explicitParens {
			return nil, p.errorf("expected an expression, got %s", p.cur())
		}
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) parseExpression(withCond bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if !withCond {
		return p.parseOr()
	}
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		p.next()
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var no expr
		if p.isName("else") {
			p.next()
			if no, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
		e = &condExpr{test: test, yes: e, no: no}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) { return p.parseLeftAssoc("or", p.parseAnd) }

func (p *parser) parseAnd() (expr, error) { return p.parseLeftAssoc("and", p.parseNot) }

// parseLeftAssoc parses operand (op operand)*, grouping to the left.
func (p *parser) parseLeftAssoc(op string, operand func() (expr, error)) (expr, error) {
	l, err := operand()
	if err != nil {
		return nil, err
	}
	for p.isName(op) {
		line := p.next().line
		r, err := operand()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: op, l: l, r: r, line: line}
	}
	return l, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		line := p.next().line
		e, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{op: "not", e: e, line: line}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	line := p.cur().line
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{first: first, line: line}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.next()
		case p.isName("in"):
			op = "in"
			p.next()
		case p.isName("not") && p.peek().kind == tName && p.peek().val == "in":
			op = "not in"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
	if len(c.ops) == 0 {
		return first, nil
	}
	return c, nil
}

func (p *parser) parseMath1() (expr, error) {
	l, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		t := p.next()
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: t.val, l: l, r: r, line: t.line}
	}
	return l, nil
}

func (p *parser) parseConcat() (expr, error) {
	first, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	if !p.isOp("~") {
		return first, nil
	}
	parts := []expr{first}
	for p.isOp("~") {
		p.next()
		e, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		parts = append(parts, e)
	}
	return &concatExpr{parts: parts}, nil
}

func (p *parser) parseMath2() (expr, error) {
	l, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		t := p.next()
		r, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: t.val, l: l, r: r, line: t.line}
	}
	return l, nil
}

func (p *parser) parsePow() (expr, error) {
	l, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.isOp("**") {
		t := p.next()
		r, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: "**", l: l, r: r, line: t.line}
	}
	return l, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	var e expr
	var err error
	if p.isOp("-") || p.isOp("+") {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		t := p.next()
		inner, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &unaryExpr{op: t.val, e: inner, line: t.line}
	} else if e, err = p.parsePrimary(); err != nil {
		return nil, err
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{true}, nil
		case "false", "False":
			return &constExpr{false}, nil
		case "none", "None":
			return &constExpr{nil}, nil
		}
		return &nameExpr{name: t.val, line: t.line}, nil
	case tString:
		s := p.next().val
		if p.cur().kind == tString { // adjacent literals are one string
			parts := []string{s}
			for p.cur().kind == tString {
				parts = append(parts, p.next().val)
			}
			s = strings.Join(parts, "")
		}
		return &constExpr{s}, nil
	case tInt:
		p.next()
		if v, err := strconv.ParseInt(t.val, 10, 64); err == nil {
			return &constExpr{v}, nil
		}
		if len(t.val) > maxIntDigits {
			return nil, fmt.Errorf("line %d: integer literal of %d digits: %w", t.line, len(t.val), errIntDigits)
		}
		b, ok := new(big.Int).SetString(t.val, 10)
		if !ok {
			return nil, fmt.Errorf("line %d: bad integer %q", t.line, t.val)
		}
		return &constExpr{b}, nil
	case tFloat:
		p.next()
		f, err := strconv.ParseFloat(t.val, 64)
		if err != nil {
			return nil, fmt.Errorf("line %d: bad float %q", t.line, t.val)
		}
		return &constExpr{f}, nil
	case tOp:
		switch t.val {
		case "(":
			p.next()
			e, err := p.parseTuple(true, true)
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			p.next()
			l := &listExpr{}
			return l, p.commaList("]", true, func() error {
				e, err := p.parseExpression(true)
				l.items = append(l.items, e)
				return err
			})
		case "{":
			p.next()
			d := &dictExpr{}
			return d, p.commaList("}", true, func() error {
				k, err := p.parseExpression(true)
				if err != nil {
					return err
				}
				if err := p.expectOp(":"); err != nil {
					return err
				}
				v, err := p.parseExpression(true)
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
				return err
			})
		}
	}
	return nil, p.errorf("unexpected %s", t)
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		switch {
		case p.isOp("."):
			line := p.next().line
			t := p.next()
			switch t.kind {
			case tName:
				e = &getattrExpr{obj: e, attr: t.val, line: line}
			case tInt:
				v, _ := strconv.ParseInt(t.val, 10, 64)
				e = &getitemExpr{obj: e, key: &constExpr{v}, line: line}
			default:
				return nil, fmt.Errorf("line %d: expected a name after '.', got %s", t.line, t)
			}
		case p.isOp("["):
			line := p.next().line
			var keys []expr
			err := p.commaList("]", false, func() error {
				k, err := p.parseSubscribed()
				keys = append(keys, k)
				return err
			})
			if err != nil {
				return nil, err
			}
			var key expr
			switch len(keys) {
			case 0:
				return nil, fmt.Errorf("line %d: empty subscript", line)
			case 1:
				key = keys[0]
			default:
				key = &tupleExpr{items: keys}
			}
			e = &getitemExpr{obj: e, key: key, line: line}
		case p.isOp("("):
			c, err := p.parseCall(e)
			if err != nil {
				return nil, err
			}
			e = c
		default:
			return e, nil
		}
	}
}

func (p *parser) parseSubscribed() (expr, error) {
	var parts [3]expr
	if p.isOp(":") {
		p.next()
	} else {
		e, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return e, nil
		}
		p.next()
		parts[0] = e
	}
	var err error
	if !p.isOp(":") && !p.isOp("]") && !p.isOp(",") {
		if parts[1], err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.isOp(":") {
		p.next()
		if !p.isOp("]") && !p.isOp(",") {
			if parts[2], err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
	}
	return &sliceExpr{start: parts[0], stop: parts[1], step: parts[2]}, nil
}

func (p *parser) parseArgs() ([]expr, []kwExpr, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var args []expr
	var kwargs []kwExpr
	err := p.commaList(")", true, func() error {
		if p.isOp("*") || p.isOp("**") {
			return p.errorf("*args and **kwargs in calls are not supported")
		}
		if p.cur().kind == tName && p.peek().kind == tOp && p.peek().val == "=" {
			name := p.next().val
			p.next()
			e, err := p.parseExpression(true)
			kwargs = append(kwargs, kwExpr{name, e})
			return err
		}
		if len(kwargs) > 0 {
			return p.errorf("positional argument follows keyword argument")
		}
		e, err := p.parseExpression(true)
		args = append(args, e)
		return err
	})
	return args, kwargs, err
}

// commaList parses items separated by commas up to and including the
// closing operator close. Like Jinja2, list, dict and call syntax allow a
// trailing comma (trailing), subscripts and macro signatures do not.
func (p *parser) commaList(close string, trailing bool, item func() error) error {
	for first := true; !p.isOp(close); first = false {
		if !first {
			if err := p.expectOp(","); err != nil {
				return err
			}
			if trailing && p.isOp(close) {
				break
			}
		}
		if err := item(); err != nil {
			return err
		}
	}
	p.next()
	return nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	line := p.cur().line
	args, kwargs, err := p.parseArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: fn, args: args, kwargs: kwargs, line: line}, nil
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp("|"):
			e, err = p.parseFilter(e)
		case p.isName("is"):
			e, err = p.parseTest(e)
		case p.isOp("("):
			e, err = p.parseCall(e)
		default:
			return e, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// parseFilter parses "| name(args)" (the pipe is current).
func (p *parser) parseFilter(arg expr) (*filterExpr, error) {
	p.next()
	return p.parseFilterCall(arg)
}

func (p *parser) parseFilterCall(arg expr) (*filterExpr, error) {
	line := p.cur().line
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	f := &filterExpr{arg: arg, name: name, line: line}
	if p.isOp("(") {
		if f.args, f.kwargs, err = p.parseArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// dottedName reads a filter or test name: names joined by ".".
func (p *parser) dottedName() (string, error) {
	name, err := p.expectName()
	if err != nil || !p.isOp(".") {
		return name, err
	}
	parts := []string{name}
	for p.isOp(".") {
		p.next()
		part, err := p.expectName()
		if err != nil {
			return "", err
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "."), nil
}

func (p *parser) parseTest(arg expr) (expr, error) {
	line := p.next().line // "is"
	negate := false
	if p.isName("not") {
		p.next()
		negate = true
	}
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	t := &testExpr{arg: arg, name: name, line: line}
	c := p.cur()
	switch {
	case p.isOp("("):
		if t.args, t.kwargs, err = p.parseArgs(); err != nil {
			return nil, err
		}
	case (c.kind == tName || c.kind == tString || c.kind == tInt || c.kind == tFloat || p.isOp("[") || p.isOp("{")) &&
		!p.isName("else") && !p.isName("or") && !p.isName("and"):
		if p.isName("is") {
			return nil, p.errorf("you cannot chain multiple tests with 'is'")
		}
		a, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if a, err = p.parsePostfix(a); err != nil {
			return nil, err
		}
		t.args = []expr{a}
	}
	if negate {
		return &unaryExpr{op: "not", e: t, line: line}, nil
	}
	return t, nil
}

// checkNesting bounds the depth of the syntax tree: statements inside
// blocks, expressions inside expressions. Operator chains ("a + b + c") and
// postfix chains ("x.a.b", "x|f|g") are built without recursion, so the
// parser's own bound does not cover them; evaluation recurses through the
// whole tree, so this one does.
func checkNesting(body []node, limit int) error {
	c := nestChecker{limit: limit}
	return c.nodes(body, 1, 1)
}

type nestChecker struct{ limit int }

func (c nestChecker) fail(line int) error {
	return fmt.Errorf("line %d: %w", line, &LimitError{Limit: "Depth", Max: int64(c.limit), Op: "syntax"})
}

func (c nestChecker) nodes(body []node, d, line int) error {
	for _, n := range body {
		if err := c.node(n, d, line); err != nil {
			return err
		}
	}
	return nil
}

func (c nestChecker) node(n node, d, line int) error {
	if d > c.limit {
		return c.fail(line)
	}
	var exprs []expr
	var bodies [][]node
	switch n := n.(type) {
	case *outputNode:
		line, exprs = n.line, []expr{n.e}
	case *ifNode:
		line, exprs, bodies = n.line, n.conds, append(append([][]node{}, n.bodies...), n.els)
	case *forNode:
		line, exprs, bodies = n.line, []expr{n.iter, n.cond}, [][]node{n.body, n.els}
	case *setNode:
		line, exprs, bodies = n.line, []expr{n.value}, [][]node{n.body}
		for _, f := range n.filters {
			exprs = append(exprs, f)
		}
	case *macroNode:
		exprs, bodies = n.defaults, [][]node{n.body}
	case *filterBlockNode:
		bodies = [][]node{n.body}
		for _, f := range n.filters {
			exprs = append(exprs, f)
		}
	case *withNode:
		exprs, bodies = n.values, [][]node{n.body}
	}
	for _, e := range exprs {
		if err := c.expr(e, d+1, line); err != nil {
			return err
		}
	}
	for _, b := range bodies {
		if err := c.nodes(b, d+1, line); err != nil {
			return err
		}
	}
	return nil
}

func (c nestChecker) expr(e expr, d, line int) error {
	if e == nil {
		return nil
	}
	if d > c.limit {
		return c.fail(line)
	}
	var kids []expr
	kw := func(kws []kwExpr) {
		for _, k := range kws {
			kids = append(kids, k.e)
		}
	}
	switch e := e.(type) {
	case *getattrExpr:
		line, kids = e.line, []expr{e.obj}
	case *getitemExpr:
		line, kids = e.line, []expr{e.obj, e.key}
	case *sliceExpr:
		kids = []expr{e.start, e.stop, e.step}
	case *callExpr:
		line, kids = e.line, append([]expr{e.fn}, e.args...)
		kw(e.kwargs)
	case *filterExpr:
		line, kids = e.line, append([]expr{e.arg}, e.args...)
		kw(e.kwargs)
	case *testExpr:
		line, kids = e.line, append([]expr{e.arg}, e.args...)
		kw(e.kwargs)
	case *binExpr:
		line, kids = e.line, []expr{e.l, e.r}
	case *unaryExpr:
		line, kids = e.line, []expr{e.e}
	case *compareExpr:
		line, kids = e.line, append([]expr{e.first}, e.rest...)
	case *condExpr:
		kids = []expr{e.test, e.yes, e.no}
	case *listExpr:
		kids = e.items
	case *tupleExpr:
		kids = e.items
	case *dictExpr:
		kids = append(append([]expr{}, e.keys...), e.vals...)
	case *concatExpr:
		kids = e.parts
	}
	for _, k := range kids {
		if err := c.expr(k, d+1, line); err != nil {
			return err
		}
	}
	return nil
}
