package trace

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
)

const root = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func synth(t *testing.T, g Generator, layers, experts, k, tokens int) *Trace {
	t.Helper()
	tr, err := Synthesize(g, layers, experts, k, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func zipf(s, reuse float64) Generator {
	return Generator{Name: "zipf", S: s, Reuse: reuse, Seed: 1, Stream: 1}
}

func TestRoundTrip(t *testing.T) {
	g := zipf(0.8, 0.4)
	g.Shift = 5
	tr := synth(t, g, 3, 16, 4, 20)
	var buf bytes.Buffer
	if _, err := tr.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(buf.String(), "\n")
	if !strings.Contains(first, `"source":"synthetic"`) || !strings.Contains(first, `"generator":{"name":"zipf","s":0.8,"reuse":0.4,"shift":5`) {
		t.Errorf("header line: %s", first)
	}
	back, err := ReadAll(&buf, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, tr) {
		t.Fatalf("round trip differs:\n%+v\n%+v", back.Header, tr.Header)
	}

	// A measured trace through the Writer, record by record.
	buf.Reset()
	h := Header{Format: Format, Version: Version, ModelRoot: root, Layers: 2, Experts: 4, TopK: 2, Source: Measured}
	w, err := NewWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	for tok := range 3 {
		for l := range 2 {
			if err := w.Write(tok, l, []int{(tok + l) % 4, 3 - (tok+l)%4}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rd, err := NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if rd.Header() != h {
		t.Errorf("header %+v, want %+v", rd.Header(), h)
	}
	n := 0
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := (Record{Token: n / 2, Layer: n % 2, Experts: []int{(n/2 + n%2) % 4, 3 - (n/2+n%2)%4}}); !reflect.DeepEqual(rec, want) {
			t.Fatalf("record %d: %+v, want %+v", n, rec, want)
		}
		n++
	}
	if n != 6 {
		t.Fatalf("%d records, want 6", n)
	}
}

func TestReaderStrict(t *testing.T) {
	hdr := `{"format":"tarfa-routing-trace","version":1,"model_root":"` + root + `","layers":2,"experts":4,"top_k":2,"source":"measured"}`
	rec := func(tok, l int, e ...int) string {
		s := fmt.Sprint(e)
		return fmt.Sprintf(`{"token":%d,"layer":%d,"experts":[%s]}`, tok, l, strings.ReplaceAll(s[1:len(s)-1], " ", ","))
	}
	ok := hdr + "\n" + rec(0, 0, 0, 1) + "\n" + rec(0, 1, 2, 3) + "\n"
	if _, err := ReadAll(strings.NewReader(ok), 10); err != nil {
		t.Fatalf("valid trace: %v", err)
	}
	syn := `{"format":"tarfa-routing-trace","version":1,"model_root":"","layers":2,"experts":4,"top_k":2,"source":"synthetic","generator":{"name":"zipf","s":1,"reuse":0.5,"shift":0,"seed":1,"stream":1}}`
	if _, err := ReadAll(strings.NewReader(syn+"\n"), 10); err != nil {
		t.Fatalf("valid synthetic header: %v", err)
	}
	long := hdr + "\n" + `{"token":0,"layer":0,"experts":[0,1]` + strings.Repeat(" ", MaxLineBytes) + "}\n"
	for _, tc := range []struct{ in, want string }{
		{"", "empty (no header line)"},
		{"\n", "line 1: blank line"},
		{strings.Replace(hdr, `"version":1`, `"version":2`, 1) + "\n", "line 1: header: version 2, want 1"},
		{strings.Replace(hdr, `"format":"tarfa-routing-trace"`, `"format":"x"`, 1) + "\n", `line 1: header: format "x"`},
		{strings.Replace(hdr, `"layers":2,`, ``, 1) + "\n", `line 1: header: missing "layers"`},
		{strings.Replace(hdr, `"layers":2`, `"layers":2,"layers":3`, 1) + "\n", `line 1: header: duplicate object key "layers"`},
		{strings.Replace(hdr, `"layers":2`, `"Layers":2`, 1) + "\n", `unknown field "Layers"`},
		{strings.Replace(hdr, `"layers":2`, `"layers":2,"extra":1`, 1) + "\n", `unknown field "extra"`},
		{strings.Replace(hdr, `"top_k":2`, `"top_k":5`, 1) + "\n", "line 1: header: top_k 5: want 1 to 4"},
		{strings.Replace(hdr, `"layers":2`, `"layers":2.5`, 1) + "\n", "line 1: header"},
		{strings.Replace(hdr, root, "", 1) + "\n", "a measured trace needs its model_root"},
		{strings.Replace(hdr, root, "sha256:12", 1) + "\n", "model_root"},
		{strings.Replace(hdr, `"measured"`, `"guessed"`, 1) + "\n", `source "guessed"`},
		{strings.Replace(syn, `,"generator":{"name":"zipf","s":1,"reuse":0.5,"shift":0,"seed":1,"stream":1}`, ``, 1) + "\n", "a synthetic trace needs its generator"},
		{strings.Replace(syn, `,"stream":1`, ``, 1) + "\n", `line 1: header: generator: missing "stream"`},
		{strings.Replace(syn, `"reuse":0.5`, `"reuse":1.5`, 1) + "\n", "reuse 1.5: want a probability"},
		{strings.Replace(syn, `"s":1`, `"s":-1`, 1) + "\n", "s -1: want 0 to 4"},
		{hdr + "\n" + rec(0, 1, 0, 1) + "\n", "line 2: token 0 layer 1 out of order: want token 0 layer 0"},
		{hdr + "\n" + rec(0, 0, 0, 1) + "\n" + rec(1, 0, 0, 1) + "\n", "line 3: token 1 layer 0 out of order: want token 0 layer 1"},
		{hdr + "\n" + rec(0, 0, 0) + "\n", "line 2: token 0 layer 0: 1 experts, want top_k = 2"},
		{hdr + "\n" + rec(0, 0, 1, 1) + "\n", "line 2: token 0 layer 0: expert 1 twice"},
		{hdr + "\n" + rec(0, 0, 1, 4) + "\n", "line 2: token 0 layer 0: expert 4 out of range [0, 4)"},
		{hdr + "\n" + rec(0, 0, -1, 1) + "\n", "expert -1 out of range"},
		{hdr + "\n" + `{"token":0,"experts":[0,1]}` + "\n", `line 2: missing "layer"`},
		{hdr + "\n" + `{"token":null,"layer":0,"experts":[0,1]}` + "\n", `line 2: missing "token"`},
		{hdr + "\n" + `{"token":0,"layer":0,"experts":[0,1],"weights":[1,2]}` + "\n", `line 2: unknown field "weights"`},
		{hdr + "\n" + `{"token":0,"layer":0,"layer":0,"experts":[0,1]}` + "\n", `line 2: duplicate object key "layer"`},
		{hdr + "\n" + `{"token":0.5,"layer":0,"experts":[0,1]}` + "\n", "line 2:"},
		{hdr + "\n" + rec(0, 0, 0, 1) + " x\n", "line 2: trailing data"},
		{hdr + "\n" + rec(0, 0, 0, 1) + "\n\n", "line 3: blank line"},
		{hdr + "\n" + rec(0, 0, 0, 1), "line 2: no newline at the end"},
		{hdr + "\n" + rec(0, 0, 0, 1) + "\n", "line 2: trace ends inside token 0, after layer 0 of 2"},
		{long, "line 2: longer than 65536 bytes"},
		{ok + rec(1, 0, 0, 1) + "\n" + rec(1, 1, 0, 1) + "\n", "line 4: more than 1 tokens"},
	} {
		_, err := ReadAll(strings.NewReader(tc.in), map[bool]int{true: 1, false: 10}[strings.HasPrefix(tc.want, "line 4: more")])
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.60q…: got %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestWriterStrict(t *testing.T) {
	h := Header{Format: Format, Version: Version, ModelRoot: root, Layers: 2, Experts: 4, TopK: 2, Source: Measured}
	w, err := NewWriter(io.Discard, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(0, 1, []int{0, 1}); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Errorf("out of order: %v", err)
	}
	if err := w.Write(0, 0, []int{2, 2}); err == nil || !strings.Contains(err.Error(), "expert 2 twice") {
		t.Errorf("duplicate: %v", err)
	}
	if err := w.Write(0, 0, []int{2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "ends inside token 0") {
		t.Errorf("close mid-token: %v", err)
	}
	bad := h
	bad.Source = Synthetic
	if _, err := NewWriter(io.Discard, bad); err == nil || !strings.Contains(err.Error(), "needs its generator") {
		t.Errorf("synthetic header without generator: %v", err)
	}
}

func TestSynthesizeDeterministic(t *testing.T) {
	a := synth(t, zipf(1, 0.3), 4, 32, 4, 200)
	b := synth(t, zipf(1, 0.3), 4, 32, 4, 200)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same parameters, different traces")
	}
	g := zipf(1, 0.3)
	g.Stream = 2
	c := synth(t, g, 4, 32, 4, 200)
	if reflect.DeepEqual(a.experts, c.experts) {
		t.Fatal("another stream gave the same trace")
	}
	// Same model (seed): the hottest expert of each layer agrees across streams.
	ha, hc := a.Counts(), c.Counts()
	agree := 0
	for l := range 4 {
		if argmax(ha[l*32:(l+1)*32]) == argmax(hc[l*32:(l+1)*32]) {
			agree++
		}
	}
	if agree < 3 {
		t.Errorf("hottest expert agrees in %d of 4 layers across streams of one model", agree)
	}
	g.Seed = 2
	d := synth(t, g, 4, 32, 4, 200)
	hd := d.Counts()
	agree = 0
	for l := range 4 {
		if argmax(ha[l*32:(l+1)*32]) == argmax(hd[l*32:(l+1)*32]) {
			agree++
		}
	}
	if agree > 1 {
		t.Errorf("another model (seed) has the same hottest expert in %d of 4 layers", agree)
	}
}

func argmax(x []float64) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// With top-1 routing and no reuse the selection counts are Zipf samples: the
// fit recovers s.
func TestZipfExponentRecovered(t *testing.T) {
	for _, s := range []float64{0.5, 1, 1.5} {
		tr := synth(t, zipf(s, 0), 2, 64, 1, 40000)
		if got := tr.Stats().ZipfS; math.Abs(got-s) > 0.08 {
			t.Errorf("s = %v: fitted %.3f", s, got)
		}
	}
	if got := synth(t, zipf(0, 0), 2, 64, 1, 40000).Stats().ZipfS; math.Abs(got) > 0.05 {
		t.Errorf("uniform: fitted %.3f, want ≈ 0", got)
	}
}

// With uniform popularity the fraction of a token's experts the previous
// token also used is reuse plus the chance overlap of the fresh draws.
func TestReuseProbability(t *testing.T) {
	const E, k = 256, 8
	for _, r := range []float64{0, 0.3, 0.7} {
		tr := synth(t, zipf(0, r), 16, E, k, 1000)
		// E[fresh] = k(1−r); each fresh draw hits one of the ≈ k(1−r) unkept
		// previous experts with probability ≈ k(1−r)/E.
		want := r + (1-r)*(1-r)*k/E
		if got := tr.Stats().Reuse; math.Abs(got-want) > 0.01 {
			t.Errorf("reuse %v: measured %.4f, want %.4f", r, got, want)
		}
	}
}

func TestShiftChangesPopularity(t *testing.T) {
	g := zipf(2, 0)
	flips := func(g Generator) int {
		tr := synth(t, g, 8, 64, 2, 400)
		n := 0
		for l := range 8 {
			first, second := make([]float64, 64), make([]float64, 64)
			for tok := range 400 {
				for _, e := range tr.Step(tok, l) {
					if tok < 200 {
						first[e]++
					} else {
						second[e]++
					}
				}
			}
			if argmax(first) != argmax(second) {
				n++
			}
		}
		return n
	}
	if n := flips(g); n > 1 {
		t.Errorf("without shift the hottest expert changed in %d of 8 layers", n)
	}
	g.Shift = 200
	if n := flips(g); n < 6 {
		t.Errorf("with shift=200 the hottest expert changed in only %d of 8 layers", n)
	}
}

func TestStats(t *testing.T) {
	h := Header{Format: Format, Version: Version, ModelRoot: root, Layers: 1, Experts: 4, TopK: 2, Source: Measured}
	tr, err := New(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range [][]int{{0, 1}, {0, 2}, {0, 1}, {3, 1}} {
		if err := tr.Append([][]int{set}); err != nil {
			t.Fatal(err)
		}
	}
	// counts 0:3 1:3 2:1 3:1 of 8; reuse: {0}, {0}, {1}, one of two each time → 3/6.
	s := tr.Stats()
	if s.Tokens != 4 || math.Abs(s.Reuse-0.5) > 1e-12 || s.TopShare != 3.0/8 || s.Coverage90 != 1 {
		t.Errorf("stats %+v", s)
	}
	if err := tr.Append([][]int{{0, 0}}); err == nil {
		t.Error("Append accepted a duplicate expert")
	}
}

func TestParseSynthetic(t *testing.T) {
	g, err := ParseSynthetic("zipf:s=0.8,reuse=0.5,shift=100,seed=7,stream=9")
	if err != nil || g != (Generator{Name: "zipf", S: 0.8, Reuse: 0.5, Shift: 100, Seed: 7, Stream: 9}) {
		t.Errorf("%+v %v", g, err)
	}
	if g, err := ParseSynthetic("zipf:reuse=0,s=1"); err != nil || g.Seed != 1 || g.Stream != 1 {
		t.Errorf("defaults: %+v %v", g, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"uniform:s=1,reuse=0", "want zipf:"},
		{"zipf:s=1", "reuse is required"},
		{"zipf:s=1,reuse=0,s=2", "s given twice"},
		{"zipf:s=1,reuse=0,alpha=2", `unknown parameter "alpha"`},
		{"zipf:s=x,reuse=0", "s: strconv.ParseFloat"},
		{"zipf:s=1,reuse=2", "reuse 2: want a probability"},
		{"zipf:s=NaN,reuse=0", "s NaN"},
		{"zipf:s=1,reuse=0,shift=-3", "shift -3 is negative"},
		{"zipf:s=1,reuse", `"reuse" is not key=value`},
	} {
		if _, err := ParseSynthetic(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
	if _, err := Synthesize(zipf(1, 0), 48, 256, 8, 1<<20); err == nil {
		t.Error("oversized synthesis accepted")
	}
}

func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	tr, _ := Synthesize(zipf(1, 0.5), 2, 8, 2, 3)
	tr.WriteTo(&buf)
	f.Add(buf.Bytes())
	f.Add([]byte(`{"format":"tarfa-routing-trace","version":1,"model_root":"","layers":1,"experts":2,"top_k":1,"source":"synthetic","generator":{"name":"zipf","s":0,"reuse":0,"shift":0,"seed":1,"stream":1}}` + "\n" + `{"token":0,"layer":0,"experts":[1]}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := ReadAll(bytes.NewReader(b), 64)
		if err != nil {
			return
		}
		// What reads back writes out and reads back the same.
		var out bytes.Buffer
		if _, err := tr.WriteTo(&out); err != nil {
			t.Fatalf("write of a trace that read: %v", err)
		}
		again, err := ReadAll(&out, 64)
		if err != nil || !reflect.DeepEqual(again.experts, tr.experts) || again.tokens != tr.tokens {
			t.Fatalf("re-read: %v", err)
		}
	})
}

// TestHeaderAndSizeChecks: a measured header with a generator or a model
// root that is no digest, a token of the wrong number of layers, and a
// synthetic trace over MaxSynthesize experts are refused.
func TestHeaderAndSizeChecks(t *testing.T) {
	h := Header{Format: Format, Version: Version, ModelRoot: root, Layers: 2, Experts: 4, TopK: 2, Source: Measured}
	withGen := h
	g := zipf(1, 0.3)
	withGen.Generator = &g
	badRoot := h
	badRoot.ModelRoot = "abc"
	for _, c := range []struct {
		h    Header
		want string
	}{{withGen, "a measured trace has no generator"}, {badRoot, "model_root:"}} {
		if _, err := NewWriter(io.Discard, c.h); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.h, err, c.want)
		}
	}
	tr, err := New(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Append([][]int{{0, 1}}); err == nil || !strings.Contains(err.Error(), "token 0 has 1 layers, want 2") {
		t.Errorf("short token: %v", err)
	}
	if _, err := Synthesize(zipf(1, 0.3), 1024, 4, 4, 1<<16+1); err == nil || !strings.Contains(err.Error(), "experts in all") {
		t.Errorf("oversized synthetic trace: %v", err)
	}
}

// PopularityOf gives the order each epoch's routing is drawn from: the
// expert of rank 0 is the one a strongly skewed layer uses most in that
// epoch, before and after every shift.
func TestPopularityOf(t *testing.T) {
	const L, E, k, T = 8, 64, 2, 400
	g := zipf(2, 0.3)
	g.Shift = 100
	tr := synth(t, g, L, E, k, T)
	p, err := PopularityOf(g, L, E, k, T)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Ranks) != T/g.Shift || len(p.Weights) != E {
		t.Fatalf("%d epochs, %d weights: want %d, %d", len(p.Ranks), len(p.Weights), T/g.Shift, E)
	}
	if p.Weights[0] != 1<<40 || p.Weights[2] != math.Round(math.Ldexp(1.0/9, 40)) {
		t.Errorf("weights %v, %v: want 2^40 and round(2^40/9)", p.Weights[0], p.Weights[2])
	}
	for i, ranks := range p.Ranks {
		for l := range L {
			seen := make([]bool, E)
			top := -1
			for e, r := range ranks[l*E : (l+1)*E] {
				if r < 0 || int(r) >= E || seen[r] {
					t.Fatalf("epoch %d layer %d: ranks are not a permutation", i, l)
				}
				seen[r] = true
				if r == 0 {
					top = e
				}
			}
			counts := make([]float64, E)
			for tok := i * g.Shift; tok < (i+1)*g.Shift; tok++ {
				for _, e := range tr.Step(tok, l) {
					counts[e]++
				}
			}
			if argmax(counts) != top {
				t.Errorf("epoch %d layer %d: rank 0 is expert %d, the most used %d", i, l, top, argmax(counts))
			}
		}
	}
	g.Shift = 0
	if p, err := PopularityOf(g, L, E, k, T); err != nil || len(p.Ranks) != 1 {
		t.Errorf("no shift: %v, %v", p, err)
	}
	for _, tc := range []struct {
		g                     Generator
		layers, experts, k, n int
		want                  string
	}{
		{zipf(5, 0), L, E, k, T, "generator: s 5"},
		{zipf(1, 0), L, E, E + 1, T, "top-65"},
		{zipf(1, 0), 0, E, k, T, "0 layers"},
		{zipf(1, 0), L, E, k, 0, "0 tokens"},
		{Generator{Name: "zipf", S: 1, Shift: 1}, 64, 1024, 1, 257, "popularity of 257 epochs (257 tokens, shift 1) × 64 layers × 1024 experts: over 16777216 ranks"},
	} {
		if _, err := PopularityOf(tc.g, tc.layers, tc.experts, tc.k, tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("PopularityOf(%v, %d, %d, %d, %d): %v, want %q", tc.g, tc.layers, tc.experts, tc.k, tc.n, err, tc.want)
		}
	}
}

// A header's optional expert_bytes is written when set, read back, absent
// from older traces, and refused when not positive.
func TestHeaderExpertBytes(t *testing.T) {
	h := Header{Format: Format, Version: Version, ModelRoot: root, Layers: 1, Experts: 4, TopK: 2, ExpertBytes: 12288, Source: Measured}
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(0, 0, []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if !strings.Contains(buf.String(), `"expert_bytes":12288`) {
		t.Fatalf("header: %s", buf.String())
	}
	text := buf.String()
	back, err := ReadAll(strings.NewReader(text), 10)
	if err != nil || back.Header.ExpertBytes != 12288 {
		t.Fatalf("read back: %v %+v", err, back)
	}
	if back, err := ReadAll(strings.NewReader(strings.Replace(text, `"expert_bytes":12288,`, "", 1)), 10); err != nil || back.Header.ExpertBytes != 0 {
		t.Errorf("without expert_bytes: %v", err)
	}
	for _, bad := range []string{`"expert_bytes":0,`, `"expert_bytes":-5,`} {
		if _, err := ReadAll(strings.NewReader(strings.Replace(text, `"expert_bytes":12288,`, bad, 1)), 10); err == nil || !strings.Contains(err.Error(), "expert_bytes") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
