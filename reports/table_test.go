package reports

import (
	"bytes"
	"strings"
	"testing"
)

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 18874368: "18.0 MiB", 7247757312: "6.8 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	if err := Table(&b, []string{"name", "value"}, [][]string{{"alpha", "1"}, {"beta", "22"}}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{"name", "value", "alpha", "beta", "22"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}
