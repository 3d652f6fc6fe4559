package jinja

import (
	"fmt"
	"math"
	"math/bits"
)

// Limits bound what one Parse or Render may cost. Chat templates come from
// checkpoint files that users download from strangers, so a template is a
// program from an untrusted source: every way it has of making the process
// allocate, work or recurse is charged against these limits, and going over
// one is a *LimitError. A zero field means its default (DefaultLimits).
type Limits struct {
	// Bytes bounds the bytes a render allocates: every string it builds
	// (including the output and everything printed into it), 16 bytes per
	// list slot, 64 per dict entry and the words of big integers. It is a
	// total, not a peak: freed values are not given back. Parse charges
	// 64 bytes per token of the source against its own Bytes.
	Bytes int64
	// Steps bounds the work of a render: one step per expression evaluated,
	// statement run, call and loop iteration, one per item that a filter,
	// method, operator or comparison goes through, one per 64 bytes it
	// scans (16 for case mapping and character classes), and
	// (words of x)×(words of y)/64 for big-integer multiplication and
	// division.
	Steps int64
	// Depth bounds nesting: of the template's syntax tree (statements,
	// expressions, brackets; checked by Parse), of evaluation (a macro call
	// nests its body inside the call, so it bounds recursion too), and of
	// the values that are printed, compared, hashed or serialised (lists
	// and dicts inside each other, and JSON input).
	Depth int
}

// Default limits. Real chat templates render a conversation with a few
// times its size in values and under a hundred steps per message: the Qwen3
// template renders 2000 messages (6 MB of JSON, over a million tokens) with
// 13 MB and 760,000 steps. These leave ten times that, and keep a hostile
// template to a few hundred MB of heap and a few seconds.
const (
	DefaultBytes = 128 << 20
	DefaultSteps = 10_000_000
	// DefaultDepth is Python's default recursion limit; Jinja2 itself fails
	// well before it (about 90 nested brackets, 100 nested blocks).
	DefaultDepth = 1000
)

// DefaultLimits returns the limits used where none are given.
func DefaultLimits() Limits {
	return Limits{Bytes: DefaultBytes, Steps: DefaultSteps, Depth: DefaultDepth}
}

// orDefault replaces zero (or negative) fields by their defaults.
func (l Limits) orDefault() Limits {
	if l.Bytes <= 0 {
		l.Bytes = DefaultBytes
	}
	if l.Steps <= 0 {
		l.Steps = DefaultSteps
	}
	if l.Depth <= 0 {
		l.Depth = DefaultDepth
	}
	return l
}

// LimitError says a template went over one of its Limits.
type LimitError struct {
	Limit string // the field of Limits: "Bytes", "Steps" or "Depth"
	Max   int64  // its value
	Op    string // what went over it, e.g. "filter indent"
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case "Bytes":
		return fmt.Sprintf("template exceeds its value budget of %s (%s)", formatBytes(e.Max), e.Op)
	case "Steps":
		return fmt.Sprintf("template exceeds its budget of %d steps (%s)", e.Max, e.Op)
	}
	return fmt.Sprintf("template nests deeper than its limit of %d (%s)", e.Max, e.Op)
}

func formatBytes(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Costs charged to a budget.
const (
	valueSize     = 16 // one list slot (an interface value)
	dictEntrySize = 64 // one dict entry: key and value slots and its index entry
	tokenSize     = 64 // one lexed token and its share of the syntax tree
	scanPerStep   = 64 // bytes a filter may scan for one step
	runesPerStep  = 16 // bytes of Unicode work (case mapping, classes) per step
)

// budget is what one Parse or Render may still spend. Every allocation that
// depends on the template or its input is charged before it is made, every
// unit of work before it is done, so the first charge that does not fit
// ends the render with a *LimitError.
type budget struct {
	lim   Limits
	bytes int64 // charged so far
	steps int64
	depth int // current nesting of evaluation
}

func newBudget(lim Limits) *budget { return &budget{lim: lim.orDefault()} }

// A nil *budget charges nothing (values built outside a render, error
// messages) and bounds nesting by DefaultDepth.

// alloc charges n bytes (n from mulSat / addSat may be saturated).
func (b *budget) alloc(n int64, op string) error {
	if b == nil {
		return nil
	}
	if n < 0 || n > b.lim.Bytes-b.bytes {
		return &LimitError{Limit: "Bytes", Max: b.lim.Bytes, Op: op}
	}
	b.bytes += n
	return nil
}

// refund gives back part of an earlier alloc that turned out larger than
// what was made.
func (b *budget) refund(n int64) {
	if b != nil {
		b.bytes -= n
	}
}

// allocValues charges n list slots.
func (b *budget) allocValues(n int, op string) error {
	return b.alloc(mulSat(int64(n), valueSize), op)
}

// work charges n steps.
func (b *budget) work(n int64, op string) error {
	if b == nil {
		return nil
	}
	if n < 0 || n > b.lim.Steps-b.steps {
		return &LimitError{Limit: "Steps", Max: b.lim.Steps, Op: op}
	}
	b.steps += n
	return nil
}

// scan charges the steps for going through n bytes.
func (b *budget) scan(n int, op string) error {
	return b.work(int64(n)/scanPerStep+1, op)
}

// runes charges the steps for per-character Unicode work on n bytes.
func (b *budget) runes(n int, op string) error {
	return b.work(int64(n)/runesPerStep+1, op)
}

// enter begins one level of evaluation nesting; leave ends it.
func (b *budget) enter(op string) error {
	if b.depth >= b.lim.Depth {
		return b.depthErr(op)
	}
	b.depth++
	return nil
}

func (b *budget) leave() { b.depth-- }

// maxDepth is the nesting limit for values and syntax.
func (b *budget) maxDepth() int {
	if b == nil {
		return DefaultDepth
	}
	return b.lim.Depth
}

func (b *budget) depthErr(op string) error {
	return &LimitError{Limit: "Depth", Max: int64(b.maxDepth()), Op: op}
}

// mulSat is a*b for a, b >= 0, or math.MaxInt64 when the product does not
// fit (a charge that can never be paid).
func mulSat(a, b int64) int64 {
	if a < 0 || b < 0 {
		return math.MaxInt64
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// addSat is a+b for a, b >= 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a < 0 || b < 0 || a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
