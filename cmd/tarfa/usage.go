package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// withUsageLines makes the argument checks of c and its subcommands say
// what the command takes: "tarfa inspect: want 1 argument, got none
// (usage: tarfa inspect DIR [flags]; see tarfa inspect --help)", not
// cobra's "accepts 1 arg(s), received 0".
func withUsageLines(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return usageError(cmd, err)
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		withUsageLines(sub)
	}
}

// cobraArgs are the messages of cobra's argument checks.
var cobraArgs = []*regexp.Regexp{
	regexp.MustCompile(`^accepts (\d+) arg\(s\), received (\d+)$`),
	regexp.MustCompile(`^accepts at most (\d+) arg\(s\), received (\d+)$`),
	regexp.MustCompile(`^requires at least (\d+) arg\(s\), only received (\d+)$`),
	regexp.MustCompile(`^accepts between (\d+) and (\d+) arg\(s\), received (\d+)$`),
	regexp.MustCompile(`^unknown command ("(?:[^"\\]|\\.)*") for "[^"]*"$`),
}

// usageError rewrites an argument error of cmd in the user's words and
// adds the usage line.
func usageError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	for i, re := range cobraArgs {
		m := re.FindStringSubmatch(msg)
		if m == nil {
			continue
		}
		got := m[len(m)-1]
		switch i {
		case 0:
			msg = fmt.Sprintf("want %s, got %s", arguments(m[1]), count(got))
		case 1:
			msg = fmt.Sprintf("want at most %s, got %s", arguments(m[1]), got)
		case 2:
			msg = fmt.Sprintf("want at least %s, got %s", arguments(m[1]), count(got))
		case 3:
			msg = fmt.Sprintf("want %s to %s arguments, got %s", m[1], m[2], got)
		case 4:
			if cmd.HasAvailableSubCommands() {
				continue
			}
			msg = fmt.Sprintf("takes no arguments, got %s", got)
		}
		break
	}
	name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
	return fmt.Errorf("%s: %s (usage: %s; see %s --help)", name, msg, cmd.UseLine(), cmd.CommandPath())
}

func arguments(n string) string {
	if n == "1" {
		return "1 argument"
	}
	return n + " arguments"
}

func count(n string) string {
	if n == "0" {
		return "none"
	}
	return n
}

// flagHint is what to add to a flag parser error about an argument that
// only looks like a flag: a text or a negative number starting with "-".
func flagHint(cmd *cobra.Command, err error) string {
	msg := err.Error()
	if !strings.HasPrefix(msg, "unknown shorthand flag: ") && !strings.HasPrefix(msg, "unknown flag: ") {
		return ""
	}
	arg := msg
	if i := strings.LastIndex(msg, " in "); i >= 0 && strings.HasPrefix(msg, "unknown shorthand") {
		arg = msg[i+len(" in "):]
	} else {
		arg = strings.TrimPrefix(msg, "unknown flag: ")
	}
	if len(arg) < 2 || !(strings.ContainsAny(arg, " \t") || (arg[1] >= '0' && arg[1] <= '9') || arg[1] == '.') {
		return ""
	}
	return fmt.Sprintf("; if %s is an argument, not a flag, put -- before it: %s -- %s", strconv.Quote(arg), cmd.CommandPath(), strconv.Quote(arg))
}
