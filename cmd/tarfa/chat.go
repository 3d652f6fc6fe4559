package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tarfa-ai/tarfa/openai"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/server"
)

type chatOptions struct {
	model, url, apiKeyFile, system string
	threads, maxTokens             int
	temperature                    float64
	seed                           int64
	tier                           tierFlags
}

func newChatCommand() *cobra.Command {
	var o chatOptions
	cmd := &cobra.Command{
		Use:   "chat [--model DIR | --url URL]",
		Short: "Chat in the terminal with the exact model, local or served",
		Long: `Chat is a terminal chat with a local model (--model DIR; default: the embedded
default model; no server needed) or with a running tarfa serve (--url, e.g.
http://127.0.0.1:8089). It speaks the OpenAI API in both cases — a local model is
served in-process, without a socket — so it shows what any client of tarfa serve
sees: the reply streams as it is generated, the conversation goes through the
model's chat template turn by turn, and every reply ends with a line stating the
mode (exact), its tokens and speed, the routed experts its tokens were computed
with (each verified against the manifest) and its logits chain.

On a terminal, lines can be edited (arrows, Ctrl-A/E/K/U/W) and earlier lines
recalled (up, down). Ctrl-C during a reply stops the generation and keeps the
session; Ctrl-D (or Ctrl-C) at the prompt, or /quit, leaves. Commands:

  /reset        forget the conversation (the system turn stays)
  /system TEXT  set the system turn (empty: none) and forget the conversation
  /stats        tokens per second, experts verified, expert uses by tier
  /help         this list

` + exitStatuses,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if o.url != "" && cmd.Flags().Changed("model") {
				return errors.New("give --model DIR or --url URL, not both")
			}
			if err := threadsFlag(o.threads); err != nil {
				return err
			}
			if _, err := o.tier.options(); err != nil {
				return err
			}
			if err := checkRange("max-tokens", o.maxTokens, 1, 1<<20); err != nil {
				return err
			}
			if err := finiteFlag("temperature", o.temperature, 0, 2, "0 = greedy"); err != nil {
				return err
			}
			if o.seed < 0 {
				return fmt.Errorf("--seed %d: want 0 or more", o.seed)
			}
			if o.url != "" && !strings.HasPrefix(o.url, "http://") && !strings.HasPrefix(o.url, "https://") {
				return fmt.Errorf("--url %q: want http://HOST:PORT or https://…", o.url)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return runChat(cmd, &o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.model, "model", "", "JNF model directory (default: the embedded default model)")
	f.StringVar(&o.url, "url", "", "chat with a running tarfa serve at this URL instead of a local model")
	f.StringVar(&o.apiKeyFile, "api-key-file", "", "with --url: file holding the server's API key")
	f.StringVar(&o.system, "system", "", "a system turn before the conversation")
	f.IntVar(&o.threads, "threads", 0, fmt.Sprintf("CPU threads of a local model, 0 (all cores) to %d", maxThreads))
	f.IntVar(&o.maxTokens, "max-tokens", 256, "most tokens per reply (a local model: never beyond its context; with --url: the server's default unless given)")
	f.Float64Var(&o.temperature, "temperature", 0, "sampling temperature (0 = greedy)")
	f.Int64Var(&o.seed, "seed", 0, "sampling seed (with --temperature)")
	o.tier.add(cmd)
	return cmd
}

// chatSession is one conversation. It speaks the OpenAI API over plain
// net/http with the server's own wire types (package openai): the SDK
// (github.com/openai/openai-go) is only the tests' oracle client, so
// building tarfa does not compile it.
type chatSession struct {
	hc     *http.Client
	base   string
	apiKey string
	model  string
	o      *chatOptions
	// sendMax: send max_tokens (--max-tokens given with --url); a local
	// server has it as its default, which it cuts to the context.
	sendMax bool
	out     io.Writer
	system  string
	history []chatTurn

	// totals and the last reply, for /stats
	replies, tokens int
	seconds         float64
	last            server.Tarfa
	lastTokS        float64
	lastMode        string
	banner          string // the mode line of the banner
}

// prompt is the input prompt, labelled with the mode of the last reply
// (of the local model before any).
func (s *chatSession) prompt() string {
	if s.lastMode == "" {
		return "you> "
	}
	return "[" + s.lastMode + "] you> "
}

func runChat(cmd *cobra.Command, o *chatOptions) error {
	out, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	s := &chatSession{o: o, out: out, system: o.system}
	if o.url != "" {
		s.base, s.hc = strings.TrimSuffix(o.url, "/"), &http.Client{}
		s.sendMax = cmd.Flags().Changed("max-tokens")
		if o.apiKeyFile != "" {
			k, err := readAPIKey(o.apiKeyFile)
			if err != nil {
				return err
			}
			s.apiKey = k
		}
	} else {
		if o.apiKeyFile != "" {
			return errors.New("--api-key-file applies to --url (a local model needs no key)")
		}
		r, load, err := openRunner(cmd, o.model, o.threads, &o.tier)
		if err != nil {
			return err
		}
		defer r.Close()
		sched, err := runner.NewScheduler(r, runner.SchedOptions{})
		if err != nil {
			return err
		}
		defer sched.Close()
		// Named as tarfa serve names it.
		name := "tarfa-default"
		if o.model != "" {
			name = filepath.Base(filepath.Clean(o.model))
		}
		srv, err := server.New(server.Options{ModelName: name, DefaultMaxTokens: o.maxTokens})
		if err != nil {
			return err
		}
		srv.Attach(r, sched, runner.AttestOptions{Build: buildFacts(r), Host: runner.HostFacts(), LoadSeconds: load.Seconds()})
		hc, stop := server.InProcess(srv.Handler())
		defer stop()
		s.base, s.hc = "http://tarfa.in-process", hc
		s.lastMode, s.banner = r.Mode(), modeBanner(r.Config.Quant)
	}
	var models openai.ModelList
	if err := s.getJSON(cmd.Context(), "/v1/models", &models); err != nil {
		return fmt.Errorf("listing the models at %s: %w", s.base, err)
	}
	if len(models.Data) == 0 {
		return fmt.Errorf("%s serves no model", s.base)
	}
	s.model = models.Data[0].ID
	where := "in-process"
	if o.url != "" {
		where = "at " + o.url
	}
	if s.banner == "" { // a server's mode (and precision) comes with each reply
		s.banner = "EXACT mode (each reply's X-Tarfa-Mode says the precision)"
	}
	fmt.Fprintf(stderr, "tarfa chat · %s · model %s %s · /help for commands, Ctrl-D to leave\n", s.banner, s.model, where)

	read, closeInput, err := s.input(cmd)
	if err != nil {
		return err
	}
	defer closeInput()
	for {
		line, err := read()
		if err == io.EOF {
			fmt.Fprintln(out)
			return nil
		}
		if err != nil {
			return err
		}
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case line == "/quit" || line == "/exit":
			return nil
		case line == "/help":
			fmt.Fprintln(out, "/reset · /system TEXT · /stats · /quit — Ctrl-C stops a reply, Ctrl-D leaves")
		case line == "/reset":
			s.history = nil
			fmt.Fprintln(out, "(conversation forgotten)")
		case line == "/system" || strings.HasPrefix(line, "/system "):
			s.system = strings.TrimSpace(strings.TrimPrefix(line, "/system"))
			s.history = nil
			if s.system == "" {
				fmt.Fprintln(out, "(no system turn; conversation forgotten)")
			} else {
				fmt.Fprintf(out, "(system turn set; conversation forgotten)\n")
			}
		case line == "/stats":
			s.stats(cmd.Context())
		case strings.HasPrefix(line, "/"):
			fmt.Fprintf(out, "unknown command %s (/help lists them)\n", strings.Fields(line)[0])
		default:
			if err := s.reply(cmd.Context(), line); err != nil {
				if cmd.Context().Err() != nil {
					return cmd.Context().Err()
				}
				fmt.Fprintf(out, "\nerror: %v\n", err)
			}
		}
	}
}

// input returns a line reader: a line editor with history on a terminal,
// plain lines otherwise.
func (s *chatSession) input(cmd *cobra.Command) (func() (string, error), func(), error) {
	in := cmd.InOrStdin()
	fin, okIn := in.(*os.File)
	if okIn && term.IsTerminal(int(fin.Fd())) && isTerminal(s.out) {
		t := term.NewTerminal(struct {
			io.Reader
			io.Writer
		}{fin, os.Stdout}, s.prompt())
		fd := int(fin.Fd())
		return func() (string, error) {
			// Raw only while a line is edited: during a reply the terminal
			// is cooked, so Ctrl-C is a signal that stops the generation.
			st, err := term.MakeRaw(fd)
			if err != nil {
				return "", err
			}
			defer term.Restore(fd, st)
			if w, _, err := term.GetSize(int(os.Stdout.Fd())); err == nil {
				t.SetSize(w, 0)
			}
			t.SetPrompt(s.prompt())
			return t.ReadLine()
		}, func() {}, nil
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	return func() (string, error) {
		fmt.Fprint(s.out, s.prompt())
		if !sc.Scan() {
			if err := sc.Err(); err != nil {
				return "", err
			}
			return "", io.EOF
		}
		return sc.Text(), nil
	}, func() {}, nil
}

// chatTurn is a message of the conversation as a request sends it.
type chatTurn struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatRequest is the body of the POST /v1/chat/completions that chat
// sends: the members openai-go sent for the same parameters.
type chatRequest struct {
	Model         string            `json:"model"`
	Messages      []chatTurn        `json:"messages"`
	Temperature   float64           `json:"temperature"`
	MaxTokens     *int              `json:"max_tokens,omitempty"`
	Seed          *int64            `json:"seed,omitempty"`
	Stream        bool              `json:"stream"`
	StreamOptions chatStreamOptions `json:"stream_options"`
}

type chatStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// chatChunk is one event of a streamed reply: a chunk, whose "tarfa"
// member (on the last chunks) is the attestation facts, or an error the
// server sent in the stream.
type chatChunk struct {
	openai.ChatChunk
	Tarfa *server.Tarfa `json:"tarfa"`
	Error *openai.Error `json:"error"`
}

func (s *chatSession) messages(user string) []chatTurn {
	var m []chatTurn
	if s.system != "" {
		m = append(m, chatTurn{"system", s.system})
	}
	return append(append(m, s.history...), chatTurn{"user", user})
}

// request is the body of the request for the next reply.
func (s *chatSession) request(user string) chatRequest {
	req := chatRequest{Model: s.model, Messages: s.messages(user), Temperature: s.o.temperature, Stream: true,
		StreamOptions: chatStreamOptions{IncludeUsage: true}}
	if s.sendMax {
		req.MaxTokens = &s.o.maxTokens
	}
	if s.o.temperature > 0 {
		req.Seed = &s.o.seed
	}
	return req
}

// reply streams one reply; Ctrl-C stops it and keeps the session (the
// partial reply stays in the conversation, as it was shown).
func (s *chatSession) reply(ctx context.Context, user string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var interrupted atomic.Bool
	defer takeInterrupts(func() { interrupted.Store(true); cancel() })()
	start := time.Now()
	var first time.Time
	var text strings.Builder
	var usage openai.Usage
	var tf *server.Tarfa
	mode := "exact"
	err := func() error {
		resp, err := s.do(ctx, "POST", "/v1/chat/completions", s.request(user))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		mode = orDefault(resp.Header.Get(server.HeaderMode), "unknown")
		if ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/event-stream" {
			return fmt.Errorf("POST /v1/chat/completions: the reply is %q, not a stream (text/event-stream)", resp.Header.Get("Content-Type"))
		}
		return readEvents(resp.Body, func(data []byte) error {
			var ch chatChunk
			if err := json.Unmarshal(data, &ch); err != nil {
				return fmt.Errorf("POST /v1/chat/completions: a bad event in the stream: %v: %.200q", err, data)
			}
			if ch.Error != nil {
				return fmt.Errorf("the server stopped the reply: %s", ch.Error.Message)
			}
			for _, c := range ch.Choices {
				if c.Delta.Content != nil && *c.Delta.Content != "" {
					if first.IsZero() {
						first = time.Now()
					}
					text.WriteString(*c.Delta.Content)
					io.WriteString(s.out, *c.Delta.Content)
				}
			}
			if ch.Usage != nil && ch.Usage.TotalTokens > 0 {
				usage = *ch.Usage
			}
			if ch.Tarfa != nil {
				tf = ch.Tarfa
			}
			return nil
		})
	}()
	s.lastMode = mode
	if interrupted.Load() {
		fmt.Fprintf(s.out, "\n[%s · interrupted: generation stopped]\n", mode)
		if text.Len() > 0 {
			s.history = append(s.history, chatTurn{"user", user}, chatTurn{"assistant", text.String()})
		}
		return nil
	}
	if err != nil {
		return err
	}
	s.history = append(s.history, chatTurn{"user", user}, chatTurn{"assistant", text.String()})
	dur := time.Since(start).Seconds()
	s.replies++
	s.tokens += usage.CompletionTokens
	s.seconds += dur
	s.lastTokS = 0
	if n := usage.CompletionTokens; n > 1 && !first.IsZero() {
		if d := time.Since(first).Seconds(); d > 0 {
			s.lastTokS = float64(n-1) / d
		}
	}
	line := fmt.Sprintf("[%s · %d tokens · %.1f tok/s", mode, usage.CompletionTokens, s.lastTokS)
	if tf != nil {
		s.last = *tf
		line += fmt.Sprintf(" · %d experts verified · logits chain %s…", tf.ExpertsVerified, short(tf.LogitsChain))
	}
	fmt.Fprintln(s.out, "\n"+line+"]")
	return nil
}

// do sends a request (body, when not nil, as JSON) with the API key and
// returns the response of status 200; any other status is an error
// carrying the server's message (apiError).
func (s *chatSession) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
	}
	if s.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.apiKey)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, s.apiError(method+" "+path, resp)
	}
	return resp, nil
}

// getJSON decodes the JSON (at most 1 MiB) of GET path into v.
func (s *chatSession) getJSON(ctx context.Context, path string, v any) error {
	resp, err := s.do(ctx, "GET", path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return fmt.Errorf("GET %s: the reply is not the JSON wanted: %v", path, err)
	}
	return nil
}

// apiError is the error of a response of status other than 200: the
// status and the message of the server's OpenAI-shaped error body
// ({"error":{"message",…}}), or the start of the body when it has none;
// a 401 says what to do about the API key.
func (s *chatSession) apiError(what string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error *openai.Error `json:"error"`
	}
	msg := ""
	if json.Unmarshal(b, &e) == nil && e.Error != nil && e.Error.Message != "" {
		msg = e.Error.Message
	} else if t := strings.TrimSpace(string(b)); t != "" {
		msg = fmt.Sprintf("%.200q", t)
	}
	err := what + ": " + resp.Status
	if msg != "" {
		err += ": " + msg
	}
	if resp.StatusCode == http.StatusUnauthorized {
		if s.apiKey == "" {
			err += " (the server wants an API key: pass --api-key-file FILE, the file its --api-key-file reads)"
		} else {
			err += fmt.Sprintf(" (the server refused the key in %s)", s.o.apiKeyFile)
		}
	}
	return errors.New(err)
}

// readEvents calls fn with the data of each event of a server-sent event
// stream (text/event-stream: "data:" lines, joined by newlines, up to an
// empty line; comments and other fields are skipped) until the event
// "[DONE]"; a stream that ends before it is an error.
func readEvents(r io.Reader, fn func(data []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data []byte
	has := false
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if !has {
				continue
			}
			if string(data) == "[DONE]" {
				return nil
			}
			if err := fn(data); err != nil {
				return err
			}
			data, has = data[:0], false
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		if string(name) != "data" {
			continue // a comment (":…"), event, id, retry
		}
		if has {
			data = append(data, '\n')
		}
		data = append(data, bytes.TrimPrefix(value, []byte(" "))...)
		has = true
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("reading the stream: %w", err)
	}
	return errors.New("the stream ended before its last event (data: [DONE])")
}

func short(h string) string { return h[:min(12, len(h))] }

// stats prints the session's figures and the server's expert uses by tier.
func (s *chatSession) stats(ctx context.Context) {
	tps := 0.0
	if s.seconds > 0 {
		tps = float64(s.tokens) / s.seconds
	}
	mode := s.lastMode // the server's X-Tarfa-Mode: the checkpoint's precision too
	if mode == "" {
		mode = "(none yet: the server says it with its first reply)"
	}
	fmt.Fprintf(s.out, "mode %s · %s, %d tokens, %.1f tok/s overall, %.1f tok/s decoding the last reply\n", mode, plural(s.replies, "reply", "replies"), s.tokens, tps, s.lastTokS)
	if s.last.Attestation != "" {
		fmt.Fprintf(s.out, "last reply: %d routed experts verified, %d bytes hashed for it, routing %s…, logits chain %s…\n",
			s.last.ExpertsVerified, s.last.BytesVerified, short(s.last.Routing), short(s.last.LogitsChain))
	}
	m, err := s.metrics(ctx)
	if err != nil {
		fmt.Fprintf(s.out, "server metrics: %v\n", err)
		return
	}
	fmt.Fprintf(s.out, "expert uses by tier: storage %s, ram %s, device %s · RAM tier hits %s, misses %s · bytes verified %s · scrub passes %s, failures %s\n",
		m[`tarfa_expert_uses_total{tier="storage"}`], m[`tarfa_expert_uses_total{tier="ram"}`], m[`tarfa_expert_uses_total{tier="device"}`],
		m["tarfa_tier_hits_total"], m["tarfa_tier_misses_total"], m["tarfa_verified_bytes_total"], m["tarfa_scrub_passes_total"], m["tarfa_scrub_failures_total"])
}

// metrics reads the server's /metrics into name{labels} → value (0 for
// the ones not there).
func (s *chatSession) metrics(ctx context.Context) (map[string]string, error) {
	resp, err := s.do(ctx, "GET", "/metrics", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 1<<20))
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		if k, v, ok := strings.Cut(l, " "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				m[k] = strconv.FormatFloat(f, 'f', -1, 64)
			}
		}
	}
	for _, k := range []string{`tarfa_expert_uses_total{tier="storage"}`, `tarfa_expert_uses_total{tier="ram"}`, `tarfa_expert_uses_total{tier="device"}`,
		"tarfa_tier_hits_total", "tarfa_tier_misses_total", "tarfa_verified_bytes_total", "tarfa_scrub_passes_total", "tarfa_scrub_failures_total"} {
		if _, ok := m[k]; !ok {
			m[k] = "0"
		}
	}
	return m, sc.Err()
}
