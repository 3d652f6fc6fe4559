// Command tarfa is the command-line front end of Tarfa, an exact-first
// Mixture-of-Experts runtime. Every subcommand is a thin layer over a library
// package; only this package prints.
//
// Exit statuses (all commands):
//
//	0  success (for checks: everything verified / bit-identical)
//	1  error (bad input, I/O, usage)
//	3  verification failed or result not exact (digest mismatch, replay divergence,
//	   conformance out of tolerance)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/verify"
)

// Exit codes owned by main.
const (
	exitOK       = 0
	exitError    = 1
	exitNotExact = 3
)

// notExactError marks a failed verification: the command ran correctly but the
// thing it checked is not exact / does not match. main maps it to exit 3.
type notExactError struct{ err error }

func (e notExactError) Error() string { return e.err.Error() }
func (e notExactError) Unwrap() error { return e.err }

// failVerification wraps err so that main exits with status 3, unless the
// directory was no JNF directory at all (a usage error: status 1).
func failVerification(err error) error {
	if nj := (*verify.NotJNFError)(nil); errors.As(err, &nj) {
		return err
	}
	return notExactError{err}
}

// commands is filled by the init functions of the per-command files.
var commands []func() *cobra.Command

func register(f func() *cobra.Command) { commands = append(commands, f) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "tarfa",
		Short: "Exact-first MoE runtime: the model you run is the checkpoint, provably",
		Long: `Tarfa runs huge Mixture-of-Experts models with expert weights that are
bit-identical to the original checkpoint, checked by hash as they stream.

Exit statuses: 0 ok, 1 error, 3 verification failed / not exact.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	for _, f := range commands {
		root.AddCommand(f())
	}
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	os.Exit(exitCode(err))
}

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(os.Stderr, "tarfa:", err)
	var ne notExactError
	if errors.As(err, &ne) || errors.Is(err, jnf.ErrVerification) {
		return exitNotExact
	}
	return exitError
}
