// Package trace is the routing trace of a run: which experts every MoE
// layer of every token used, in the order the engine ran them. The engine
// records one (tarfa run --trace FILE: source "measured"); the synthetic
// generator ([Synthesize]) makes skewed ones for models whose routing has
// no locality to measure (random weights): source "synthetic". The source
// travels in the header and every consumer (tarfa sim, BENCHMARKS.md) shows
// it.
//
// # Format (version 1)
//
// A trace is JSON Lines (UTF-8, one JSON object per line, each line ending
// in "\n", no blank lines, at most MaxLineBytes bytes a line). The first
// line is the header:
//
//	{"format":"tarfa-routing-trace","version":1,
//	 "model_root":"sha256:…",        // the manifest root; "" only for synthetic traces
//	 "layers":48,"experts":256,"top_k":8,
//	 "expert_bytes":18874368,        // optional: one routed expert's bytes (measured traces)
//	 "source":"measured",            // or "synthetic"
//	 "generator":{…},                // synthetic only: the Generator parameters
//	 "note":"…"}                     // optional, free text
//
// Every other line is the routing of one MoE layer of one token:
//
//	{"token":0,"layer":0,"experts":[17,3,250,…]}
//
// with exactly top_k distinct experts, each in [0, experts), in the router's
// order. Lines come token by token (0, 1, 2, … without gaps), and within a
// token layer by layer (0 … layers−1, each once): a trace holds only whole
// tokens. Layer numbers count MoE layers in execution order. Prompt tokens
// appear as tokens like the generated ones, one after the other.
//
// The reader is strict: every key spelled exactly, none unknown, none
// duplicated, none missing ([jnf.DecodeJSON] plus the checks above), and
// every error names the line.
package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/tarfa-ai/tarfa/jnf"
)

// Format and Version identify the trace format in the header.
const (
	Format  = "tarfa-routing-trace"
	Version = 1
)

// Limits of a trace, checked when reading and writing.
const (
	MaxLineBytes = 1 << 16
	MaxLayers    = 1024
	MaxExperts   = 1 << 16
	MaxTopK      = 1024
	// MaxExpertBytes bounds a header's expert_bytes.
	MaxExpertBytes = 1 << 40
)

// Source says where a trace's routing came from.
type Source string

const (
	// Measured: recorded from a real model by the engine.
	Measured Source = "measured"
	// Synthetic: drawn by a generator (see Generator).
	Synthetic Source = "synthetic"
)

// Header is a trace's first line.
type Header struct {
	Format    string `json:"format"`
	Version   int    `json:"version"`
	ModelRoot string `json:"model_root"`
	Layers    int    `json:"layers"`
	Experts   int    `json:"experts"`
	TopK      int    `json:"top_k"`
	// ExpertBytes is the size of one routed expert of the model (0:
	// not recorded), so that a projection of the trace uses its model's.
	ExpertBytes int64      `json:"expert_bytes,omitempty"`
	Source      Source     `json:"source"`
	Generator   *Generator `json:"generator,omitempty"`
	Note        string     `json:"note,omitempty"`
}

// Check validates h: format and version, sizes within the limits, the model
// root a digest (or empty for synthetic traces), and a generator exactly
// when the source is synthetic.
func (h *Header) Check() error {
	if h.Format != Format {
		return fmt.Errorf("format %q, want %q", h.Format, Format)
	}
	if h.Version != Version {
		return fmt.Errorf("version %d, want %d", h.Version, Version)
	}
	if h.Layers < 1 || h.Layers > MaxLayers {
		return fmt.Errorf("layers %d: want 1 to %d", h.Layers, MaxLayers)
	}
	if h.Experts < 1 || h.Experts > MaxExperts {
		return fmt.Errorf("experts %d: want 1 to %d", h.Experts, MaxExperts)
	}
	if h.TopK < 1 || h.TopK > min(MaxTopK, h.Experts) {
		return fmt.Errorf("top_k %d: want 1 to %d", h.TopK, min(MaxTopK, h.Experts))
	}
	if h.ExpertBytes < 0 || h.ExpertBytes > MaxExpertBytes {
		return fmt.Errorf("expert_bytes %d: want 1 to %d (or no expert_bytes)", h.ExpertBytes, int64(MaxExpertBytes))
	}
	switch h.Source {
	case Measured:
		if h.Generator != nil {
			return fmt.Errorf("a measured trace has no generator")
		}
		if h.ModelRoot == "" {
			return fmt.Errorf("a measured trace needs its model_root")
		}
	case Synthetic:
		if h.Generator == nil {
			return fmt.Errorf("a synthetic trace needs its generator parameters")
		}
		if err := h.Generator.Check(); err != nil {
			return fmt.Errorf("generator: %w", err)
		}
	default:
		return fmt.Errorf("source %q: want %q or %q", h.Source, Measured, Synthetic)
	}
	if h.ModelRoot != "" {
		if _, err := jnf.ParseDigest(h.ModelRoot); err != nil {
			return fmt.Errorf("model_root: %w", err)
		}
	}
	return nil
}

// Label is how a trace is named in output: its source first, e.g.
// "synthetic zipf(s=0.8, reuse=0.5, shift=0, seed=1, stream=1)" or
// "measured sha256:0123456789ab…".
func (h *Header) Label() string {
	if h.Source == Synthetic && h.Generator != nil {
		return "synthetic " + h.Generator.String()
	}
	r := h.ModelRoot
	if len(r) > 19 {
		r = r[:19] + "…"
	}
	return string(h.Source) + " " + r
}

// Record is the routing of one MoE layer of one token.
type Record struct {
	Token, Layer int
	Experts      []int
}

// checker enforces the record order and contents shared by Reader and Writer.
type checker struct {
	h            Header
	token, layer int // next expected
	seen         []uint32
	gen          uint32
}

func newChecker(h Header) *checker {
	return &checker{h: h, seen: make([]uint32, h.Experts)}
}

func (c *checker) check(token, layer int, experts []int) error {
	if token != c.token || layer != c.layer {
		return fmt.Errorf("token %d layer %d out of order: want token %d layer %d", token, layer, c.token, c.layer)
	}
	if len(experts) != c.h.TopK {
		return fmt.Errorf("token %d layer %d: %d experts, want top_k = %d", token, layer, len(experts), c.h.TopK)
	}
	c.gen++
	if c.gen == 0 {
		clear(c.seen)
		c.gen = 1
	}
	for _, e := range experts {
		if e < 0 || e >= c.h.Experts {
			return fmt.Errorf("token %d layer %d: expert %d out of range [0, %d)", token, layer, e, c.h.Experts)
		}
		if c.seen[e] == c.gen {
			return fmt.Errorf("token %d layer %d: expert %d twice", token, layer, e)
		}
		c.seen[e] = c.gen
	}
	if c.layer++; c.layer == c.h.Layers {
		c.layer = 0
		c.token++
	}
	return nil
}

// whole reports whether the records so far make whole tokens.
func (c *checker) whole() error {
	if c.layer != 0 {
		return fmt.Errorf("trace ends inside token %d, after layer %d of %d", c.token, c.layer-1, c.h.Layers)
	}
	return nil
}

// Reader reads a trace line by line, in memory bounded by MaxLineBytes and
// the header's sizes.
type Reader struct {
	br   *bufio.Reader
	line int
	h    Header
	c    *checker
	err  error
}

// NewReader reads and checks the header.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{br: bufio.NewReaderSize(r, MaxLineBytes)}
	b, err := rd.readLine()
	if err == io.EOF {
		return nil, fmt.Errorf("trace: empty (no header line)")
	}
	if err != nil {
		return nil, err
	}
	var raw struct {
		Format      *string       `json:"format"`
		Version     *int          `json:"version"`
		ModelRoot   *string       `json:"model_root"`
		Layers      *int          `json:"layers"`
		Experts     *int          `json:"experts"`
		TopK        *int          `json:"top_k"`
		ExpertBytes *int64        `json:"expert_bytes"`
		Source      *Source       `json:"source"`
		Generator   *rawGenerator `json:"generator"`
		Note        *string       `json:"note"`
	}
	if err := jnf.DecodeJSON(b, &raw); err != nil {
		return nil, rd.errf("header: %w", err)
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{{"format", raw.Format != nil}, {"version", raw.Version != nil}, {"model_root", raw.ModelRoot != nil},
		{"layers", raw.Layers != nil}, {"experts", raw.Experts != nil}, {"top_k", raw.TopK != nil}, {"source", raw.Source != nil}} {
		if !f.ok {
			return nil, rd.errf("header: missing %q", f.name)
		}
	}
	rd.h = Header{Format: *raw.Format, Version: *raw.Version, ModelRoot: *raw.ModelRoot, Layers: *raw.Layers,
		Experts: *raw.Experts, TopK: *raw.TopK, Source: *raw.Source}
	if raw.Generator != nil {
		g, err := raw.Generator.generator()
		if err != nil {
			return nil, rd.errf("header: generator: %w", err)
		}
		rd.h.Generator = &g
	}
	if raw.Note != nil {
		rd.h.Note = *raw.Note
	}
	if raw.ExpertBytes != nil {
		if *raw.ExpertBytes <= 0 {
			return nil, rd.errf("header: expert_bytes %d: want 1 to %d (or no expert_bytes)", *raw.ExpertBytes, int64(MaxExpertBytes))
		}
		rd.h.ExpertBytes = *raw.ExpertBytes
	}
	if err := rd.h.Check(); err != nil {
		return nil, rd.errf("header: %w", err)
	}
	rd.c = newChecker(rd.h)
	return rd, nil
}

func (r *Reader) errf(format string, a ...any) error {
	return fmt.Errorf("trace: line %d: %w", r.line, fmt.Errorf(format, a...))
}

// readLine returns the next line without its "\n"; io.EOF at a clean end.
func (r *Reader) readLine() ([]byte, error) {
	b, err := r.br.ReadSlice('\n')
	switch {
	case err == nil:
	case errors.Is(err, bufio.ErrBufferFull):
		r.line++
		return nil, r.errf("longer than %d bytes", MaxLineBytes)
	case err == io.EOF && len(b) == 0:
		return nil, io.EOF
	case err == io.EOF:
		r.line++
		return nil, r.errf("no newline at the end of the line (truncated file?)")
	default:
		return nil, fmt.Errorf("trace: after line %d: %w", r.line, err)
	}
	r.line++
	b = b[:len(b)-1]
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, r.errf("blank line")
	}
	return b, nil
}

// rawGenerator is Generator with every field required.
type rawGenerator struct {
	Name   *string  `json:"name"`
	S      *float64 `json:"s"`
	Reuse  *float64 `json:"reuse"`
	Shift  *int     `json:"shift"`
	Seed   *uint64  `json:"seed"`
	Stream *uint64  `json:"stream"`
}

func (r *rawGenerator) generator() (Generator, error) {
	for _, f := range []struct {
		name string
		ok   bool
	}{{"name", r.Name != nil}, {"s", r.S != nil}, {"reuse", r.Reuse != nil}, {"shift", r.Shift != nil}, {"seed", r.Seed != nil}, {"stream", r.Stream != nil}} {
		if !f.ok {
			return Generator{}, fmt.Errorf("missing %q", f.name)
		}
	}
	return Generator{Name: *r.Name, S: *r.S, Reuse: *r.Reuse, Shift: *r.Shift, Seed: *r.Seed, Stream: *r.Stream}, nil
}

// Header is the trace's header.
func (r *Reader) Header() Header { return r.h }

// Next returns the next record, or io.EOF after the last whole token.
func (r *Reader) Next() (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	rec, err := r.next()
	if err != nil {
		r.err = err
	}
	return rec, err
}

func (r *Reader) next() (Record, error) {
	b, err := r.readLine()
	if err == io.EOF {
		if werr := r.c.whole(); werr != nil {
			return Record{}, fmt.Errorf("trace: line %d: %w", r.line, werr)
		}
		return Record{}, io.EOF
	}
	if err != nil {
		return Record{}, err
	}
	var raw struct {
		Token   *int  `json:"token"`
		Layer   *int  `json:"layer"`
		Experts []int `json:"experts"`
	}
	if err := jnf.DecodeJSON(b, &raw); err != nil {
		return Record{}, r.errf("%w", err)
	}
	switch {
	case raw.Token == nil:
		return Record{}, r.errf("missing \"token\"")
	case raw.Layer == nil:
		return Record{}, r.errf("missing \"layer\"")
	case raw.Experts == nil:
		return Record{}, r.errf("missing \"experts\"")
	}
	if err := r.c.check(*raw.Token, *raw.Layer, raw.Experts); err != nil {
		return Record{}, r.errf("%w", err)
	}
	return Record{Token: *raw.Token, Layer: *raw.Layer, Experts: raw.Experts}, nil
}

// Trace is a whole trace in memory: the header and the experts of every
// (token, layer), top_k each.
type Trace struct {
	Header  Header
	tokens  int
	experts []int32
}

// New returns an empty trace with header h (checked).
func New(h Header) (*Trace, error) {
	if err := h.Check(); err != nil {
		return nil, fmt.Errorf("trace: header: %w", err)
	}
	return &Trace{Header: h}, nil
}

// Tokens is the number of whole tokens.
func (t *Trace) Tokens() int { return t.tokens }

// Step returns the experts of layer of token (shared; do not modify).
func (t *Trace) Step(token, layer int) []int32 {
	i := (token*t.Header.Layers + layer) * t.Header.TopK
	return t.experts[i : i+t.Header.TopK : i+t.Header.TopK]
}

// Append adds one whole token: the experts of each layer in order.
func (t *Trace) Append(token [][]int) error {
	if len(token) != t.Header.Layers {
		return fmt.Errorf("trace: token %d has %d layers, want %d", t.tokens, len(token), t.Header.Layers)
	}
	c := newChecker(t.Header)
	c.token = t.tokens
	for l, set := range token {
		if err := c.check(t.tokens, l, set); err != nil {
			return fmt.Errorf("trace: %w", err)
		}
	}
	for _, set := range token {
		for _, e := range set {
			t.experts = append(t.experts, int32(e))
		}
	}
	t.tokens++
	return nil
}

// Truncate keeps the first n tokens.
func (t *Trace) Truncate(n int) {
	if n < t.tokens {
		t.tokens = n
		t.experts = t.experts[:n*t.Header.Layers*t.Header.TopK]
	}
}

// ReadAll reads a whole trace of at most maxTokens tokens.
func ReadAll(r io.Reader, maxTokens int) (*Trace, error) {
	rd, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	t := &Trace{Header: rd.Header()}
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return t, nil
		}
		if err != nil {
			return nil, err
		}
		if rec.Token >= maxTokens {
			return nil, fmt.Errorf("trace: line %d: more than %d tokens (the limit)", rd.line, maxTokens)
		}
		for _, e := range rec.Experts {
			t.experts = append(t.experts, int32(e))
		}
		if rec.Layer == t.Header.Layers-1 {
			t.tokens++
		}
	}
}

// Writer writes a trace, enforcing the same rules as the Reader.
type Writer struct {
	bw  *bufio.Writer
	c   *checker
	buf []byte
	err error
}

// NewWriter checks h and writes it as the header line.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	if err := h.Check(); err != nil {
		return nil, fmt.Errorf("trace: header: %w", err)
	}
	b, err := marshalHeader(h)
	if err != nil {
		return nil, err
	}
	wr := &Writer{bw: bufio.NewWriter(w), c: newChecker(h)}
	if _, err := wr.bw.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	return wr, nil
}

// Write appends the routing of one layer of one token.
func (w *Writer) Write(token, layer int, experts []int) error {
	if w.err != nil {
		return w.err
	}
	if err := w.c.check(token, layer, experts); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	b := append(w.buf[:0], `{"token":`...)
	b = strconv.AppendInt(b, int64(token), 10)
	b = append(b, `,"layer":`...)
	b = strconv.AppendInt(b, int64(layer), 10)
	b = append(b, `,"experts":[`...)
	for i, e := range experts {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(e), 10)
	}
	b = append(b, "]}\n"...)
	w.buf = b
	if len(b) > MaxLineBytes {
		return fmt.Errorf("trace: token %d layer %d: line of %d bytes exceeds %d", token, layer, len(b), MaxLineBytes)
	}
	if _, err := w.bw.Write(b); err != nil {
		w.err = fmt.Errorf("trace: %w", err)
	}
	return w.err
}

// Close flushes the trace; it is an error if the last token is incomplete.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	if err := w.c.whole(); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}

// WriteTo writes t in the trace format.
func (t *Trace) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	wr, err := NewWriter(cw, t.Header)
	if err != nil {
		return cw.n, err
	}
	ex := make([]int, t.Header.TopK)
	for tok := range t.tokens {
		for l := range t.Header.Layers {
			for i, e := range t.Step(tok, l) {
				ex[i] = int(e)
			}
			if err := wr.Write(tok, l, ex); err != nil {
				return cw.n, err
			}
		}
	}
	err = wr.Close()
	return cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
