package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tarfa-ai/tarfa/attest"
	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/openai"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/tokenizer"
)

// writeTimeout bounds each write to a client: one that stops reading is
// cut, and its generation ends with the request.
const writeTimeout = 30 * time.Second

// Tarfa is the "tarfa" extension member of a response or of the final
// chunks of a stream: what produced it.
type Tarfa struct {
	Mode         string `json:"mode"`
	ManifestRoot string `json:"manifest_root"`
	// Attestation is the response's id; with Signed, GET
	// /v1/attestations/{id} returns its signed run report.
	Attestation string `json:"attestation"`
	Signed      bool   `json:"signed"`
	// ExpertsVerified counts the distinct routed experts the response's
	// tokens were computed with, each verified against the manifest:
	// when the server loaded it (resident experts) or when it was read
	// for this response.
	ExpertsVerified int `json:"experts_verified"`
	// BytesHashed is the bytes hashed for this response while it ran:
	// experts read from storage and verified on the way (an expert shared
	// within a batch step is hashed once, for one of the requests routed
	// to it). 0 does not mean unverified: with every expert resident,
	// each was verified when the server loaded it (the signed report's
	// load section), and nothing needs re-hashing per request.
	BytesHashed int64 `json:"bytes_hashed"`
	// BytesVerified is BytesHashed under its old name, kept for clients
	// that read it. Deprecated: read bytes_hashed.
	BytesVerified  int64  `json:"bytes_verified"`
	LogitsChain    string `json:"logits_chain"`
	Routing        string `json:"routing"`
	RoutingEntries int64  `json:"routing_entries"`
	// Seed is the sampling seed (drawn at random when the request set none
	// and sampled), so that the response can be reproduced.
	Seed uint64 `json:"seed"`
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request, st *state) {
	p := s.parse(w, r, openai.ParseChat)
	if p == nil {
		return
	}
	ids, _, err := st.r.EncodeChatTools(p.Messages, p.Tools)
	if err != nil {
		param := "messages"
		if len(p.Tools) > 0 && strings.Contains(err.Error(), "tools") {
			param = "tools"
		}
		s.fail(w, r, openai.Errorf(http.StatusBadRequest, param, "invalid_value", "%s: %v", param, err))
		return
	}
	s.generate(w, r, st, true, p, ids, "")
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request, st *state) {
	p := s.parse(w, r, openai.ParseCompletion)
	if p == nil {
		return
	}
	ids := p.PromptTokens
	var echo string
	if p.Prompt != nil {
		var err error
		if ids, err = st.r.EncodeText(*p.Prompt); err != nil {
			s.fail(w, r, openai.Errorf(http.StatusBadRequest, "prompt", "invalid_value", "prompt: %v", err))
			return
		}
		echo = *p.Prompt
	} else if p.Echo {
		echo = decodeAll(st.r.Tok, ids, false)
	}
	if len(ids) == 0 {
		s.fail(w, r, openai.Errorf(http.StatusBadRequest, "prompt", "invalid_value", "prompt: encodes to no tokens"))
		return
	}
	if !p.Echo {
		echo = ""
	}
	s.generate(w, r, st, false, p, ids, echo)
}

// parse reads the request's body and parses it with parseBody, and checks
// that it names the served model; on any error it answers the request and
// returns nil.
func (s *Server) parse(w http.ResponseWriter, r *http.Request, parseBody func([]byte) (*openai.Params, *openai.Error)) *openai.Params {
	body, e := s.readBody(w, r)
	if e != nil {
		s.fail(w, r, e)
		return nil
	}
	p, e := parseBody(body)
	if e == nil && p.Model != s.opt.ModelName {
		e = s.unknownModel(p.Model)
	}
	if e != nil {
		s.fail(w, r, e)
		return nil
	}
	return p
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, e *openai.Error) {
	s.m.request(r, e.Status)
	s.log(r, e.Status, "error", e.Message)
	writeError(w, e)
}

func (s *Server) log(r *http.Request, status int, args ...any) {
	if s.opt.Logger != nil {
		s.opt.Logger.Info("request", append([]any{"method", r.Method, "path", r.URL.Path, "status", status}, args...)...)
	}
}

// request turns checked parameters into a scheduler request.
func (s *Server) request(st *state, p *openai.Params, ids []int) (runner.Request, *openai.Error) {
	r := st.r
	param := "max_tokens"
	limit := r.MaxNewTokens(len(ids))
	if limit == 0 {
		return runner.Request{}, openai.Errorf(http.StatusBadRequest, "messages", "context_length_exceeded",
			"the prompt is %d tokens, more than the model's context of %d positions", len(ids), r.ContextLimit())
	}
	maxTokens := p.MaxTokens
	switch {
	case maxTokens == 0:
		maxTokens = min(s.opt.DefaultMaxTokens, limit)
	case maxTokens > limit:
		return runner.Request{}, openai.Errorf(http.StatusBadRequest, param, "context_length_exceeded",
			"%s: %d prompt tokens and max_tokens %d do not fit the model's context of %d positions (at most %d new tokens do)",
			param, len(ids), maxTokens, r.ContextLimit(), limit)
	}
	g := engine.GenOptions{MaxTokens: maxTokens, Stop: r.DefaultStops()}
	if p.Temperature > 0 {
		g.Temperature = float32(p.Temperature)
		if p.TopP < 1 {
			g.TopP = float32(p.TopP)
		}
		g.TopK = p.TopK
		if p.Seed != nil {
			g.Seed = *p.Seed
		} else {
			var b [8]byte
			rand.Read(b[:])
			g.Seed = binary.LittleEndian.Uint64(b[:]) >> 1 // fits the API's int64 seed
		}
	}
	req := runner.Request{Prompt: ids, Gen: g, Logprobs: p.Logprobs, TopLogprobs: p.TopLogprobs}
	if len(p.Stop) > 0 {
		req.StopAfter = stopAfter(r.Tok, p.Stop)
	}
	if err := st.sched.Check(&req); err != nil {
		if be := (*runner.BudgetError)(nil); errors.As(err, &be) {
			return req, openai.Errorf(http.StatusBadRequest, param, "context_length_exceeded", "%s: %v (the server's --kv-budget)", param, err)
		}
		return req, openai.Errorf(http.StatusBadRequest, "", "invalid_value", "%v", err)
	}
	return req, nil
}

// stopAfter ends a generation once its text (special tokens left out)
// contains one of stops; it keeps only the tail a stop can still end in.
func stopAfter(tok *tokenizer.Tokenizer, stops []string) func([]int) bool {
	if tok == nil {
		return nil
	}
	dec := tok.NewStreamDecoder()
	dec.SkipSpecial = true
	longest := 0
	for _, s := range stops {
		longest = max(longest, len(s))
	}
	var tail string
	return func(gen []int) bool {
		t, err := dec.Next(gen[len(gen)-1])
		if err != nil || t == "" {
			return false
		}
		tail += t
		for _, s := range stops {
			if strings.Contains(tail, s) {
				return true
			}
		}
		if cut := len(tail) - (longest - 1); cut > 0 {
			tail = tail[cut:]
		}
		return false
	}
}

// textOut assembles a response's text as tokens come: special tokens left
// out, a character split across tokens held back until it is complete
// (U+FFFD for what cannot become one), cut before the first stop sequence,
// and (streaming) holding back what could still become the start of one.
type textOut struct {
	tok     *tokenizer.Tokenizer
	dec     *tokenizer.StreamDecoder
	stops   []string
	hold    int
	pending []byte // appended to: a long response costs linear time
	stopped bool
	n       int      // tokens added (no tokenizer: ids as text)
	final   int      // bytes of text final so far (before any stop cut)
	script  []string // Server.script
}

func newTextOut(tok *tokenizer.Tokenizer, stops []string) *textOut {
	t := &textOut{tok: tok, stops: stops}
	if tok != nil {
		t.dec = tok.NewStreamDecoder()
		t.dec.SkipSpecial = true
	}
	for _, s := range stops {
		t.hold = max(t.hold, len(s)-1)
	}
	return t
}

// add adds token id and returns its text offset: the bytes of text that
// were final before it (a character split across tokens becomes final with
// the token that completes it, a byte that cannot be part of one with the
// token that shows it, as U+FFFD).
func (t *textOut) add(id int) int {
	off := t.final
	if t.stopped {
		return off
	}
	had := len(t.pending)
	if t.script != nil {
		if t.n < len(t.script) {
			t.pending = append(t.pending, t.script[t.n]...)
		}
	} else if t.dec == nil {
		if t.n > 0 {
			t.pending = append(t.pending, ' ')
		}
		t.pending = strconv.AppendInt(t.pending, int64(id), 10)
	} else if s, err := t.dec.Next(id); err == nil {
		t.pending = append(t.pending, s...)
	}
	t.n++
	t.final += len(t.pending) - had
	return off
}

// take returns the text that is final now; at the end, all of it.
func (t *textOut) take(end bool) string {
	if t.stopped {
		return ""
	}
	if end && t.script != nil {
		for ; t.n < len(t.script); t.n++ {
			t.pending = append(t.pending, t.script[t.n]...)
		}
	} else if end && t.dec != nil {
		t.pending = append(t.pending, t.dec.Flush()...)
	}
	first := -1
	for _, s := range t.stops {
		if i := bytes.Index(t.pending, []byte(s)); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first >= 0 {
		out := string(t.pending[:first])
		t.pending, t.stopped = nil, true
		return out
	}
	cut := len(t.pending)
	if !end {
		cut -= t.hold
		for cut > 0 && cut < len(t.pending) && !utf8.RuneStart(t.pending[cut]) {
			cut--
		}
		if cut <= 0 {
			return ""
		}
	}
	out := string(t.pending[:cut])
	t.pending = t.pending[cut:]
	return out
}

func decodeAll(tok *tokenizer.Tokenizer, ids []int, skipSpecial bool) string {
	if tok == nil {
		var b strings.Builder
		for i, id := range ids {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.Itoa(id))
		}
		return b.String()
	}
	var s string
	if skipSpecial {
		s, _ = tok.DecodeSkipSpecial(ids)
	} else {
		s, _ = tok.Decode(ids)
	}
	return s
}

// tokenText is one token's text for logprobs: its bytes as UTF-8, a
// byte that is not valid UTF-8 alone (a piece of a character split
// across tokens) as U+FFFD.
func tokenText(tok *tokenizer.Tokenizer, id int) string {
	if tok == nil {
		return strconv.Itoa(id)
	}
	s, _ := tok.Decode([]int{id})
	return s
}

// tokenBytes is the "bytes" of a token's logprobs: the bytes it stands
// for, raw (a byte-level piece of a character is that one byte, not the
// UTF-8 of U+FFFD), so that a client rebuilds the text by concatenating
// them.
func tokenBytes(tok *tokenizer.Tokenizer, id int) []int {
	if tok == nil {
		return openai.Bytes(strconv.Itoa(id))
	}
	b, err := tok.Bytes(id)
	if err != nil {
		return []int{}
	}
	return openai.RawBytes(b)
}

// finishReason is a choice's finish_reason: "tool_calls" once the
// response made a call (as vLLM has it, even when max_tokens cut what
// followed), else how the generation ended.
func finishReason(res runner.Result, out *textOut, calls int) string {
	if calls > 0 {
		return openai.FinishToolCalls
	}
	if out.stopped || res.StopReason == engine.StopToken || res.StopReason == runner.StopSequence {
		return openai.FinishStop
	}
	return openai.FinishLength
}

// chatLogprobs converts generated tokens' logprobs.
func chatLogprobs(tok *tokenizer.Tokenizer, toks []runner.Token) []openai.TokenLogprob {
	out := make([]openai.TokenLogprob, 0, len(toks))
	for _, t := range toks {
		e := openai.TokenLogprob{Token: tokenText(tok, t.ID), Logprob: openai.Logprob(t.Logprob), Bytes: tokenBytes(tok, t.ID), TopLogprobs: []openai.TopLogprob{}}
		for _, a := range t.Top {
			e.TopLogprobs = append(e.TopLogprobs, openai.TopLogprob{Token: tokenText(tok, a.ID), Logprob: openai.Logprob(a.Logprob), Bytes: tokenBytes(tok, a.ID)})
		}
		out = append(out, e)
	}
	return out
}

// completionLogprobs converts logprobs to the legacy completions form;
// offsets are the tokens' text offsets (textOut.add's, after any echo).
func completionLogprobs(tok *tokenizer.Tokenizer, toks []runner.Token, offsets []int) *openai.CompletionLogprobs {
	lp := &openai.CompletionLogprobs{Tokens: []string{}, TokenLogprobs: []float64{}, TopLogprobs: []map[string]float64{}, TextOffset: []int{}}
	for i, t := range toks[:min(len(toks), len(offsets))] {
		text := tokenText(tok, t.ID)
		lp.Tokens = append(lp.Tokens, text)
		lp.TokenLogprobs = append(lp.TokenLogprobs, openai.Logprob(t.Logprob))
		top := map[string]float64{}
		for _, a := range t.Top {
			if k := tokenText(tok, a.ID); top[k] == 0 {
				top[k] = openai.Logprob(a.Logprob)
			}
		}
		lp.TopLogprobs = append(lp.TopLogprobs, top)
		lp.TextOffset = append(lp.TextOffset, offsets[i])
	}
	return lp
}

// generate runs one request and writes the response, whole or streamed.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, st *state, chat bool, p *openai.Params, ids []int, echo string) {
	req, e := s.request(st, p, ids)
	if e != nil {
		s.fail(w, r, e)
		return
	}
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	id := newID(prefix)
	stream, err := st.sched.Submit(r.Context(), req)
	switch {
	case errors.Is(err, runner.ErrQueueFull):
		w.Header().Set("Retry-After", "1")
		s.fail(w, r, openai.Errorf(http.StatusTooManyRequests, "", "queue_full", "the server's request queue is full (%d waiting): retry later", st.sched.Options().MaxQueue))
		return
	case errors.Is(err, runner.ErrClosed):
		s.fail(w, r, openai.Errorf(http.StatusServiceUnavailable, "", "shutting_down", "the server is shutting down"))
		return
	case err != nil:
		s.fail(w, r, openai.Errorf(http.StatusBadRequest, "", "invalid_value", "%v", err))
		return
	}
	h := w.Header()
	h.Set(HeaderMode, st.r.Mode())
	h.Set(HeaderManifestRoot, st.root)
	h.Set(HeaderAttestation, id)
	out := newTextOut(st.r.Tok, p.Stop)
	out.script = s.script
	var syn openai.ToolSyntax
	if chat && len(p.Tools) > 0 && !p.NoTools {
		syn = st.tools
	}
	g := &gen{s: s, w: w, r: r, st: st, chat: chat, p: p, id: id, created: time.Now().Unix(), stream: stream,
		out: out, tools: openai.NewToolSplitter(syn, p.Tools), seed: req.Gen.Seed, echo: echo, start: time.Now()}
	if p.Stream {
		g.streamed()
	} else {
		g.whole()
	}
}

// gen is one response being written.
type gen struct {
	s       *Server
	w       http.ResponseWriter
	r       *http.Request
	st      *state
	chat    bool
	p       *openai.Params
	id      string
	created int64
	stream  *runner.Stream
	out     *textOut
	tools   *openai.ToolSplitter
	calls   int // tool calls sent
	seed    uint64
	echo    string
	start   time.Time
	read    int // tokens read through scripted
}

// finish signs the response's report (with a key), counts it and returns
// its tarfa member.
func (g *gen) finish(res runner.Result) (*Tarfa, error) {
	l := res.Ledger
	t := &Tarfa{Mode: l.Mode, ManifestRoot: g.st.root, Attestation: g.id, ExpertsVerified: len(l.Experts),
		BytesHashed: l.BytesHashed[jnf.BLAKE3], BytesVerified: l.BytesHashed[jnf.BLAKE3], LogitsChain: l.LogitsChain, Routing: l.RoutingDigest, RoutingEntries: l.RoutingEntries, Seed: g.seed}
	g.s.m.finished(res)
	if g.s.opt.Signer == nil {
		return t, nil
	}
	pred, err := g.st.r.ResponsePredicate(g.id, res, g.st.attest)
	if err != nil {
		return nil, fmt.Errorf("building the run report: %w", err)
	}
	env, err := attest.SignRun(g.s.opt.Signer, *pred)
	if err != nil {
		return nil, fmt.Errorf("signing the run report: %w", err)
	}
	b, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		return nil, err
	}
	g.s.keep(g.id, append(b, '\n'))
	t.Signed = true
	return t, nil
}

// endError maps the error a request ended with; nil when the client is
// gone (nothing to write).
func (g *gen) endError(err error) *openai.Error {
	switch {
	case g.r.Context().Err() != nil:
		return nil
	case errors.Is(err, runner.ErrClosed), g.s.closing.Load() && errors.Is(err, context.Canceled):
		// Closing the scheduler ends its requests with ErrClosed, or, for
		// those in the step it interrupts, with the step's cancellation.
		return openai.Errorf(http.StatusServiceUnavailable, "", "shutting_down", "the server shut down before the response was complete")
	default:
		return openai.Errorf(http.StatusInternalServerError, "", "generation_failed", "generation failed: %v", err)
	}
}

func (g *gen) whole() {
	var toks []runner.Token
	ctx := g.r.Context()
	for {
		ts, done, err := g.stream.Next(ctx)
		if err != nil {
			break
		}
		toks = append(toks, ts...)
		if done {
			break
		}
	}
	res, err := g.stream.Result(context.Background())
	if err != nil {
		if e := g.endError(err); e != nil {
			g.s.fail(g.w, g.r, e)
		} else {
			g.s.m.request(g.r, 499)
		}
		return
	}
	toks = g.scripted(toks)
	offsets := make([]int, 0, len(res.Tokens))
	for i, t := range res.Tokens {
		offsets = append(offsets, len(g.echo)+g.out.add(g.s.scriptID(i, t)))
	}
	text := g.out.take(true)
	tf, err := g.finish(res)
	if err != nil {
		g.s.fail(g.w, g.r, openai.Errorf(http.StatusInternalServerError, "", "attestation_failed", "%v", err))
		return
	}
	h := g.w.Header()
	h.Set(HeaderExpertsVerified, strconv.Itoa(tf.ExpertsVerified))
	h.Set(HeaderLogitsChain, tf.LogitsChain)
	h.Set(HeaderRouting, tf.Routing)
	usage := openai.NewUsage(res.PromptTokens, len(res.Tokens))
	var b []byte
	if g.chat {
		content, fcs := g.tools.Feed(text)
		rest, more := g.tools.Flush()
		content, fcs = content+rest, append(fcs, more...)
		msg := openai.ChatMessage{Role: "assistant", Content: &content, ToolCalls: g.toolCalls(fcs)}
		if len(fcs) > 0 && content == "" {
			msg.Content = nil
		}
		c := openai.ChatChoice{Message: msg, FinishReason: finishReason(res, g.out, len(fcs))}
		if g.p.Logprobs {
			c.Logprobs = &openai.ChatLogprobs{Content: chatLogprobs(g.st.r.Tok, toks), Refusal: nil}
		}
		b, _ = jsonMarshal(openai.ChatCompletion{ID: g.id, Object: "chat.completion", Created: g.created, Model: g.s.opt.ModelName,
			SystemFingerprint: fingerprint(g.st), Choices: []openai.ChatChoice{c}, Usage: usage, Tarfa: tf})
	} else {
		reason := finishReason(res, g.out, 0)
		c := openai.CompletionChoice{Text: g.echo + text, FinishReason: &reason}
		if g.p.Logprobs {
			c.Logprobs = completionLogprobs(g.st.r.Tok, toks, offsets)
		}
		b, _ = jsonMarshal(openai.Completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.s.opt.ModelName,
			SystemFingerprint: fingerprint(g.st), Choices: []openai.CompletionChoice{c}, Usage: usage, Tarfa: tf})
	}
	g.s.m.request(g.r, http.StatusOK)
	g.s.log(g.r, http.StatusOK, "id", g.id, "prompt_tokens", res.PromptTokens, "completion_tokens", len(res.Tokens))
	writeJSON(g.w, http.StatusOK, b)
}

// toolCalls gives calls their ids and places: call_<response id>_<n>,
// counting on from the calls already sent.
func (g *gen) toolCalls(fcs []openai.FunctionCall) []openai.ToolCall {
	var out []openai.ToolCall
	for _, fc := range fcs {
		out = append(out, openai.ToolCall{ID: fmt.Sprintf("call_%s_%d", strings.TrimPrefix(g.id, "chatcmpl-"), g.calls), Type: "function", Function: fc})
		g.calls++
	}
	return out
}

// toolDeltas is toolCalls as delta.tool_calls entries.
func (g *gen) toolDeltas(fcs []openai.FunctionCall) []openai.ToolCallDelta {
	first := g.calls
	var out []openai.ToolCallDelta
	for i, c := range g.toolCalls(fcs) {
		out = append(out, openai.ToolCallDelta{Index: first + i, ID: c.ID, Type: c.Type, Function: c.Function})
	}
	return out
}

// scriptID is the id the response reads for its n-th generated token id
// (Server.idScript).
func (s *Server) scriptID(n, id int) int {
	if n < len(s.idScript) {
		return s.idScript[n]
	}
	return id
}

// scripted is toks with their ids read through Server.idScript, counting
// on from the tokens already read.
func (g *gen) scripted(toks []runner.Token) []runner.Token {
	if g.s.idScript == nil {
		return toks
	}
	out := make([]runner.Token, len(toks))
	for i, t := range toks {
		t.ID = g.s.scriptID(g.read+i, t.ID)
		out[i] = t
	}
	g.read += len(toks)
	return out
}

// fingerprint is system_fingerprint: the mode and the model root.
func fingerprint(st *state) string {
	return "tarfa-exact-" + st.r.Checkpoint.Root().Short()
}

func (g *gen) streamed() {
	h := g.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	g.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(g.w)
	send := func(v any) bool {
		b, err := jsonMarshal(v)
		if err != nil {
			return false
		}
		rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := fmt.Fprintf(g.w, "data: %s\n\n", b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	fp := fingerprint(g.st)
	chunk := func(text *string, calls []openai.ToolCallDelta, lp []runner.Token, offsets []int, reason *string, tf *Tarfa) any {
		var ext any // no "tarfa": null on the chunks before the last
		if tf != nil {
			ext = tf
		}
		if g.chat {
			c := openai.ChunkChoice{Delta: openai.ChatDelta{Content: text, ToolCalls: calls}, FinishReason: reason}
			if g.p.Logprobs && len(lp) > 0 {
				c.Logprobs = &openai.ChatLogprobs{Content: chatLogprobs(g.st.r.Tok, lp)}
			}
			return openai.ChatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.s.opt.ModelName,
				SystemFingerprint: fp, Choices: []openai.ChunkChoice{c}, Tarfa: ext}
		}
		c := openai.CompletionChoice{FinishReason: reason}
		if text != nil {
			c.Text = *text
		}
		if g.p.Logprobs && len(lp) > 0 {
			c.Logprobs = completionLogprobs(g.st.r.Tok, lp, offsets)
		}
		return openai.Completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.s.opt.ModelName,
			SystemFingerprint: fp, Choices: []openai.CompletionChoice{c}, Tarfa: ext}
	}
	if g.chat {
		empty := ""
		c := openai.ChatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.s.opt.ModelName,
			SystemFingerprint: fp, Choices: []openai.ChunkChoice{{Delta: openai.ChatDelta{Role: "assistant", Content: &empty}}}}
		if !send(c) {
			return
		}
	} else if g.echo != "" {
		if !send(chunk(&g.echo, nil, nil, nil, nil, nil)) {
			return
		}
	}
	ctx := g.r.Context()
	for {
		toks, done, err := g.stream.Next(ctx)
		if err != nil {
			g.s.m.request(g.r, 499)
			return // the client is gone; the scheduler drops the request
		}
		if done {
			break
		}
		toks = g.scripted(toks)
		offsets := make([]int, 0, len(toks))
		for _, t := range toks {
			offsets = append(offsets, len(g.echo)+g.out.add(t.ID))
		}
		text := g.out.take(false)
		var calls []openai.ToolCallDelta
		if g.chat {
			var fcs []openai.FunctionCall
			text, fcs = g.tools.Feed(text)
			calls = g.toolDeltas(fcs)
		}
		if text == "" && len(calls) == 0 && !g.p.Logprobs {
			continue
		}
		var tp *string
		if text != "" || (g.chat && len(calls) == 0) {
			tp = &text
		}
		if !send(chunk(tp, calls, toks, offsets, nil, nil)) {
			g.s.m.request(g.r, 499)
			return
		}
	}
	res, err := g.stream.Result(context.Background())
	if err != nil {
		if e := g.endError(err); e != nil {
			g.s.m.request(g.r, e.Status)
			send(json.RawMessage(e.Body()))
		}
		return
	}
	tf, err := g.finish(res)
	if err != nil {
		e := openai.Errorf(http.StatusInternalServerError, "", "attestation_failed", "%v", err)
		g.s.m.request(g.r, e.Status)
		send(json.RawMessage(e.Body()))
		return
	}
	text := g.out.take(true)
	var calls []openai.ToolCallDelta
	if g.chat {
		a, fcs := g.tools.Feed(text)
		b, more := g.tools.Flush()
		text, calls = a+b, g.toolDeltas(append(fcs, more...))
	}
	if text != "" || len(calls) > 0 {
		var tp *string
		if text != "" {
			tp = &text
		}
		if !send(chunk(tp, calls, nil, nil, nil, nil)) {
			return
		}
	}
	reason := finishReason(res, g.out, g.calls)
	var final any
	if g.chat {
		final = openai.ChatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.s.opt.ModelName,
			SystemFingerprint: fp, Choices: []openai.ChunkChoice{{Delta: openai.ChatDelta{}, FinishReason: &reason}}, Tarfa: tf}
	} else {
		final = chunk(nil, nil, nil, nil, &reason, tf)
	}
	if !send(final) {
		return
	}
	if g.p.IncludeUsage {
		usage := openai.NewUsage(res.PromptTokens, len(res.Tokens))
		var u any
		if g.chat {
			u = openai.ChatChunk{ID: g.id, Object: "chat.completion.chunk", Created: g.created, Model: g.s.opt.ModelName,
				SystemFingerprint: fp, Choices: []openai.ChunkChoice{}, Usage: usage, Tarfa: tf}
		} else {
			u = openai.Completion{ID: g.id, Object: "text_completion", Created: g.created, Model: g.s.opt.ModelName,
				SystemFingerprint: fp, Choices: []openai.CompletionChoice{}, Usage: usage, Tarfa: tf}
		}
		if !send(u) {
			return
		}
	}
	rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	fmt.Fprint(g.w, "data: [DONE]\n\n")
	rc.Flush()
	g.s.m.request(g.r, http.StatusOK)
	g.s.log(g.r, http.StatusOK, "id", g.id, "prompt_tokens", res.PromptTokens, "completion_tokens", len(res.Tokens), "stream", true)
}

// jsonMarshal is json.Marshal without HTML escaping (text is text).
func jsonMarshal(v any) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(strings.TrimSuffix(b.String(), "\n")), nil
}
