package benchrun

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Summary
	}{
		{nil, Summary{}},
		{[]float64{7}, Summary{N: 1, Min: 7, Median: 7, Max: 7}},
		{[]float64{3, 1, 2}, Summary{N: 3, Min: 1, Median: 2, Max: 3}},
		{[]float64{4, 1, 3, 2}, Summary{N: 4, Min: 1, Median: 2.5, Max: 4}},
		{[]float64{10, 1, 1, 1, 50}, Summary{N: 5, Min: 1, Median: 1, Max: 50}},
		{[]float64{5, 9, 1, 100, 2, 8}, Summary{N: 6, Min: 1, Median: 6.5, Max: 100}},
	} {
		in := append([]float64(nil), c.in...)
		if got := Summarize(c.in); got != c.want {
			t.Errorf("Summarize(%v) = %+v, want %+v", c.in, got, c.want)
		}
		if !reflect.DeepEqual(in, c.in) {
			t.Errorf("Summarize reordered its input: %v, was %v", c.in, in)
		}
	}
}

func TestRatioOfMedians(t *testing.T) {
	a := Summarize([]float64{1, 6, 100}) // median 6
	b := Summarize([]float64{2, 3, 4})   // median 3
	if r := Ratio(a, b); r != 2 {
		t.Errorf("Ratio = %g, want 6/3 = 2 (medians, not means: the means are 35.7 and 3)", r)
	}
	if r := Ratio(a, Summary{}); r != 0 {
		t.Errorf("Ratio to a zero median = %g, want 0", r)
	}
	p := PairRatios([]float64{2, 9, 8, 1}, []float64{1, 3, 0, 1, 5})
	if want := (Summary{N: 3, Min: 1, Median: 2, Max: 3}); p != want {
		t.Errorf("PairRatios = %+v, want %+v (the zero and the unpaired value left out)", p, want)
	}
}

func TestRatesAndSeconds(t *testing.T) {
	ds := []time.Duration{2 * time.Second, 500 * time.Millisecond, 0}
	if r := Rates(10, ds); !reflect.DeepEqual(r, []float64{5, 20, 0}) {
		t.Errorf("Rates = %v", r)
	}
	if s := Seconds(ds); !reflect.DeepEqual(s, []float64{2, 0.5, 0}) {
		t.Errorf("Seconds = %v", s)
	}
}

// fakeClock moves only when a step advances it, so that every duration
// is known exactly.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func TestInterleaveOrderAndTiming(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	var calls []string
	rec := func(s string, d time.Duration) func(context.Context) error {
		return func(context.Context) error { calls = append(calls, s); clk.Advance(d); return nil }
	}
	arms := []Arm{
		{Name: "A", Prepare: rec("prepA", time.Hour), Run: rec("A", 3*time.Second), After: rec("afterA", time.Hour)},
		{Name: "B", Run: rec("B", 5*time.Second)},
	}
	var progress []string
	r := Runner{Rounds: 3, Now: clk.Now, OnRun: func(round, arm int) { progress = append(progress, fmt.Sprintf("%d%d", round, arm)) }}
	ds, err := r.Interleave(context.Background(), arms)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Fields("prepA A afterA B prepA A afterA B prepA A afterA B")
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("calls %v\nwant  %v", calls, want)
	}
	if !reflect.DeepEqual(progress, strings.Fields("00 01 10 11 20 21")) {
		t.Errorf("OnRun calls %v", progress)
	}
	// Only Run is timed: Prepare and After took an hour each.
	wantD := [][]time.Duration{{3 * time.Second, 3 * time.Second, 3 * time.Second}, {5 * time.Second, 5 * time.Second, 5 * time.Second}}
	if !reflect.DeepEqual(ds, wantD) {
		t.Errorf("durations %v, want %v", ds, wantD)
	}
}

func TestInterleaveStopsOnErrorAndCancel(t *testing.T) {
	boom := errors.New("boom")
	n := 0
	arms := []Arm{
		{Name: "A", Run: func(context.Context) error { n++; return nil }},
		{Name: "B", Run: func(context.Context) error {
			if n == 2 {
				return boom
			}
			return nil
		}},
	}
	ds, err := Runner{Rounds: 5}.Interleave(context.Background(), arms)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "B (round 2 of 5)") {
		t.Errorf("err = %v", err)
	}
	if n != 2 || len(ds[0]) != 2 || len(ds[1]) != 1 {
		t.Errorf("ran A %d times; kept %d and %d durations", n, len(ds[0]), len(ds[1]))
	}

	// Cancelled in the first arm's Prepare: Run is never called, the
	// error is the context's.
	ctx, cancel := context.WithCancel(context.Background())
	ran := false
	_, err = Runner{Rounds: 3}.Interleave(ctx, []Arm{{Name: "A",
		Prepare: func(context.Context) error { cancel(); return nil },
		Run:     func(context.Context) error { ran = true; return nil }}})
	if !errors.Is(err, context.Canceled) || ran {
		t.Errorf("cancelled: err %v, Run called %v", err, ran)
	}

	if _, err := (Runner{}).Interleave(context.Background(), arms); err == nil || !strings.Contains(err.Error(), "0 rounds") {
		t.Errorf("zero rounds: %v", err)
	}
}

func TestHost(t *testing.T) {
	h := ThisHost()
	if h.CPUs < 1 || h.GOMAXPROCS < 1 || h.GoVersion == "" {
		t.Errorf("%+v", h)
	}
	if h.GOOS == "linux" && (h.CPU == "" || h.MemBytes <= 0 || LoadAverage() < 0) {
		t.Errorf("on Linux: %+v, load %g", h, LoadAverage())
	}
}
