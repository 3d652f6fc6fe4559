// Package charts draws the charts of BENCHMARKS.md from the JSON results
// of tarfa bench decode (validation/decodebench): for every result file,
// the per-token time of each decode figure by what it measures, the RAM
// tier's hit rates, seconds per token against the RAM budget and, for a
// device backend, where the routed experts were computed. The PNGs are
// byte-identical across runs (gonum.org/v1/plot with its embedded fonts),
// so they are committed next to the JSON they are drawn from and a stale
// chart shows in a diff.
package charts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// MaxResultBytes bounds a result file (a bench decode result is tens of KB).
const MaxResultBytes = 16 << 20

// maxFigures bounds the decode figures of one result.
const maxFigures = 64

// summary is a benchrun.Summary (the fields charts read).
type summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
}

type bandwidth struct {
	GBps summary `json:"gbps"`
}

// decode is a decodebench.Decode (the fields charts read).
type decode struct {
	Name    string `json:"name"`
	Backend struct {
		Name string `json:"backend"`
	} `json:"backend"`
	RAMFraction float64 `json:"ram_fraction"`
	RAMBudget   int64   `json:"ram_budget"`
	Warm        bool    `json:"warm"`

	SecondsPerToken      summary `json:"seconds_per_token"`
	StorageBytesPerToken summary `json:"storage_bytes_per_token"`
	HitRate              summary `json:"hit_rate"`
	BoundSecondsPerToken float64 `json:"bound_seconds_per_token"`
	Predicted            summary `json:"predicted_seconds_per_token"`
	PredictedHitRate     summary `json:"predicted_hit_rate"`
	Stream               summary `json:"stream_seconds_per_token"`
	Gap                  summary `json:"gap_seconds_per_token"`

	H2DSeconds    summary `json:"h2d_seconds_per_token"`
	KernelSeconds summary `json:"kernel_seconds_per_token"`
	HashedBytes   summary `json:"hashed_bytes_per_token"`
	Hashers       int     `json:"hashers"`
	OnDevice      summary `json:"experts_on_device_per_token"`
	Resident      summary `json:"experts_resident_per_token"`
	HostFallback  summary `json:"host_fallback_experts_per_token"`
	OnHost        summary `json:"experts_on_host_per_token"`
}

// Result is the part of a decodebench.Result the charts are drawn from.
type Result struct {
	Threads int `json:"threads"`
	Host    struct {
		GOMAXPROCS int `json:"gomaxprocs"`
	} `json:"host"`
	Raw         bandwidth `json:"raw"`
	HashPerCore bandwidth `json:"hash_per_core"`
	Decode      []decode  `json:"decode"`
}

// Parse reads a bench decode result from r (at most MaxResultBytes) and
// checks what the charts use: at least one decode figure, every value
// finite and not negative. name names the input in errors.
func Parse(name string, r io.Reader) (*Result, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxResultBytes+1))
	if err != nil {
		return nil, fmt.Errorf("charts: %s: %w", name, err)
	}
	if len(data) > MaxResultBytes {
		return nil, fmt.Errorf("charts: %s: more than %d bytes, not a bench decode result", name, MaxResultBytes)
	}
	var res Result
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, fmt.Errorf("charts: %s: %w", name, err)
	}
	if len(res.Decode) == 0 || len(res.Decode) > maxFigures {
		return nil, fmt.Errorf("charts: %s: %d decode figures, want 1 to %d", name, len(res.Decode), maxFigures)
	}
	check := func(field string, v float64) error {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("charts: %s: %s is %v, want a finite value ≥ 0", name, field, v)
		}
		return nil
	}
	if err := errors.Join(check("raw.gbps.median", res.Raw.GBps.Median), check("hash_per_core.gbps.median", res.HashPerCore.GBps.Median)); err != nil {
		return nil, err
	}
	for i := range res.Decode {
		d := &res.Decode[i]
		if d.Backend.Name == "" {
			d.Backend.Name = "cpu" // results from before the backend was recorded
		}
		for _, f := range []struct {
			field string
			v     float64
		}{
			{"ram_fraction", d.RAMFraction}, {"ram_budget", float64(d.RAMBudget)},
			{"seconds_per_token.median", d.SecondsPerToken.Median}, {"storage_bytes_per_token.median", d.StorageBytesPerToken.Median},
			{"hit_rate.median", d.HitRate.Median}, {"bound_seconds_per_token", d.BoundSecondsPerToken},
			{"predicted_seconds_per_token.median", d.Predicted.Median}, {"predicted_hit_rate.median", d.PredictedHitRate.Median},
			{"stream_seconds_per_token.median", d.Stream.Median}, {"gap_seconds_per_token.median", d.Gap.Median},
			{"h2d_seconds_per_token.median", d.H2DSeconds.Median}, {"kernel_seconds_per_token.median", d.KernelSeconds.Median},
			{"hashed_bytes_per_token.median", d.HashedBytes.Median}, {"hashers", float64(d.Hashers)},
			{"experts_on_device_per_token.median", d.OnDevice.Median}, {"experts_resident_per_token.median", d.Resident.Median},
			{"host_fallback_experts_per_token.median", d.HostFallback.Median}, {"experts_on_host_per_token.median", d.OnHost.Median},
		} {
			if err := check(fmt.Sprintf("decode[%d] (%q) %s", i, d.Name, f.field), f.v); err != nil {
				return nil, err
			}
		}
		if d.HitRate.Median > 1 || d.PredictedHitRate.Median > 1 {
			return nil, fmt.Errorf("charts: %s: decode[%d] (%q): hit rate %v (simulated %v), want at most 1", name, i, d.Name, d.HitRate.Median, d.PredictedHitRate.Median)
		}
		if d.SecondsPerToken.N == 0 {
			return nil, fmt.Errorf("charts: %s: decode[%d] (%q) has no measured rounds", name, i, d.Name)
		}
	}
	return &res, nil
}

// Chart is one drawn chart: Name is its file name suffix ("breakdown"),
// PNG its bytes.
type Chart struct {
	Name string
	PNG  []byte
}

// Draw draws res's charts; title heads them (the result's file name).
func Draw(title string, res *Result) ([]Chart, error) {
	var out []Chart
	for _, c := range []struct {
		name string
		f    func(string, *Result) (*plot.Plot, error)
		want bool
	}{
		{"breakdown", breakdown, true},
		{"hits", hits, true},
		{"budget", budget, true},
		{"split", split, res.device()},
	} {
		if !c.want {
			continue
		}
		p, err := c.f(title, res)
		if err != nil {
			return nil, fmt.Errorf("charts: %s %s: %w", title, c.name, err)
		}
		png, err := render(p)
		if err != nil {
			return nil, fmt.Errorf("charts: %s %s: %w", title, c.name, err)
		}
		out = append(out, Chart{Name: c.name, PNG: png})
	}
	return out, nil
}

func render(p *plot.Plot) ([]byte, error) {
	wt, err := p.WriterTo(18*vg.Centimeter, 10*vg.Centimeter, "png")
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// device reports whether a decode figure ran on a device backend.
func (res *Result) device() bool {
	for _, d := range res.Decode {
		if d.Backend.Name != "cpu" {
			return true
		}
	}
	return false
}

// label says what the figures ran on.
func label(res *Result) string {
	var names []string
	for _, d := range res.Decode {
		if !slices.Contains(names, d.Backend.Name) {
			names = append(names, d.Backend.Name)
		}
	}
	return "backend " + strings.Join(names, ", ")
}

// bars adds one bar series per figure over the nominal categories: values
// [figure][category].
func bars(p *plot.Plot, figures []string, values [][]float64) error {
	w := vg.Points(float64(60 / max(len(figures), 1)))
	top := 0.0
	for _, v := range values {
		for _, x := range v {
			top = math.Max(top, x)
		}
	}
	if top > 0 {
		p.Y.Max = top * (1.15 + 0.1*float64(len(figures))) // room for the legend
	}
	for i, name := range figures {
		b, err := plotter.NewBarChart(plotter.Values(values[i]), w)
		if err != nil {
			return err
		}
		b.LineStyle.Width = 0
		b.Color = plotutil.Color(i)
		b.Offset = w * vg.Length(float64(i)-float64(len(figures)-1)/2)
		p.Add(b)
		p.Legend.Add(name, b)
	}
	p.Legend.Top = true
	return nil
}

// breakdown: per decode figure, its measured seconds per token and what
// they are made of, as the result measured them. The parts overlap (the
// hierarchy reads, hashes and computes in a pipeline), so they need not
// sum to the total: storage is the bytes read ÷ the raw read bandwidth of
// the same run, hash the bytes hashed ÷ the one-core hash rate ÷ the
// hashers, the device parts CUDA event times.
func breakdown(title string, res *Result) (*plot.Plot, error) {
	p := newPlot()
	p.Title.Text = title + ": seconds per decoded token by part (parts overlap)"
	p.Y.Label.Text = "seconds per token (median)"
	cats := []string{"measured", "in Streams", "outside Streams", "storage (÷ raw)", "hash (÷ rate·hashers)", "host→device", "GPU kernels"}
	var names []string
	var vals [][]float64
	for _, d := range res.Decode {
		// Results from before the hashed bytes and hashers were recorded:
		// the hierarchy hashed what it read, with one hasher per core.
		hashed, hashers := d.HashedBytes.Median, d.Hashers
		if d.HashedBytes.N == 0 {
			hashed = d.StorageBytesPerToken.Median
		}
		if hashers == 0 {
			hashers = res.Host.GOMAXPROCS
		}
		hash := 0.0
		if r := res.HashPerCore.GBps.Median; r > 0 && hashers > 0 {
			hash = hashed / (r * 1e9) / float64(hashers)
		}
		names = append(names, d.Name)
		vals = append(vals, []float64{d.SecondsPerToken.Median, d.Stream.Median, d.Gap.Median, d.BoundSecondsPerToken, hash, d.H2DSeconds.Median, d.KernelSeconds.Median})
	}
	if err := bars(p, names, vals); err != nil {
		return nil, err
	}
	p.NominalX(cats...)
	p.X.Label.Text = label(res)
	p.X.Tick.Label.Font.Size = vg.Points(7)
	return p, nil
}

// hits: the RAM tier's hit rate of every decode figure, measured and as
// the calibrated simulator replayed it.
func hits(title string, res *Result) (*plot.Plot, error) {
	p := newPlot()
	p.Title.Text = title + ": RAM-tier hit rate of the expert uses"
	p.Y.Label.Text = "hits ÷ expert uses (median)"
	p.Y.Min, p.Y.Max = 0, 1
	var names []string
	var measured, simulated []float64
	for _, d := range res.Decode {
		names = append(names, d.Name)
		measured = append(measured, d.HitRate.Median)
		simulated = append(simulated, d.PredictedHitRate.Median)
	}
	if err := bars(p, []string{"measured", "simulator"}, [][]float64{measured, simulated}); err != nil {
		return nil, err
	}
	p.NominalX(names...)
	p.X.Label.Text = label(res)
	return p, nil
}

// budget: seconds per token against the RAM budget, cold and warm, with
// the storage bound of each.
func budget(title string, res *Result) (*plot.Plot, error) {
	p := newPlot()
	p.Title.Text = title + ": seconds per token against the RAM budget"
	p.X.Label.Text = "RAM budget, GiB of verified experts (" + label(res) + ")"
	p.Y.Label.Text = "seconds per token (median)"
	p.Y.Min = 0
	// One series per backend (the figure name's part before "RAM") and
	// state.
	var groups []string
	for _, d := range res.Decode {
		if g := group(d.Name); !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	i := -1
	for _, g := range groups {
		for _, warm := range []bool{false, true} {
			i++
			var meas, bound plotter.XYs
			for _, d := range res.Decode {
				if d.Warm != warm || group(d.Name) != g {
					continue
				}
				x := float64(d.RAMBudget) / (1 << 30)
				meas = append(meas, plotter.XY{X: x, Y: d.SecondsPerToken.Median})
				bound = append(bound, plotter.XY{X: x, Y: d.BoundSecondsPerToken})
			}
			if len(meas) == 0 {
				continue
			}
			slices.SortStableFunc(meas, func(a, b plotter.XY) int { return cmpFloat(a.X, b.X) })
			slices.SortStableFunc(bound, func(a, b plotter.XY) int { return cmpFloat(a.X, b.X) })
			state := g + map[bool]string{false: "cold", true: "warm"}[warm]
			for j, s := range []struct {
				xy   plotter.XYs
				name string
			}{{meas, "measured, " + state}, {bound, "storage bound, " + state}} {
				l, pts, err := plotter.NewLinePoints(s.xy)
				if err != nil {
					return nil, err
				}
				c := plotutil.Color(i)
				l.Color, pts.Color = c, c
				pts.Shape = draw.CircleGlyph{}
				if j == 1 {
					l.Dashes = plotutil.Dashes(1)
					pts.Shape = draw.BoxGlyph{}
				}
				p.Add(l, pts)
				p.Legend.Add(s.name, l, pts)
			}
		}
	}
	top := 0.0
	for _, d := range res.Decode {
		top = math.Max(top, math.Max(d.SecondsPerToken.Median, d.BoundSecondsPerToken))
	}
	p.Y.Max = 1.35 * top // room for the legend
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p, nil
}

func newPlot() *plot.Plot {
	p := plot.New()
	p.Title.TextStyle.Font.Size = vg.Points(10)
	return p
}

// group is the backend part of a decode figure's name ("cuda 16 GiB
// auto, " of "cuda 16 GiB auto, RAM 27%, cold"; "" for a CPU-only result).
func group(name string) string {
	if i := strings.Index(name, "RAM "); i > 0 {
		return name[:i]
	}
	return ""
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// split: where each decode figure's routed experts were computed, per
// token: from copies resident in device memory, streamed to the device,
// on the host CPU by the placement, on the host by the backend for want
// of a device slot.
func split(title string, res *Result) (*plot.Plot, error) {
	p := newPlot()
	p.Title.Text = title + ": routed experts per token, by where they were computed"
	p.Y.Label.Text = "expert uses per token (median)"
	var names []string
	var resident, streamed, host, fallback, cpuBackend []float64
	for _, d := range res.Decode {
		names = append(names, d.Name)
		if d.Backend.Name == "cpu" {
			resident, streamed, host, fallback = append(resident, 0), append(streamed, 0), append(host, 0), append(fallback, 0)
			cpuBackend = append(cpuBackend, d.OnDevice.Median)
			continue
		}
		cpuBackend = append(cpuBackend, 0)
		resident = append(resident, d.Resident.Median)
		streamed = append(streamed, math.Max(0, d.OnDevice.Median-d.Resident.Median-d.HostFallback.Median))
		host = append(host, d.OnHost.Median)
		fallback = append(fallback, d.HostFallback.Median)
	}
	if err := bars(p, []string{"device, resident", "device, streamed", "host CPU (placement)", "host (no device slot)", "cpu backend"},
		[][]float64{resident, streamed, host, fallback, cpuBackend}); err != nil {
		return nil, err
	}
	p.NominalX(names...)
	p.X.Label.Text = label(res)
	return p, nil
}
