package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/engine"
	"github.com/tarfa-ai/tarfa/runner"
)

// listen serves f's server through its own HTTPServer on a loopback
// port and returns the base URL.
func (f *fixture) listen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := f.srv.HTTPServer(nil)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String()
}

// hold submits a request straight to the scheduler whose StopAfter (run
// on the scheduler's goroutine) calls each after every token: the
// scheduler, and every request batched with it, waits for it. It returns
// once the request is admitted.
func (f *fixture) hold(t *testing.T, maxTokens int, each func()) *runner.Stream {
	t.Helper()
	st, err := f.sched.Submit(context.Background(), runner.Request{Prompt: []int{1, 2}, Gen: engine.GenOptions{MaxTokens: maxTokens},
		StopAfter: func([]int) bool { each(); return false }})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); f.sched.Stats().Active == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never admitted")
		}
	}
	return st
}

// openStream starts a streamed request and returns its body once the
// first event has come.
func openStream(t *testing.T, url, body string) *bufio.Reader {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event %q %v", line, err)
	}
	return rd
}

// fresh sends one request on a new connection.
func fresh(t *testing.T, method, url, body string) (*http.Response, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s during the drain: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestDrain: while Shutdown waits for a stream in flight, the listener
// keeps accepting: /health says draining (503) and a new request gets an
// OpenAI-shaped 503 with Retry-After; the stream then finishes whole,
// Shutdown returns nil and only then is the port closed.
func TestDrain(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{MaxBatch: 2})
	base := f.listen(t)
	block := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(block) }) }
	t.Cleanup(release)
	f.hold(t, 3, func() { <-block })
	rd := openStream(t, base+"/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0,"stream":true}`)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		done <- f.srv.Shutdown(ctx)
	}()
	waitUntil(t, "the drain", f.srv.closing.Load)
	if resp, b := fresh(t, "GET", base+"/health", ""); resp.StatusCode != 503 || !strings.Contains(b, `"draining"`) {
		t.Errorf("/health during the drain: %d %s", resp.StatusCode, b)
	}
	resp, b := fresh(t, "POST", base+"/v1/completions", `{"model":"tarfa-test","prompt":"a"}`)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(b, `"code":"shutting_down"`) {
		t.Errorf("a request during the drain: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a stream in flight", err)
	default:
	}
	release()
	rest, err := io.ReadAll(rd)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || !strings.Contains(string(rest), `"finish_reason":"`) {
		t.Errorf("the stream in flight: %v, %q", err, rest)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return after the stream finished")
	}
	if c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://")); err == nil {
		c.Close()
		t.Error("the port still accepts after Shutdown")
	}
}

// TestShutdownCutsSlow: at its deadline Shutdown cuts a stream whose
// generation goes on (it ends with a shutting_down error event, no
// [DONE]) and reports it.
func TestShutdownCutsSlow(t *testing.T) {
	f := newFixture(t, Options{}, runner.SchedOptions{MaxBatch: 2})
	base := f.listen(t)
	f.srv.grace = 2 * time.Second
	f.hold(t, 4000, func() { time.Sleep(20 * time.Millisecond) })
	rd := openStream(t, base+"/v1/completions", `{"model":"tarfa-test","prompt":"go on","max_tokens":1000,"temperature":0,"stream":true}`)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := f.srv.Shutdown(ctx)
	var se *ShutdownError
	if !errors.As(err, &se) || se.Cut != 1 || se.Stuck != 0 || se.SchedulerStuck || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v (%+v), want 1 cut", err, se)
	}
	if d := time.Since(start); d > 300*time.Millisecond+3*f.srv.grace {
		t.Errorf("Shutdown took %s", d)
	}
	rest, _ := io.ReadAll(rd)
	if !strings.Contains(string(rest), `"code":"shutting_down"`) || strings.Contains(string(rest), "[DONE]") {
		t.Errorf("the cut stream ends %q", rest[max(0, len(rest)-300):])
	}
}

// TestShutdownStuck: Shutdown returns in bounded time even when the
// generation loop never returns and a client sends its body slowly: it
// closes their connections and says what it cut and what was stuck.
func TestShutdownStuck(t *testing.T) {
	f := newFixture(t, Options{BodyTimeout: time.Hour}, runner.SchedOptions{MaxBatch: 2})
	base := f.listen(t)
	f.srv.grace = 200 * time.Millisecond
	block := make(chan struct{})
	t.Cleanup(func() { close(block) }) // after the test: the loop may end
	f.hold(t, 3, func() { <-block })
	rd := openStream(t, base+"/v1/chat/completions", `{"model":"tarfa-test","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}`)
	// A client that sends its headers and part of its body, then nothing.
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":")
	waitUntil(t, "both requests in flight", func() bool { return f.srv.flying() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = f.srv.Shutdown(ctx)
	d := time.Since(start)
	var se *ShutdownError
	if !errors.As(err, &se) || se.Cut != 2 || !se.SchedulerStuck {
		t.Fatalf("Shutdown: %v (%+v), want 2 cut and the loop stuck", err, se)
	}
	if d > 200*time.Millisecond+3*f.srv.grace+time.Second {
		t.Errorf("Shutdown took %s", d)
	}
	if !strings.Contains(err.Error(), "2 in-flight responses were cut") {
		t.Errorf("message %q", err)
	}
	// Both connections are closed.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Errorf("the slow client's connection: %v, want it closed", err)
	}
	got := make(chan struct{})
	go func() { io.ReadAll(rd); close(got) }()
	select {
	case <-got:
	case <-time.After(5 * time.Second):
		t.Error("the stream's connection is still open")
	}
}
