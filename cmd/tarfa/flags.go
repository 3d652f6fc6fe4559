package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Flag values are checked before anything is opened or written: in PreRunE,
// or at the top of RunE where a check needs the arguments. Errors name the
// flag as the user typed it, the value, and what is wanted.

// maxThreads bounds --threads: more goroutines than this per operation is
// never useful, and results do not depend on the count.
const maxThreads = 256

// flagError rewrites the flag parser's errors in the user's words:
// `--seed -1: want a whole number from 0 to 18446744073709551615`, not
// `invalid argument "-1" for "--seed" flag: strconv.ParseUint: parsing "-1": invalid syntax`.
func flagError(cmd *cobra.Command, err error) error {
	help := fmt.Sprintf("see %s --help", cmd.CommandPath())
	var bad *pflag.InvalidValueError
	if errors.As(err, &bad) {
		f := bad.GetFlag()
		want := wantOf(f.Value.Type())
		var w wantError
		if errors.As(bad.Unwrap(), &w) {
			want = string(w)
		}
		return fmt.Errorf("--%s %s: %s (%s)", f.Name, strconv.Quote(bad.GetValue()), want, help)
	}
	var missing *pflag.ValueRequiredError
	if errors.As(err, &missing) {
		f := missing.GetFlag()
		return fmt.Errorf("--%s needs a value: %s (%s)", f.Name, wantOf(f.Value.Type()), help)
	}
	return fmt.Errorf("%w (%s%s)", err, help, flagHint(cmd, err))
}

// wantOf says what a flag of the given pflag type takes.
func wantOf(typ string) string {
	switch typ {
	case "int", "int64", "int32":
		return "want a whole number"
	case "uint64", "uint":
		return fmt.Sprintf("want a whole number from 0 to %d", uint64(math.MaxUint64))
	case "float64", "float32":
		return "want a number"
	case "bool", "true|false":
		return "want true or false"
	case "intSlice", "ints":
		return "want whole numbers separated by commas"
	}
	return "want a " + typ
}

// wantError is a flag value's own account of what it wants.
type wantError string

func (e wantError) Error() string { return string(e) }

// intFlag checks that --name's value v lies in [lo, hi]; what says what the
// flag counts.
func intFlag(name string, v, lo, hi int64, what string) error {
	if v < lo || v > hi {
		return fmt.Errorf("--%s %d: want %d to %d (%s)", name, v, lo, hi, what)
	}
	return nil
}

// threadsFlag checks a --threads value: 0 (all cores) to maxThreads.
func threadsFlag(n int) error {
	if n < 0 || n > maxThreads {
		return fmt.Errorf("--threads %d: want 0 (all cores) to %d; results are identical for every value", n, maxThreads)
	}
	return nil
}

// finiteFlag checks that a float flag's value is a finite number in
// [lo, hi] (NaN and infinities parse as floats).
func finiteFlag(name string, v, lo, hi float64, what string) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi {
		return fmt.Errorf("--%s %g: want a number from %g to %g (%s)", name, v, lo, hi, what)
	}
	return nil
}

// boolValue is a boolean flag that takes its value either way, --think=false
// or --think false (a plain pflag bool takes only the first form and reads
// "false" as the next argument).
type boolValue struct{ v *bool }

func newBoolValue(p *bool, def bool) *boolValue { *p = def; return &boolValue{p} }

func (b *boolValue) String() string { return strconv.FormatBool(*b.v) }
func (b *boolValue) Type() string   { return "true|false" }
func (b *boolValue) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return wantError("want true or false")
	}
	*b.v = v
	return nil
}

// oneText accepts at most one argument, a text: several are most often an
// unquoted text, and the error says so.
func oneText(name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 1 {
			return fmt.Errorf("one %s argument, got %d: quote the %s (%s \"%s\")", name, len(args), strings.ToLower(name), cmd.CommandPath(), strings.Join(args, " "))
		}
		return nil
	}
}
