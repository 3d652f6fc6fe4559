// Package server is Tarfa's OpenAI-compatible HTTP server: the endpoints
// (GET /v1/models, POST /v1/chat/completions and /v1/completions, plain
// and server-sent events, GET /health, GET /metrics, GET
// /v1/attestations/{id}), authentication, request limits and graceful
// shutdown. Generation goes through a runner.Scheduler (continuous
// batching); package openai translates the bodies.
//
// # Attestation
//
// Every completion says what produced it. Response headers carry what is
// known when it starts — X-Tarfa-Mode (exact), X-Tarfa-Manifest-Root,
// X-Tarfa-Attestation (the response's id) — and, for a non-streamed
// response, what its own ledger recorded: X-Tarfa-Experts-Verified (the
// distinct routed experts its tokens were computed with, each verified
// against the manifest), X-Tarfa-Logits-Chain (the logits chain head) and
// X-Tarfa-Routing (the routing-trace digest). A streamed response carries
// the same facts in a "tarfa" member of its final chunks (clients do not
// see HTTP trailers). With a signing key, GET /v1/attestations/{id}
// returns the DSSE envelope of the response's run report, which `tarfa
// attest verify` checks offline or by replay.
//
// # Limits and shutdown
//
// HTTPServer bounds the time headers take to arrive; readBody bounds a
// body's size and time (413, 408). Shutdown drains: the listener stays
// open, new requests get 503 and /health "draining", the requests in
// flight finish; at its deadline the rest are cut, in bounded time
// (ShutdownError). docs/serve.md describes all of it for users.
package server

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tarfa-ai/tarfa/openai"
	"github.com/tarfa-ai/tarfa/runner"
)

// Attestation headers.
const (
	HeaderMode            = "X-Tarfa-Mode"
	HeaderManifestRoot    = "X-Tarfa-Manifest-Root"
	HeaderExpertsVerified = "X-Tarfa-Experts-Verified"
	HeaderLogitsChain     = "X-Tarfa-Logits-Chain"
	HeaderRouting         = "X-Tarfa-Routing"
	HeaderAttestation     = "X-Tarfa-Attestation"
)

// Defaults of Options.
const (
	DefaultMaxBody           = 1 << 20
	DefaultMaxTokens         = 256
	DefaultMaxAttestations   = 1024
	DefaultBodyTimeout       = 30 * time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
)

// cutGrace is how long Shutdown waits, once it has cut the requests left
// at its deadline, for their handlers to end (twice: before and after
// closing their connections).
const cutGrace = 5 * time.Second

// Options configures a Server.
type Options struct {
	// ModelName is the id of the one model served (GET /v1/models); a
	// request naming another model gets 404.
	ModelName string
	// APIKey, if set, is required as "Authorization: Bearer KEY" on every
	// endpoint but /health.
	APIKey string
	// MaxBody bounds a request body (default DefaultMaxBody); a larger one
	// gets 413.
	MaxBody int64
	// DefaultMaxTokens is the generation limit of a request that sets none
	// (default DefaultMaxTokens; never beyond the context).
	DefaultMaxTokens int
	// Signer, if set, signs every response's run report, served by GET
	// /v1/attestations/{id}; the last MaxAttestations (default
	// DefaultMaxAttestations) are kept.
	Signer          ed25519.PrivateKey
	MaxAttestations int
	// Logger receives one line per request (never prompts or outputs);
	// nil: none.
	Logger *slog.Logger
	// BodyTimeout bounds the time a request body takes to arrive once
	// its headers have (default DefaultBodyTimeout); a slower one gets
	// 408 and its connection is closed.
	BodyTimeout time.Duration
	// ReadHeaderTimeout bounds the time a request's headers take to
	// arrive and IdleTimeout how long a kept-alive connection waits for
	// the next request, in the http.Server that HTTPServer returns
	// (defaults DefaultReadHeaderTimeout, DefaultIdleTimeout).
	ReadHeaderTimeout, IdleTimeout time.Duration
}

// Server serves one model. Its handler answers 503 until Attach hands it
// the model and after Shutdown has begun.
type Server struct {
	opt     Options
	m       *metrics
	mux     *http.ServeMux
	state   atomic.Pointer[state]
	closing atomic.Bool
	created int64
	hs      *http.Server // HTTPServer's, if made
	// grace is cutGrace (shorter in tests).
	grace time.Duration

	// flightMu guards inFlight, the requests past ready (being read,
	// generated or written), and idle, closed when it drops to 0 once
	// closing is set.
	flightMu sync.Mutex
	inFlight int
	idle     chan struct{}

	attMu   sync.Mutex
	att     map[string][]byte
	attList []string

	// script, when set (by tests only), replaces the text of the tokens a
	// request generates: the n-th token reads as script[n], and what is
	// left of it comes at the end. The tokens, and all that is attested,
	// are the model's; only the text the response is built from is
	// scripted, so that tests can control what a noise model says.
	script []string
	// idScript, when set (by tests only), replaces the ids of the tokens a
	// request generates in what the response is built from: the n-th token
	// is read as idScript[n] (its text, and its logprobs' token, bytes and
	// text_offset), so that tests can serve chosen byte-level tokens. The
	// logprob values, and all that is attested, are the model's.
	idScript []int
}

// state is what Attach provides.
type state struct {
	r      *runner.Runner
	sched  *runner.Scheduler
	attest runner.AttestOptions
	root   string
	// tools is how the model's chat template writes tool calls (zero: it
	// writes none that can be parsed, and output is text).
	tools openai.ToolSyntax
}

// New returns a server that is not ready yet (Attach).
func New(opt Options) (*Server, error) {
	if opt.ModelName == "" {
		return nil, errors.New("server: no model name")
	}
	if opt.MaxBody == 0 {
		opt.MaxBody = DefaultMaxBody
	}
	if opt.DefaultMaxTokens == 0 {
		opt.DefaultMaxTokens = DefaultMaxTokens
	}
	if opt.MaxAttestations == 0 {
		opt.MaxAttestations = DefaultMaxAttestations
	}
	if opt.BodyTimeout == 0 {
		opt.BodyTimeout = DefaultBodyTimeout
	}
	if opt.ReadHeaderTimeout == 0 {
		opt.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if opt.IdleTimeout == 0 {
		opt.IdleTimeout = DefaultIdleTimeout
	}
	if opt.MaxBody < 1 || opt.DefaultMaxTokens < 1 || opt.MaxAttestations < 1 {
		return nil, fmt.Errorf("server: MaxBody %d, DefaultMaxTokens %d, MaxAttestations %d: want each at least 1", opt.MaxBody, opt.DefaultMaxTokens, opt.MaxAttestations)
	}
	if opt.BodyTimeout < 0 || opt.ReadHeaderTimeout < 0 || opt.IdleTimeout < 0 {
		return nil, fmt.Errorf("server: BodyTimeout %s, ReadHeaderTimeout %s, IdleTimeout %s: want each above 0", opt.BodyTimeout, opt.ReadHeaderTimeout, opt.IdleTimeout)
	}
	s := &Server{opt: opt, created: time.Now().Unix(), att: map[string][]byte{}, grace: cutGrace, idle: make(chan struct{})}
	s.m = newMetrics(s)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.Handle("GET /metrics", s.auth(s.m.handler()))
	mux.Handle("GET /v1/models", s.auth(s.ready(s.models)))
	mux.Handle("GET /v1/models/{id}", s.auth(s.ready(s.model)))
	mux.Handle("POST /v1/chat/completions", s.auth(s.ready(s.chat)))
	mux.Handle("POST /v1/completions", s.auth(s.ready(s.completions)))
	mux.Handle("GET /v1/attestations/{id}", s.auth(s.ready(s.attestation)))
	s.mux = mux
	return s, nil
}

// probeMethods are the methods a wrong-method answer looks for.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// route serves r through the mux; a path the mux has no pattern for is
// 404, and one it has only for other methods 405 with Allow, both as
// OpenAI errors.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	if _, pat := s.mux.Handler(r); pat != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	var allow []string
	for _, m := range probeMethods {
		if m == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pat := s.mux.Handler(probe); pat != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		writeError(w, openai.Errorf(http.StatusNotFound, "", "unknown_url", "%s %s: no such endpoint", r.Method, r.URL.Path))
		return
	}
	w.Header().Set("Allow", strings.Join(allow, ", "))
	writeError(w, openai.Errorf(http.StatusMethodNotAllowed, "", "method_not_allowed", "%s %s: method not allowed; this endpoint takes %s", r.Method, r.URL.Path, strings.Join(allow, " or ")))
}

// Attach makes the server ready: r's model, generating through sched;
// a holds the build and host facts (and load time) of the signed reports.
func (s *Server) Attach(r *runner.Runner, sched *runner.Scheduler, a runner.AttestOptions) {
	st := &state{r: r, sched: sched, attest: a, root: r.Checkpoint.Root().String()}
	if r.Tok != nil {
		if tpl, err := r.Tok.ChatTemplate(); err == nil {
			st.tools, _ = openai.DeriveToolSyntax(tpl.RenderJSON)
		}
	}
	s.state.Store(st)
	_, bytes := r.Engine.Loaded()
	s.m.verified.Add(float64(bytes))
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.route) }

// HTTPServer returns the http.Server to serve the handler with: its
// timeouts are those of Options, and Shutdown drains and closes it.
// errorLog may be nil.
func (s *Server) HTTPServer(errorLog *log.Logger) *http.Server {
	s.hs = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: s.opt.ReadHeaderTimeout, IdleTimeout: s.opt.IdleTimeout, ErrorLog: errorLog}
	return s.hs
}

// ShutdownError is what Shutdown returns when its deadline came before
// every request had been answered.
type ShutdownError struct {
	// Cut is how many requests were still in flight at the deadline;
	// they were ended (a stream with an error event) and their
	// connections closed. Stuck is how many of them had still not ended
	// after that (Shutdown waited 2 × its grace for them), and
	// SchedulerStuck says whether the scheduler's loop had not stopped
	// either (a step that did not return): the runner must then not be
	// closed, only the process ended.
	Cut, Stuck     int
	SchedulerStuck bool
	Err            error // the context's error
}

func (e *ShutdownError) Error() string {
	msg := fmt.Sprintf("%d in-flight %s cut", e.Cut, plural(e.Cut, "response was", "responses were"))
	if e.Stuck > 0 {
		msg += fmt.Sprintf("; %d still had not ended after their connections were closed", e.Stuck)
	}
	if e.SchedulerStuck {
		msg += "; the generation loop had not stopped"
	}
	return msg
}

func (e *ShutdownError) Unwrap() error { return e.Err }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Shutdown drains the server. It stops taking requests at once — every
// new one gets 503 (shutting_down, Retry-After) and /health says
// "draining" with 503, while the listener stays open and connections are
// no longer kept alive — and waits until the requests in flight (queued,
// generating or being written, streams included) have been answered or
// ctx is done. Then it closes the listener and the idle connections of
// the http.Server that HTTPServer made, and the scheduler, and returns
// nil.
//
// If ctx ends first, it cuts what is left: the scheduler ends every
// request (a stream ends with an error event), the connections are
// closed (a client that does not read, or sends its body slowly, is cut
// off too), and it returns a *ShutdownError, in bounded time even if a
// request or the scheduler's loop does not end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.flightMu.Lock()
	s.closing.Store(true)
	if s.inFlight == 0 {
		s.closeIdle()
	}
	s.flightMu.Unlock()
	if s.hs != nil {
		s.hs.SetKeepAlivesEnabled(false)
	}
	st := s.state.Load()
	drained := make(chan error, 1)
	go func() {
		if st == nil {
			drained <- nil
			return
		}
		drained <- st.sched.Drain(ctx)
	}()
	var err error
	select {
	case <-s.idle:
		err = <-drained
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil {
		if s.hs != nil {
			// Nothing is in flight: what is left are idle connections and
			// requests being answered 503; bounded by their timeouts.
			c, cancel := context.WithTimeout(context.Background(), s.grace)
			if s.hs.Shutdown(c) != nil {
				s.hs.Close()
			}
			cancel()
		}
		if st != nil {
			st.sched.Close()
		}
		return nil
	}
	// The deadline: cut the rest.
	se := &ShutdownError{Err: err, Cut: s.flying()}
	stopped := make(chan struct{})
	go func() {
		if st != nil {
			st.sched.Close()
		}
		close(stopped)
	}()
	wait := func() {
		t := time.NewTimer(s.grace)
		defer t.Stop()
		select {
		case <-s.idle:
		case <-t.C:
		}
	}
	wait() // the handlers write their error events
	if s.hs != nil {
		s.hs.Close()
	}
	wait()
	se.Stuck = s.flying()
	select {
	case <-stopped:
	case <-time.After(s.grace):
		se.SchedulerStuck = true
	}
	return se
}

// flying is the number of requests in flight.
func (s *Server) flying() int {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	return s.inFlight
}

// closeIdle closes idle once (flightMu held).
func (s *Server) closeIdle() {
	select {
	case <-s.idle:
	default:
		close(s.idle)
	}
}

// enter counts a request in flight unless the server is draining
// (false: answer 503).
func (s *Server) enter() bool {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.inFlight++
	return true
}

func (s *Server) leave() {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	if s.inFlight--; s.inFlight == 0 && s.closing.Load() {
		s.closeIdle()
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	status, code := "ok", http.StatusOK
	switch {
	case s.closing.Load():
		status, code = "draining", http.StatusServiceUnavailable
	case s.state.Load() == nil:
		status, code = "loading", http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	fmt.Fprintf(w, "{\"status\":%q}\n", status)
}

// auth checks the bearer key.
func (s *Server) auth(h http.Handler) http.Handler {
	if s.opt.APIKey == "" {
		return h
	}
	want := []byte("Bearer " + s.opt.APIKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tarfa"`)
			msg := "missing API key: send Authorization: Bearer KEY"
			if len(got) > 0 {
				msg = "incorrect API key"
			}
			s.m.request(r, http.StatusUnauthorized)
			writeError(w, openai.Errorf(http.StatusUnauthorized, "", "invalid_api_key", "%s", msg))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ready answers 503 while the model loads or the server shuts down.
func (s *Server) ready(h func(http.ResponseWriter, *http.Request, *state)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := s.state.Load()
		switch {
		case !s.enter():
			w.Header().Set("Retry-After", "5")
			w.Header().Set("Connection", "close")
			s.m.request(r, http.StatusServiceUnavailable)
			writeError(w, openai.Errorf(http.StatusServiceUnavailable, "", "shutting_down", "the server is shutting down: it finishes the responses in flight and takes no new requests"))
			return
		case st == nil:
			s.leave()
			w.Header().Set("Retry-After", "5")
			s.m.request(r, http.StatusServiceUnavailable)
			writeError(w, openai.Errorf(http.StatusServiceUnavailable, "", "not_ready", "the model is still being verified and loaded"))
			return
		}
		defer s.leave()
		h(w, r, st)
	})
}

func writeError(w http.ResponseWriter, e *openai.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	w.Write(append(e.Body(), '\n'))
}

func writeJSON(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// readBody reads a request body bounded in size (MaxBody) and in time
// (BodyTimeout).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *openai.Error) {
	rc := http.NewResponseController(w)
	// net/http clears the deadline once the body is read, when it starts
	// watching for a client that leaves (TestBodyTimeout pins that a
	// stream outlasting it is not cut).
	rc.SetReadDeadline(time.Now().Add(s.opt.BodyTimeout))
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opt.MaxBody))
	if err != nil {
		if mb := (*http.MaxBytesError)(nil); errors.As(err, &mb) {
			return nil, openai.Errorf(http.StatusRequestEntityTooLarge, "", "request_too_large", "the request body is larger than %d bytes", mb.Limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			w.Header().Set("Connection", "close")
			return nil, openai.Errorf(http.StatusRequestTimeout, "", "request_timeout", "the request body did not arrive within %s", s.opt.BodyTimeout)
		}
		return nil, openai.Errorf(http.StatusBadRequest, "", "invalid_body", "reading the request body: %v", err)
	}
	return b, nil
}

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// keep stores a signed report under id, dropping the oldest beyond the
// limit.
func (s *Server) keep(id string, env []byte) {
	s.attMu.Lock()
	defer s.attMu.Unlock()
	s.att[id] = env
	s.attList = append(s.attList, id)
	for len(s.attList) > s.opt.MaxAttestations {
		delete(s.att, s.attList[0])
		s.attList = s.attList[1:]
	}
}

func (s *Server) attestation(w http.ResponseWriter, r *http.Request, _ *state) {
	id := r.PathValue("id")
	if s.opt.Signer == nil {
		s.m.request(r, http.StatusNotFound)
		writeError(w, openai.Errorf(http.StatusNotFound, "id", "no_signing_key", "this server signs no reports: start tarfa serve with --key NAME"))
		return
	}
	s.attMu.Lock()
	env, ok := s.att[id]
	s.attMu.Unlock()
	if !ok {
		s.m.request(r, http.StatusNotFound)
		writeError(w, openai.Errorf(http.StatusNotFound, "id", "attestation_not_found", "no attestation %q (the server keeps the last %d)", id, s.opt.MaxAttestations))
		return
	}
	s.m.request(r, http.StatusOK)
	w.Header().Set("Content-Type", "application/json")
	w.Write(env)
}

func (s *Server) models(w http.ResponseWriter, r *http.Request, _ *state) {
	s.m.request(r, http.StatusOK)
	b, _ := jsonMarshal(openai.ModelList{Object: "list", Data: []openai.Model{s.modelEntry()}})
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) model(w http.ResponseWriter, r *http.Request, _ *state) {
	if id := r.PathValue("id"); id != s.opt.ModelName {
		s.m.request(r, http.StatusNotFound)
		writeError(w, s.unknownModel(id))
		return
	}
	s.m.request(r, http.StatusOK)
	b, _ := jsonMarshal(s.modelEntry())
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) modelEntry() openai.Model {
	return openai.Model{ID: s.opt.ModelName, Object: "model", Created: s.created, OwnedBy: "tarfa"}
}

func (s *Server) unknownModel(name string) *openai.Error {
	return openai.Errorf(http.StatusNotFound, "model", "model_not_found", "the model %q does not exist: this server runs %q", name, s.opt.ModelName)
}
