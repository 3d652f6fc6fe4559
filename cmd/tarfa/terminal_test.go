//go:build linux

package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY returns a pseudo-terminal's controlling side and its terminal.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ptmx, tty
}

// On a terminal, run escapes the control characters of the generated text
// (the README's first prompt, run to 96 tokens on the embedded default
// model default-v2, generates \b and \x05) and leaves out special
// tokens; piped, the text is written as it is.
func TestRunOnATerminal(t *testing.T) {
	env := append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir())
	args := []string{"run", "Tell me about experts.", "--max-tokens", "96"}
	piped, err := exec.Command(tarfaBinary(t), args...).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(piped, []byte{'\b'}) || !bytes.Contains(piped, []byte{5}) {
		t.Fatalf("the test prompt no longer generates \\b and \\x05: %q", piped)
	}
	ptmx, tty := openPTY(t)
	defer ptmx.Close()
	c := exec.Command(tarfaBinary(t), args...)
	c.Env, c.Stdout, c.Stderr = env, tty, io.Discard
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&out, ptmx); close(done) }() // ends with EIO when the terminal closes
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("terminal output did not end")
	}
	got := strings.ReplaceAll(out.String(), "\r\n", "\n")
	for _, b := range got {
		if (b < 0x20 && b != '\n' && b != '\t') || b == 0x7f {
			t.Fatalf("raw control character %#x on the terminal: %q", b, got)
		}
	}
	if !strings.Contains(got, `\x08`) || !strings.Contains(got, `\x05`) {
		t.Errorf("the control characters are not shown escaped: %q", got)
	}
	if want := escapeControls(string(piped)); got != want {
		t.Errorf("terminal output %q, want the piped output escaped: %q", got, want)
	}
}
