// Command tarfa is the command-line front end of Tarfa, an exact-first
// Mixture-of-Experts runtime. Every subcommand is a thin layer over a library
// package; only this package prints.
//
// Exit statuses (all commands), mapped here and nowhere else:
//
//	0    success (for checks: everything verified / bit-identical)
//	1    error: usage, bad flag values, missing or wrong kind of input, I/O
//	3    verification failed or result not exact: a digest, root, signature
//	     or manifest mismatch (jnf.ErrVerification), a replay divergence,
//	     conformance out of tolerance
//	130  interrupted (SIGINT or SIGTERM)
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/verify"
)

// Exit codes owned by main.
const (
	exitOK          = 0
	exitError       = 1
	exitNotExact    = 3
	exitInterrupted = 130
)

// exitStatuses is the exit-status paragraph of the root command's help; a
// command whose statuses say more documents them in its own Long text.
const exitStatuses = `Exit statuses: 0 ok, 1 error (usage, bad flag values, missing or wrong kind of
input), 3 verification failed / not exact (a digest, root, signature or
manifest mismatch, a replay divergence), 130 interrupted.`

// notExactError marks a result that is not exact: the command ran correctly
// but what it checked does not match (a replay that diverged, logits out of
// tolerance). It matches jnf.ErrVerification, so main exits with status 3.
type notExactError struct{ err error }

func (e notExactError) Error() string        { return e.err.Error() }
func (e notExactError) Unwrap() error        { return e.err }
func (e notExactError) Is(target error) bool { return target == jnf.ErrVerification }

// failVerification marks err as a result that is not exact (exit status 3),
// unless the directory was no JNF directory at all (a usage error: status 1).
// Errors from the libraries need no marking: every mismatch they find
// matches jnf.ErrVerification already.
func failVerification(err error) error {
	if nj := (*verify.NotJNFError)(nil); errors.As(err, &nj) {
		return err
	}
	return notExactError{err}
}

// openError maps the error of opening a JNF directory (verify.OpenDir,
// weights.Open) to the exit-status contract: no JNF directory at all is a
// usage error (status 1); a file the manifest lists that is missing (a
// removed config.json) is a directory that does not verify (status 3), as
// verify reports it. Mismatches match jnf.ErrVerification already.
func openError(err error) error {
	if nj := (*verify.NotJNFError)(nil); errors.As(err, &nj) || errors.Is(err, jnf.ErrVerification) || errors.Is(err, context.Canceled) {
		return err
	}
	if errors.Is(err, fs.ErrNotExist) {
		return notExactError{err}
	}
	return err
}

// interruptedError is an interrupted command's error with what to do next
// (how to resume, what was left behind).
type interruptedError struct {
	err  error // matches context.Canceled
	hint string
}

func (e *interruptedError) Error() string { return "interrupted: " + e.hint }
func (e *interruptedError) Unwrap() error { return e.err }

// interrupted adds hint to err when err is an interruption; other errors
// are returned as they are.
func interrupted(err error, hint string) error {
	if !errors.Is(err, context.Canceled) {
		return err
	}
	return &interruptedError{err: err, hint: hint}
}

// legacyCommands are added by files that still register themselves from an
// init function (bench.go); newRootCommand lists every other command itself
// and adds these only when it has no command of that name.
var legacyCommands []func() *cobra.Command

func register(f func() *cobra.Command) { legacyCommands = append(legacyCommands, f) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "tarfa",
		Short: "Exact-first MoE runtime: the model you run is the checkpoint, provably",
		Long: `Tarfa runs huge Mixture-of-Experts models with expert weights that are
bit-identical to the original checkpoint, checked by hash as they are read.

Interrupt any command with Ctrl-C (SIGINT) or SIGTERM: it stops within about a
second, says what it left behind and how to resume where that applies, and exits
with status 130; a second Ctrl-C exits at once.

` + exitStatuses,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate(versionLine())
	root.SetFlagErrorFunc(flagError)
	root.AddGroup(
		&cobra.Group{ID: "model", Title: "Models:"},
		&cobra.Group{ID: "check", Title: "Exactness records:"},
		&cobra.Group{ID: "tools", Title: "Tools:"},
	)
	add := func(group string, cmds ...*cobra.Command) {
		for _, c := range cmds {
			c.GroupID = group
			root.AddCommand(c)
		}
	}
	add("model", newRunCommand(), newServeCommand(), newChatCommand(), newInspectCommand(), newConvertCommand(), newVerifyCommand(),
		newManifestCommand(), newKeysCommand())
	add("check", newGoldenCommand(), newReplayCommand(), newAttestCommand(), newReportCommand(), newValidateCommand())
	add("tools", newSynthCommand(), newTokenizeCommand(), newTemplateCommand(), newBenchCommand(), newSimCommand(), newVersionCommand())
	for _, f := range legacyCommands {
		if c := f(); !hasCommand(root, c.Name()) {
			add("tools", c)
		}
	}
	withUsageLines(root)
	root.SetHelpCommandGroupID("tools")
	root.SetCompletionCommandGroupID("tools")
	return root
}

func hasCommand(parent *cobra.Command, name string) bool {
	for _, c := range parent.Commands() {
		if c.Name() == name {
			return true
		}
	}
	return false
}

func main() {
	ctx, stop := interruptContext(context.Background())
	stdout := newStdout(os.Stdout)
	root := newRootCommand()
	root.SetOut(stdout)
	endProfile, err := startProfile()
	if err == nil {
		err = root.ExecuteContext(ctx)
		endProfile()
	}
	stop()
	if err != nil {
		// The message starts on a line of its own, even after text that
		// did not end in a newline.
		stdout.EndLine()
		fmt.Fprintln(os.Stderr, "tarfa:", escapeControls(errorMessage(err)))
	}
	os.Exit(exitCode(err))
}

// interruptHook, while set, receives SIGINT instead of the default
// handling below (chat: Ctrl-C ends the generation, not the session).
// SIGTERM is never taken over.
var interruptHook atomic.Pointer[func()]

// takeInterrupts makes f receive SIGINT until the returned function is
// called.
func takeInterrupts(f func()) (restore func()) {
	interruptHook.Store(&f)
	return func() { interruptHook.Store(nil) }
}

// interruptContext returns a context that the first SIGINT or SIGTERM
// cancels (the command stops, cleans up and main exits with status 130); a
// second signal exits at once with status 130. stop releases the signals.
func interruptContext(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-sigs:
				if h := interruptHook.Load(); h != nil && sig == os.Interrupt {
					(*h)()
					continue
				}
			case <-done:
				return
			}
			break
		}
		fmt.Fprintln(os.Stderr, "\ntarfa: interrupted, stopping (interrupt again to quit at once)")
		cancel()
		select {
		case <-sigs:
			fmt.Fprintln(os.Stderr, "tarfa: interrupted")
			os.Exit(exitInterrupted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// exitCode maps a command's error to the exit status.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case errors.Is(err, jnf.ErrVerification):
		return exitNotExact
	}
	return exitError
}

// errorMessage is what main prints for err: an interruption is reported as
// such (with its hint), never as "context canceled".
func errorMessage(err error) string {
	if !errors.Is(err, context.Canceled) {
		return err.Error()
	}
	var ie *interruptedError
	if errors.As(err, &ie) {
		return ie.Error()
	}
	return "interrupted"
}

// escapeControls makes s safe to print on a terminal: C0 control characters
// other than newline and tab, DEL and the C1 controls are written as Go
// escapes (\x1b, \u009b), so that no byte of a model's output or of a name
// read from a file can move the cursor, retitle the window or reprogram
// the terminal.
func escapeControls(s string) string {
	if !hasControls(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func hasControls(s string) bool {
	for _, r := range s {
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return true
		}
	}
	return false
}
