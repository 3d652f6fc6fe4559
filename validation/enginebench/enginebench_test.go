package enginebench

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/validation/synth"
)

func defaultModel(t *testing.T) string {
	t.Helper()
	dir, _, err := synth.EnsureDefault(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRunInterleavesAndChecksBitIdentity(t *testing.T) {
	dir := defaultModel(t)
	const minDur = 40 * time.Millisecond
	var steps []int64
	res, err := Run(context.Background(), dir, Options{Threads: []int{1, 2, 3}, PromptTokens: 9, DecodeTokens: 4,
		Repeat: 2, MinDuration: minDur, Progress: func(done, total int64) {
			steps = append(steps, done)
			if total != 3*2 {
				t.Errorf("progress total %d", total)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Order, []int{1, 2, 3}) || len(res.Figures) != 3 || !res.BitIdentical() {
		t.Fatalf("order %v, %d figures, bit-identical %v", res.Order, len(res.Figures), res.BitIdentical())
	}
	if !slices.Equal(steps, []int64{1, 2, 3, 4, 5, 6}) {
		t.Errorf("progress steps %v", steps)
	}
	// Cells in the order they ran: round 0 at 1, 2, 3 threads, then round 1.
	var order []int
	for i, c := range res.Cells {
		order = append(order, c.Round*10+c.Threads)
		if c.PrefillSecs < minDur.Seconds() || c.DecodeSecs < minDur.Seconds() || c.Generations < 1 {
			t.Errorf("cell %d timed too briefly: %+v", i, c)
		}
		if !c.BitIdentical || c.LogitsDigest != res.ReferenceDigest || !strings.HasPrefix(c.LogitsDigest, "fnv64:") {
			t.Errorf("cell %d: %+v, reference %s", i, c, res.ReferenceDigest)
		}
		if want := 9 * c.Generations; math.Abs(c.PrefillTokS*c.PrefillSecs-float64(want)) > 1e-6*float64(want) {
			t.Errorf("cell %d: %g tok/s × %g s != %d prompt tokens", i, c.PrefillTokS, c.PrefillSecs, want)
		}
		if want := 3 * c.Generations; math.Abs(c.DecodeTokS*c.DecodeSecs-float64(want)) > 1e-6*float64(want) {
			t.Errorf("cell %d: %g tok/s × %g s != %d decode steps", i, c.DecodeTokS, c.DecodeSecs, want)
		}
	}
	if !slices.Equal(order, []int{1, 2, 3, 11, 12, 13}) {
		t.Errorf("cells ran in the order %v", order)
	}
	for i, f := range res.Figures {
		if f.PrefillTokS.N != 2 || f.DecodeTokS.N != 2 || f.ExpertsPerTok != 2 || !f.BitIdentical || f.LogitsDigest != res.ReferenceDigest {
			t.Errorf("figure %+v", f)
		}
		first := res.Figures[0]
		if f.PrefillRatio != f.PrefillTokS.Median/first.PrefillTokS.Median || f.DecodeRatio != f.DecodeTokS.Median/first.DecodeTokS.Median {
			t.Errorf("figure %d ratios %g %g are not the ratios of the medians", i, f.PrefillRatio, f.DecodeRatio)
		}
		var gens int
		for _, c := range res.Cells {
			if c.Threads == f.Threads {
				gens += c.Generations
			}
		}
		if f.Generations != gens {
			t.Errorf("figure %d: %d generations, cells say %d", i, f.Generations, gens)
		}
	}
}

// A difference in any bit of any step's logits is caught.
func TestGenerateDetectsDifferentLogits(t *testing.T) {
	r, err := runner.Open(context.Background(), defaultModel(t), runner.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	a := &arm{threads: 1, r: r, s: r.Engine.NewSession()}
	prompt := []int{5, 6, 7}
	var ref [][]float32
	g, err := a.generate(context.Background(), prompt, 3, nil, func(_ int, lg []float32) error {
		ref = append(ref, slices.Clone(lg))
		return nil
	})
	if err != nil || !g.identical || len(ref) != 3 {
		t.Fatalf("reference: %v, %d steps", err, len(ref))
	}
	if g2, err := a.generate(context.Background(), prompt, 3, ref, nil); err != nil || !g2.identical || g2.digest != g.digest {
		t.Errorf("same run: identical %v, digest %s vs %s, %v", g2.identical, g2.digest, g.digest, err)
	}
	flipped := slices.Clone(ref)
	flipped[2] = slices.Clone(ref[2])
	flipped[2][len(flipped[2])-1] = math.Float32frombits(math.Float32bits(flipped[2][len(flipped[2])-1]) ^ 1)
	if g3, _ := a.generate(context.Background(), prompt, 3, flipped, nil); g3.identical {
		t.Error("one flipped bit in the last logit of the last step was not caught")
	}
	if g4, _ := a.generate(context.Background(), prompt, 3, ref[:2], nil); g4.identical {
		t.Error("a reference one step short was not caught")
	}
	if g5, _ := a.generate(context.Background(), prompt, 2, ref, nil); g5.identical {
		t.Error("a run one step short was not caught")
	}
}

func TestRunStopsWhenCancelled(t *testing.T) {
	dir := defaultModel(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var after bool
	returned := make(chan struct{})
	start := time.Now()
	_, err := Run(ctx, dir, Options{Threads: []int{1, 2}, Repeat: 100, MinDuration: 10 * time.Millisecond, Progress: func(done, _ int64) {
		select {
		case <-returned:
			after = true
		default:
		}
		if done == 1 {
			cancel()
		}
	}})
	close(returned)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v to stop", d)
	}
	time.Sleep(50 * time.Millisecond)
	if after {
		t.Error("progress reported after Run returned")
	}
}

func TestOptionsRefused(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Threads: []int{1, -3}}, "-3 threads"},
		{Options{PromptTokens: -1}, "prompt of -1"},
		{Options{DecodeTokens: 1}, "1 decode tokens"},
		{Options{Repeat: -2}, "-2 rounds"},
		{Options{MinDuration: -time.Second}, "minimum duration"},
		{Options{RAMBudget: -5}, "RAM budget of -5 bytes"},
	} {
		_, err := Run(context.Background(), "/nonexistent", c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}
