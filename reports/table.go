// Package reports renders Tarfa's tables and reports for people (tables via
// tablewriter) and helpers for human-readable numbers. Machine output is
// JSON produced by the commands from typed values, never from these tables.
package reports

import (
	"fmt"
	"io"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// Table renders rows under a header.
func Table(w io.Writer, header []string, rows [][]string) error {
	t := tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off), tablewriter.WithRowAutoWrap(tw.WrapNone))
	h := make([]any, len(header))
	for i, s := range header {
		h[i] = s
	}
	t.Header(h...)
	for _, r := range rows {
		if err := t.Append(r); err != nil {
			return err
		}
	}
	return t.Render()
}

// Bytes formats a byte count in binary units with the exact count for
// small values, e.g. "18.0 MiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Rate formats bytes per second.
func Rate(bytes int64, seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	return Bytes(int64(float64(bytes)/seconds)) + "/s"
}
