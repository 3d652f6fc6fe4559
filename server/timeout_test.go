package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/runner"
)

// TestBodyTimeout: an authenticated client that sends its body slowly
// gets 408 once BodyTimeout has passed, and its connection is closed,
// long before its body would be complete; a stream that lasts longer
// than BodyTimeout is not cut by it.
func TestBodyTimeout(t *testing.T) {
	const bodyTimeout = 300 * time.Millisecond
	f := newFixture(t, Options{APIKey: "k", BodyTimeout: bodyTimeout}, runner.SchedOptions{MaxBatch: 2})
	base := f.listen(t)
	addr := strings.TrimPrefix(base, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"tarfa-test","prompt":"slow","max_tokens":1}`
	start := time.Now()
	fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	// One byte every 50ms: the body would take 2.6s.
	go func() {
		for i := range len(body) - 1 {
			if _, err := c.Write([]byte{body[i]}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response to the slow body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	d := time.Since(start)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"code":"request_timeout"`) || !resp.Close {
		t.Errorf("slow body: %d close %v %s", resp.StatusCode, resp.Close, b)
	}
	if d < bodyTimeout || d > bodyTimeout+2*time.Second {
		t.Errorf("slow body answered after %s, want just after %s", d, bodyTimeout)
	}
	// A stream that runs 1s+ (each step waits 20ms) is not cut by the
	// body's deadline: it is cleared once the body is read.
	f.hold(t, 4000, func() { time.Sleep(20 * time.Millisecond) })
	req, _ := http.NewRequest("POST", base+"/v1/completions", strings.NewReader(`{"model":"tarfa-test","prompt":"go on","max_tokens":60,"temperature":0,"stream":true}`))
	req.Header.Set("Authorization", "Bearer k")
	start = time.Now()
	sresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	rest, err := io.ReadAll(sresp.Body)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || time.Since(start) < 3*bodyTimeout {
		t.Errorf("a stream of %s with a %s body timeout: %v, ends %q", time.Since(start), bodyTimeout, err, rest[max(0, len(rest)-200):])
	}
	f.sched.Close()
}

// TestHeaderTimeout: HTTPServer closes a connection whose headers do
// not arrive within ReadHeaderTimeout.
func TestHeaderTimeout(t *testing.T) {
	s, err := New(Options{ModelName: model, ReadHeaderTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := s.HTTPServer(nil)
	go hs.Serve(ln)
	defer hs.Close()
	// The server's deadline starts when it reads the accepted
	// connection, which may be before Dial returns here: the clock
	// starts before Dial, so it cannot read less than the timeout.
	start := time.Now()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET /health HTTP/1.1\r\nHost: x\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.ReadAll(c)
	if d := time.Since(start); d < 200*time.Millisecond || d > 3*time.Second {
		t.Errorf("unfinished headers: the connection closed after %s, want just after 200ms", d)
	}
}
