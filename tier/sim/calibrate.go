package sim

import (
	"fmt"
	"math"

	"github.com/tarfa-ai/tarfa/tier/trace"
)

// Phase names a measured figure that Calibrate fits a Hardware number to.
type Phase string

// The phases, with the Sample fields each uses.
const (
	// PhaseRead: Count read requests of Bytes in all, at the model's queue
	// depth, took Seconds (wall). Fits StorageGBps and, from two or more
	// samples of different request sizes, StorageLatencyUS.
	PhaseRead Phase = "storage-read"
	// PhaseHash: Bytes verified on Cores cores took Seconds. Fits
	// HashGBpsPerCore.
	PhaseHash Phase = "hash"
	// PhaseCopy: Bytes copied host to device took Seconds. Fits H2DGBps.
	PhaseCopy Phase = "h2d"
	// PhaseGPUExpert, PhaseCPUExpert: Count expert applications (one expert,
	// one token) took Seconds. Fit GPUExpertUS, CPUExpertUS.
	PhaseGPUExpert Phase = "gpu-expert"
	PhaseCPUExpert Phase = "cpu-expert"
	// PhaseDense: Count layer-tokens of non-expert work took Seconds. Fits
	// DenseMSPerLayer.
	PhaseDense Phase = "dense"
	// PhaseToken: Count tokens of per-token work outside the layers took
	// Seconds. Fits TokenMS.
	PhaseToken Phase = "token"
)

// Sample is one measured figure.
type Sample struct {
	Phase   Phase   `json:"phase"`
	Bytes   int64   `json:"bytes,omitempty"`
	Count   int64   `json:"count,omitempty"`
	Cores   int     `json:"cores,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Fit is what Calibrate did to one Hardware number.
type Fit struct {
	Phase   Phase   `json:"phase"`
	Param   string  `json:"param"`
	Before  float64 `json:"before"`
	After   float64 `json:"after"`
	Samples int     `json:"samples"`
	// MaxError is the largest |model − measured| ÷ measured over the
	// phase's samples, with the fitted numbers.
	MaxError float64 `json:"max_error"`
}

// Calibrate fits h's numbers to measured per-phase figures and returns the
// fitted hardware with one Fit per number it changed. Numbers no sample
// speaks to keep their value. A sample missing what its phase needs, or a
// set of samples that gives a non-physical value (a negative bandwidth), is
// an error naming the sample.
func Calibrate(h Hardware, samples []Sample) (Hardware, []Fit, error) {
	by := map[Phase][]Sample{}
	for i, s := range samples {
		if err := checkSample(s); err != nil {
			return h, nil, fmt.Errorf("sim: calibration sample %d (%s): %w", i, s.Phase, err)
		}
		by[s.Phase] = append(by[s.Phase], s)
	}
	out := h
	var fits []Fit
	if ss := by[PhaseRead]; len(ss) > 0 {
		f, err := fitRead(&out, ss)
		if err != nil {
			return h, nil, err
		}
		fits = append(fits, f...)
	}
	rate := func(p Phase, param string, dst *float64, value func(ss []Sample) float64, model func(s Sample) float64) {
		ss := by[p]
		if len(ss) == 0 {
			return
		}
		before := *dst
		*dst = value(ss)
		fits = append(fits, Fit{Phase: p, Param: param, Before: before, After: *dst, Samples: len(ss), MaxError: maxErr(ss, model)})
	}
	sum := func(ss []Sample, f func(Sample) float64) float64 {
		var t float64
		for _, s := range ss {
			t += f(s)
		}
		return t
	}
	secs := func(s Sample) float64 { return s.Seconds }
	rate(PhaseHash, "HashGBpsPerCore", &out.HashGBpsPerCore,
		func(ss []Sample) float64 {
			return sum(ss, func(s Sample) float64 { return float64(s.Bytes) }) / sum(ss, func(s Sample) float64 { return s.Seconds * float64(s.Cores) }) / 1e9
		},
		func(s Sample) float64 { return float64(s.Bytes) / (out.HashGBpsPerCore * 1e9 * float64(s.Cores)) })
	rate(PhaseCopy, "H2DGBps", &out.H2DGBps,
		func(ss []Sample) float64 {
			return sum(ss, func(s Sample) float64 { return float64(s.Bytes) }) / sum(ss, secs) / 1e9
		},
		func(s Sample) float64 { return float64(s.Bytes) / (out.H2DGBps * 1e9) })
	per := func(scale float64) func(ss []Sample) float64 {
		return func(ss []Sample) float64 {
			return sum(ss, secs) / sum(ss, func(s Sample) float64 { return float64(s.Count) }) * scale
		}
	}
	rate(PhaseGPUExpert, "GPUExpertUS", &out.GPUExpertUS, per(1e6), func(s Sample) float64 { return float64(s.Count) * out.GPUExpertUS * 1e-6 })
	rate(PhaseCPUExpert, "CPUExpertUS", &out.CPUExpertUS, per(1e6), func(s Sample) float64 { return float64(s.Count) * out.CPUExpertUS * 1e-6 })
	rate(PhaseDense, "DenseMSPerLayer", &out.DenseMSPerLayer, per(1e3), func(s Sample) float64 { return float64(s.Count) * out.DenseMSPerLayer * 1e-3 })
	rate(PhaseToken, "TokenMS", &out.TokenMS, per(1e3), func(s Sample) float64 { return float64(s.Count) * out.TokenMS * 1e-3 })
	if err := out.Check(); err != nil {
		return h, nil, fmt.Errorf("sim: calibration gave unusable hardware: %w", err)
	}
	return out, fits, nil
}

func checkSample(s Sample) error {
	if !(s.Seconds > 0) || math.IsInf(s.Seconds, 0) {
		return fmt.Errorf("seconds %v: want a positive finite time", s.Seconds)
	}
	switch s.Phase {
	case PhaseRead:
		if s.Bytes <= 0 || s.Count <= 0 {
			return fmt.Errorf("needs bytes and count (requests) > 0, got %d and %d", s.Bytes, s.Count)
		}
	case PhaseHash:
		if s.Bytes <= 0 || s.Cores <= 0 {
			return fmt.Errorf("needs bytes and cores > 0, got %d and %d", s.Bytes, s.Cores)
		}
	case PhaseCopy:
		if s.Bytes <= 0 {
			return fmt.Errorf("needs bytes > 0, got %d", s.Bytes)
		}
	case PhaseGPUExpert, PhaseCPUExpert, PhaseDense, PhaseToken:
		if s.Count <= 0 {
			return fmt.Errorf("needs count > 0, got %d", s.Count)
		}
	default:
		return fmt.Errorf("unknown phase %q", s.Phase)
	}
	return nil
}

func maxErr(ss []Sample, model func(Sample) float64) float64 {
	var e float64
	for _, s := range ss {
		e = max(e, math.Abs(model(s)-s.Seconds)/s.Seconds)
	}
	return e
}

// fitRead fits seconds = latency·⌈requests/queue depth⌉ + bytes/bandwidth
// by least squares; with samples that cannot separate the two (one sample,
// or all of one request size) it keeps the latency and fits the bandwidth.
func fitRead(h *Hardware, ss []Sample) ([]Fit, error) {
	x1 := func(s Sample) float64 { return math.Ceil(float64(s.Count) / float64(h.QueueDepth)) }
	x2 := func(s Sample) float64 { return float64(s.Bytes) }
	var a11, a12, a22, b1, b2 float64
	for _, s := range ss {
		u, v := x1(s), x2(s)
		a11, a12, a22 = a11+u*u, a12+u*v, a22+v*v
		b1, b2 = b1+u*s.Seconds, b2+v*s.Seconds
	}
	lat0, bw0 := h.StorageLatencyUS, h.StorageGBps
	lat, inv := lat0*1e-6, 0.0
	det := a11*a22 - a12*a12
	if len(ss) >= 2 && det > 1e-9*a11*a22 {
		lat = (b1*a22 - b2*a12) / det
		inv = (a11*b2 - a12*b1) / det
	}
	if inv <= 0 || lat < 0 { // not separable, or no physical solution: keep the latency
		lat = max(lat0*1e-6, 0)
		inv = (b2 - lat*a12) / a22
	}
	if inv <= 0 {
		return nil, fmt.Errorf("sim: storage-read samples leave no time for the bytes after %.0f µs latency per request: no positive bandwidth fits", lat*1e6)
	}
	h.StorageLatencyUS = lat * 1e6
	h.StorageGBps = 1 / inv / 1e9
	model := func(s Sample) float64 { return lat*x1(s) + x2(s)*inv }
	e := maxErr(ss, model)
	return []Fit{
		{Phase: PhaseRead, Param: "StorageGBps", Before: bw0, After: h.StorageGBps, Samples: len(ss), MaxError: e},
		{Phase: PhaseRead, Param: "StorageLatencyUS", Before: lat0, After: h.StorageLatencyUS, Samples: len(ss), MaxError: e},
	}, nil
}

// Tolerance is how close a calibrated simulator must predict a measured
// run's time per token.
const Tolerance = 0.15

// Validation compares a prediction with a measured run.
type Validation struct {
	Trace     string  `json:"trace"`
	Measured  float64 `json:"measured_seconds_per_token"`
	Predicted float64 `json:"predicted_seconds_per_token"`
	Error     float64 `json:"error"` // (predicted − measured) ÷ measured
	Within    bool    `json:"within_tolerance"`
}

// Validate simulates the measured run (its routing trace and the hierarchy
// it ran on) and compares the predicted mean time per token with the
// measured one.
func Validate(tr *trace.Trace, cfg Config, measuredSecondsPerToken float64) (Validation, error) {
	if !(measuredSecondsPerToken > 0) || math.IsInf(measuredSecondsPerToken, 0) {
		return Validation{}, fmt.Errorf("sim: measured %v s/token: want a positive finite time", measuredSecondsPerToken)
	}
	if tr.Header.Source != trace.Measured {
		return Validation{}, fmt.Errorf("sim: validation needs the measured run's own trace, not a %s one", tr.Header.Source)
	}
	r, err := Run(tr, cfg)
	if err != nil {
		return Validation{}, err
	}
	v := Validation{Trace: tr.Header.Label(), Measured: measuredSecondsPerToken, Predicted: r.SecondsPerToken.Mean}
	v.Error = (v.Predicted - v.Measured) / v.Measured
	v.Within = math.Abs(v.Error) <= Tolerance
	return v, nil
}
