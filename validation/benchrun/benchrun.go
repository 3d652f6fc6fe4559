// Package benchrun runs the arms of a benchmark interleaved — A B A B … —
// and summarises the repeated measurements by minimum, median and maximum,
// so that a ratio between two arms is taken from medians of the same run.
//
// On a shared machine whose speed drifts from minute to minute, one timing
// per arm says little: the arm measured during a quiet minute wins.
// Interleaving puts every arm through the same drift, the median ignores
// one lucky or unlucky run, and the minimum and maximum show how noisy the
// machine was.
package benchrun

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Summary describes repeated measurements of one quantity.
type Summary struct {
	N      int     `json:"n"`
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
}

// Summarize returns the minimum, median and maximum of xs. The median of an
// even count is the mean of the two middle values. Summarize of no values
// is the zero Summary.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{N: n, Min: s[0], Median: med, Max: s[n-1]}
}

// Ratio returns a.Median / b.Median, the ratio of the medians, or 0 when
// b's median is 0 (so that the result stays valid JSON).
func Ratio(a, b Summary) float64 {
	if b.Median == 0 {
		return 0
	}
	return a.Median / b.Median
}

// PairRatios summarises the ratios a[i] / b[i] of the measurements taken in
// the same round: its spread shows how far the machine drifted between the
// two arms of one round. Pairs with b[i] == 0 are left out; so are the
// extra values of the longer slice.
func PairRatios(a, b []float64) Summary {
	var r []float64
	for i := range min(len(a), len(b)) {
		if b[i] != 0 {
			r = append(r, a[i]/b[i])
		}
	}
	return Summarize(r)
}

// Rates returns work / seconds for each duration (bytes per second when
// work is a byte count); a zero duration gives 0, not +Inf.
func Rates(work float64, ds []time.Duration) []float64 {
	r := make([]float64, len(ds))
	for i, d := range ds {
		if s := d.Seconds(); s > 0 {
			r[i] = work / s
		}
	}
	return r
}

// Seconds returns the durations in seconds.
func Seconds(ds []time.Duration) []float64 {
	r := make([]float64, len(ds))
	for i, d := range ds {
		r[i] = d.Seconds()
	}
	return r
}

// An Arm is one alternative being measured.
type Arm struct {
	Name string
	// Prepare, if not nil, runs untimed before every run of Run: drop the
	// page cache, remove the previous run's output.
	Prepare func(ctx context.Context) error
	// Run is the measured step.
	Run func(ctx context.Context) error
	// After, if not nil, runs untimed after every run of Run.
	After func(ctx context.Context) error
}

// Runner runs arms interleaved.
type Runner struct {
	// Rounds is how many times each arm runs (at least 1).
	Rounds int
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// OnRun, if not nil, is called before each run's Prepare with the round
	// and the arm's index (for progress).
	OnRun func(round, arm int)
}

// Interleave runs round 0 — Prepare, Run, After of every arm in order —
// then round 1 and so on, and returns the duration of every Run, indexed
// [arm][round]. Only Run is timed. The context is checked before every
// step; the first error (ctx.Err() included) stops everything and is
// returned wrapped with the arm's name and round.
func (r Runner) Interleave(ctx context.Context, arms []Arm) ([][]time.Duration, error) {
	if r.Rounds < 1 {
		return nil, fmt.Errorf("benchrun: %d rounds, want at least 1", r.Rounds)
	}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	out := make([][]time.Duration, len(arms))
	for i := range out {
		out[i] = make([]time.Duration, 0, r.Rounds)
	}
	for round := range r.Rounds {
		for i, a := range arms {
			if r.OnRun != nil {
				r.OnRun(round, i)
			}
			d, err := runOne(ctx, a, now)
			if err != nil {
				return out, fmt.Errorf("%s (round %d of %d): %w", a.Name, round+1, r.Rounds, err)
			}
			out[i] = append(out[i], d)
		}
	}
	return out, nil
}

func runOne(ctx context.Context, a Arm, now func() time.Time) (time.Duration, error) {
	step := func(f func(context.Context) error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if f == nil {
			return nil
		}
		return f(ctx)
	}
	if err := step(a.Prepare); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	t0 := now()
	err := a.Run(ctx)
	d := now().Sub(t0)
	if err != nil {
		return 0, err
	}
	if err := step(a.After); err != nil {
		return 0, err
	}
	return d, nil
}
