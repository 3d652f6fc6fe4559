//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startServe starts `tarfa serve` on a free loopback port and returns the
// process and its base URL once it is ready.
func startServe(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	p := start(t, nil, nil, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	waitFor(t, "the server to be ready", 60*time.Second, func() bool {
		select {
		case <-p.done:
			t.Fatalf("serve exited: %v\n%s", p.err, p.stderr.String())
		default:
		}
		return strings.Contains(p.stderr.String(), "✓ ready")
	})
	m := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+)`).FindStringSubmatch(p.stderr.String())
	if m == nil {
		t.Fatalf("no address in the banner:\n%s", p.stderr.String())
	}
	return p, m[1]
}

func httpDo(t *testing.T, method, url, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// TestServeAttestVerify: a response of `tarfa serve --key` has a signed
// report that `tarfa attest verify` accepts offline and by replay, and a
// report of another response is refused for this one's transcript. The
// API key file is enforced, and SIGTERM lets a stream in flight finish
// before the server exits 0.
func TestServeAttestVerify(t *testing.T) {
	tmp := t.TempDir()
	model := filepath.Join(tmp, "m")
	if _, err := runCLI(t, "", "convert", fixtures+"qwen35moe-dev-c/checkpoint", "--out", model); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(tmp, "k")
	if _, err := runCLI(t, "", "keys", "generate", "--out", key); err != nil {
		t.Fatal(err)
	}
	apiKey := filepath.Join(tmp, "api-key")
	os.WriteFile(apiKey, []byte("s3cret\n"), 0o600)
	p, base := startServe(t, "--model", model, "--key", key, "--api-key-file", apiKey, "--name", "dev-c")
	if !strings.Contains(p.stderr.String(), "Tarfa · dev-c · exact BF16 · streaming") {
		t.Errorf("banner:\n%s", p.stderr.String())
	}
	body := `{"model": "dev-c", "prompt": [5, 9, 200, 17], "max_tokens": 6, "temperature": 0.8, "seed": 3}`
	if resp, _ := httpDo(t, "POST", base+"/v1/completions", "", body); resp.StatusCode != 401 {
		t.Errorf("without the API key: %d", resp.StatusCode)
	}
	resp, b := httpDo(t, "POST", base+"/v1/completions", "s3cret", body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	id := resp.Header.Get("X-Tarfa-Attestation")
	resp, env := httpDo(t, "GET", base+"/v1/attestations/"+id, "s3cret", "")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/attestations/%s: %d %s", id, resp.StatusCode, env)
	}
	report := filepath.Join(tmp, "r.json")
	os.WriteFile(report, env, 0o644)
	out, err := runCLI(t, "", "attest", "verify", report, "--pub", key+".pub", "--manifest", model)
	if err != nil {
		t.Fatalf("attest verify offline: %v\n%s", err, out)
	}
	out, err = runCLI(t, "", "attest", "verify", report, "--pub", key+".pub", "--model", model, "--replay", "--json")
	var vr attestVerifyResult
	if err != nil || json.Unmarshal([]byte(out), &vr) != nil || !vr.Exact || len(vr.Replay) != 1 || !vr.Replay[0].Exact {
		t.Fatalf("attest verify --replay: %v\n%s", err, out)
	}
	var c struct {
		Choices []struct{ Text string }
		Tarfa   struct {
			LogitsChain string `json:"logits_chain"`
		}
	}
	json.Unmarshal(b, &c)
	if c.Tarfa.LogitsChain == "" || !strings.Contains(string(env), "payload") {
		t.Errorf("response %s", b)
	}

	// SIGTERM while a stream is in flight: it finishes, then serve exits 0.
	req, _ := http.NewRequest("POST", base+"/v1/completions", strings.NewReader(`{"model": "dev-c", "prompt": [5, 9], "max_tokens": 200, "temperature": 0, "stream": true}`))
	req.Header.Set("Authorization", "Bearer s3cret")
	sresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	rd := bufio.NewReader(sresp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event %q %v", line, err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	rest, err := io.ReadAll(rd)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || !strings.Contains(string(rest), `"finish_reason":"`) {
		t.Errorf("the stream in flight at SIGTERM: %v, ends %q", err, rest[max(0, len(rest)-200):])
	}
	if code := p.exitWithin(t, 30*time.Second); code != 0 || !strings.Contains(p.stderr.String(), "shut down: every response finished") {
		t.Errorf("exit %d after SIGTERM:\n%s", code, p.stderr.String())
	}
}

// longReplyModel converts tarfa synth's tiny model (seed 1, every weight at
// the initializer's spread: the recipe of the embedded default-v1) into a
// JNF directory named tarfa-v1. Its greedy replies run to thousands of
// tokens without the end of turn (to "a": all 4000 asked for), where the
// embedded default model (default-v2) ends every reply within some
// hundreds, too soon for a test to interrupt or cut it reliably.
func longReplyModel(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	ck, model := filepath.Join(tmp, "ck"), filepath.Join(tmp, "tarfa-v1")
	mustCLI(t, "synth", "--out", ck)
	mustCLI(t, "convert", ck, "--out", model)
	return model
}

// TestServeDrainCut: SIGTERM during a long stream drains the server: the
// port keeps answering, /health with 503 "draining" and a new request
// with 503; at --shutdown-timeout the stream is cut with an error event
// and serve exits 1 saying so. The stream must outlast the timeout: it is
// longReplyModel's greedy reply to "a", 4000 tokens.
func TestServeDrainCut(t *testing.T) {
	p, base := startServe(t, "--model", longReplyModel(t), "--name", "tarfa-default", "--shutdown-timeout", "700ms")
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model": "tarfa-default", "prompt": "a", "max_tokens": 4000, "temperature": 0, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event %q %v", line, err)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	var health string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		r, err := c.Get(base + "/health")
		if err != nil {
			t.Fatalf("/health after SIGTERM: %v (health so far %q)", err, health)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if health = fmt.Sprintf("%d %s", r.StatusCode, strings.TrimSpace(string(b))); r.StatusCode != 200 {
			break
		}
	}
	if health != `503 {"status":"draining"}` {
		t.Errorf("/health while draining: %s", health)
	}
	if r, err := c.Post(base+"/v1/models", "application/json", nil); err != nil || r.StatusCode != 405 {
		t.Errorf("a wrong method while draining: %v %v", r, err)
	}
	r, err := c.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model": "tarfa-default", "prompt": "b"}`))
	if err != nil || r.StatusCode != 503 || r.Header.Get("Retry-After") == "" {
		t.Errorf("a request while draining: %v %v", r, err)
	}
	rest, _ := io.ReadAll(rd)
	if !strings.Contains(string(rest), `"code":"shutting_down"`) || strings.Contains(string(rest), "[DONE]") {
		t.Errorf("the stream cut at --shutdown-timeout ends %q", rest[max(0, len(rest)-300):])
	}
	if code := p.exitWithin(t, 20*time.Second); code != exitError || !strings.Contains(p.stderr.String(), "tarfa: shut down at --shutdown-timeout 700ms: 1 in-flight response was cut") {
		t.Errorf("exit %d after the cut:\n%s", code, p.stderr.String())
	}
}

// TestServeFlags: bad flags are refused before anything is opened.
func TestServeFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-batch", "0"}, "--max-batch 0"},
		{[]string{"--max-queue", "-1"}, "--max-queue -1"},
		{[]string{"--kv-budget", "12"}, "--kv-budget"},
		{[]string{"--max-body", "lots"}, "--max-body"},
		{[]string{"--addr", "8089"}, "--addr"},
		{[]string{"--trace", "t.jsonl"}, "--trace"},
		{[]string{"--api-key-file", "/nonexistent/key"}, "--api-key-file"},
		{[]string{"--body-timeout", "0s"}, "--body-timeout 0s"},
		{[]string{"--header-timeout", "2h"}, "--header-timeout 2h0m0s"},
	} {
		_, err := runCLI(t, "", append([]string{"serve", "--model", "/nonexistent/model"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err) != exitError {
			t.Errorf("serve %v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}

// TestChatPipes drives tarfa chat through stdin: a local model served
// in-process, then a running tarfa serve (--url): streaming replies with
// the mode and the experts verified, multi-turn history through the chat
// template (a second turn's prompt holds the first), /system, /reset,
// /stats, unknown commands; Ctrl-C (SIGINT) during a reply stops the
// generation and the session goes on.
func TestChatPipes(t *testing.T) {
	pr, pw := io.Pipe()
	p := start(t, nil, pr, "chat", "--model", longReplyModel(t), "--max-tokens", "100000")
	t.Cleanup(func() { pw.Close() }) // before start's cleanup waits for the child: its stdin copy ends
	say := func(s string) { pw.Write([]byte(s + "\n")) }
	waitFor(t, "the chat prompt", 60*time.Second, func() bool { return strings.Contains(p.stdout.String(), "[exact] you> ") })
	if !strings.Contains(p.stderr.String(), "tarfa chat · EXACT mode · model tarfa-v1 in-process · /help for commands") {
		t.Errorf("banner:\n%s", p.stderr.String())
	}
	// A reply to the end of the context takes seconds (longReplyModel):
	// interrupt it.
	say("Tell me everything")
	n := len(p.stdout.String())
	waitFor(t, "the reply to stream", 30*time.Second, func() bool { return len(p.stdout.String()) > n+40 })
	p.cmd.Process.Signal(os.Interrupt)
	waitFor(t, "the interruption", 10*time.Second, func() bool {
		return strings.Contains(p.stdout.String(), "[exact · interrupted: generation stopped]")
	})
	say("/stats")
	waitFor(t, "/stats", 10*time.Second, func() bool { return strings.Contains(p.stdout.String(), "expert uses by tier: storage ") })
	say("/system Answer briefly")
	say("Hello")
	waitFor(t, "a reply", 30*time.Second, func() bool { return strings.Contains(p.stdout.String(), " experts verified · logits chain ") })
	say("/bogus")
	say("/reset")
	pw.Close()
	if code := p.exitWithin(t, 30*time.Second); code != 0 {
		t.Fatalf("chat exited %d:\n%s\n%s", code, p.stdout.String(), p.stderr.String())
	}
	out := p.stdout.String()
	for _, want := range []string{"mode exact · 0 replies", "(system turn set; conversation forgotten)", "[exact · ", "unknown command /bogus", "(conversation forgotten)"} {
		if !strings.Contains(out, want) {
			t.Errorf("chat output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(p.stderr.String(), "interrupted, stopping") {
		t.Errorf("Ctrl-C during a reply stopped chat:\n%s", p.stderr.String())
	}

	// Against a running server, with its API key; the second turn's
	// prompt holds the first turn (usage grows by more than the new line).
	tmp := t.TempDir()
	apiKey := filepath.Join(tmp, "api-key")
	os.WriteFile(apiKey, []byte("k3y"), 0o600)
	srv, base := startServe(t, "--api-key-file", apiKey, "--default-max-tokens", "4")
	pr2, pw2 := io.Pipe()
	c := start(t, nil, pr2, "chat", "--url", base, "--api-key-file", apiKey, "--max-tokens", "5")
	t.Cleanup(func() { pw2.Close() })
	pw2.Write([]byte("One\nTwo\n/stats\n"))
	pw2.Close()
	if code := c.exitWithin(t, 60*time.Second); code != 0 {
		t.Fatalf("chat --url exited %d:\n%s\n%s", code, c.stdout.String(), c.stderr.String())
	}
	if got := strings.Count(c.stdout.String(), "[exact · 5 tokens · "); got != 2 || !strings.Contains(c.stdout.String(), "mode exact · 2 replies, 10 tokens") {
		t.Errorf("chat --url output:\n%s", c.stdout.String())
	}
	resp, b := httpDo(t, "GET", base+"/metrics", "k3y", "")
	m := regexp.MustCompile(`(?m)^tarfa_prompt_tokens_total (\d+)$`).FindStringSubmatch(string(b))
	if resp.StatusCode != 200 || m == nil {
		t.Fatalf("metrics: %d %s", resp.StatusCode, b)
	}
	// Turn one: system-less "One" (about 10 tokens); turn two repeats it
	// and the reply, so the total is well above twice one turn.
	if total, _ := strconv.Atoi(m[1]); total < 2*10+5 {
		t.Errorf("prompt tokens of two turns: %d, the second turn does not carry the first", total)
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	srv.exitWithin(t, 30*time.Second)
}
