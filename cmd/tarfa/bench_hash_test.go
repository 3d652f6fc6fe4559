package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchHash: every mode at every job count, each a rate; bad flags are
// refused with the flag and its range.
func TestBenchHash(t *testing.T) {
	out, err := runCLI(t, "", "bench", "hash", "--jobs", "1,3", "--size", "70KiB", "--part", "16KiB", "--repeat", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var res hashResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Bytes != 70<<10 || res.Part != 16<<10 || len(res.Figures) != 2*len(hashModes) {
		t.Fatalf("%+v", res)
	}
	for _, f := range res.Figures {
		if !(f.Min > 0 && f.Min <= f.Median && f.Median <= f.Max) || f.Jobs != 1 && f.Jobs != 3 {
			t.Errorf("%+v", f)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--jobs", "0"}, "--jobs 0: want 1 to 256"},
		{[]string{"--repeat", "0"}, "--repeat 0: want 1 to 1000"},
		{[]string{"--size", "0"}, `--size "0": want 1 byte to 4GiB`},
		{[]string{"--part", "512"}, `--part "512": want at least 1KiB`},
	} {
		_, err := runCLI(t, "", append([]string{"bench", "hash"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err) != exitError {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
