package server

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/runner"
	"github.com/tarfa-ai/tarfa/tier"
)

// metrics are the server's Prometheus metrics, on a registry of its own.
// Labels are bounded: endpoint (the routes), status code, tier.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	prompt    prometheus.Counter
	generated prometheus.Counter
	verified  prometheus.Counter
	uses      *prometheus.CounterVec
	ttft      prometheus.Histogram
	decode    prometheus.Histogram
}

var endpoints = map[string]bool{"/v1/chat/completions": true, "/v1/completions": true, "/v1/models": true, "/metrics": true}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tarfa_requests_total",
		Help: "HTTP requests by endpoint and status code (499: the client went away)."}, []string{"endpoint", "code"})
	m.prompt = prometheus.NewCounter(prometheus.CounterOpts{Name: "tarfa_prompt_tokens_total", Help: "Prompt tokens of finished responses."})
	m.generated = prometheus.NewCounter(prometheus.CounterOpts{Name: "tarfa_generated_tokens_total", Help: "Tokens generated for finished responses."})
	m.verified = prometheus.NewCounter(prometheus.CounterOpts{Name: "tarfa_verified_bytes_total",
		Help: "Bytes hashed to verify weights: the non-expert tensors at load and the routed experts read for finished responses (BLAKE3)."})
	m.uses = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tarfa_expert_uses_total",
		Help: "Routed-expert fetches of finished responses by where the verified bytes came from (storage: read and hashed; ram, device: a resident verified copy)."}, []string{"tier"})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tarfa_time_to_first_token_seconds",
		Help: "Queue wait plus prefill of finished responses.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)})
	m.decode = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tarfa_decode_tokens_per_second",
		Help: "Decode tokens per second of finished responses of at least two tokens.", Buckets: prometheus.ExponentialBuckets(0.5, 2, 14)})
	gauge := func(name, help string, f func(runner.SchedStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if st := s.state.Load(); st != nil {
				return f(st.sched.Stats())
			}
			return 0
		})
	}
	counter := func(name, help string, f func(runner.SchedStats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			if st := s.state.Load(); st != nil {
				return f(st.sched.Stats())
			}
			return 0
		})
	}
	tierCounter := func(name, help string, f func(tier.Stats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 {
			if st := s.state.Load(); st != nil && st.r.Tier != nil {
				return f(st.r.Tier.Stats())
			}
			return 0
		})
	}
	m.reg.MustRegister(m.requests, m.prompt, m.generated, m.verified, m.uses, m.ttft, m.decode,
		gauge("tarfa_queue_depth", "Requests waiting for admission.", func(st runner.SchedStats) float64 { return float64(st.Queued) }),
		gauge("tarfa_active_sequences", "Sequences being prefilled or decoded.", func(st runner.SchedStats) float64 { return float64(st.Active) }),
		gauge("tarfa_state_reserved_bytes", "KV cache and recurrent state reserved by the active sequences.", func(st runner.SchedStats) float64 { return float64(st.StateReserved) }),
		counter("tarfa_batch_steps_total", "Batched forward steps.", func(st runner.SchedStats) float64 { return float64(st.Steps) }),
		counter("tarfa_batch_rows_total", "Token rows through the batched steps (rows per step = batch occupancy).", func(st runner.SchedStats) float64 { return float64(st.Rows) }),
		counter("tarfa_batch_step_seconds_total", "Wall time of the batched forward steps.", func(st runner.SchedStats) float64 { return st.StepTime.Seconds() }),
		counter("tarfa_batch_sync_seconds_total", "The part of the steps' wall time the host waited for the device queue.", func(st runner.SchedStats) float64 { return st.SyncTime.Seconds() }),
		counter("tarfa_batch_emit_seconds_total", "Wall time spent emitting the steps' tokens (sampling, ledgers).", func(st runner.SchedStats) float64 { return st.EmitTime.Seconds() }),
		counter("tarfa_cancelled_total", "Requests ended by their client before they were complete.", func(st runner.SchedStats) float64 { return float64(st.Cancelled) }),
		tierCounter("tarfa_tier_hits_total", "Expert uses served by the RAM tier.", func(t tier.Stats) float64 { return float64(t.Hits) }),
		tierCounter("tarfa_tier_misses_total", "Expert reads admitted to the RAM tier.", func(t tier.Stats) float64 { return float64(t.Misses) }),
		tierCounter("tarfa_tier_read_bytes_total", "Bytes read from storage by the hierarchy.", func(t tier.Stats) float64 { return float64(t.BytesRead) }),
		tierCounter("tarfa_tier_device_uses_total", "Expert uses looked up in the device level (the backend's expert slots).", func(t tier.Stats) float64 { return float64(t.Device.Uses) }),
		tierCounter("tarfa_tier_device_hits_total", "Expert uses served by a device slot that held the expert (no bytes moved).", func(t tier.Stats) float64 { return float64(t.Device.Hits) }),
		tierCounter("tarfa_tier_device_copied_bytes_total", "Verified bytes delivered to fill device slots.", func(t tier.Stats) float64 { return float64(t.Device.BytesCopied) }),
		tierCounter("tarfa_tier_ram_uses_total", "Expert uses looked up in the RAM tier (the device level's misses).", func(t tier.Stats) float64 { return float64(t.RAM.Uses) }),
		tierCounter("tarfa_tier_hashed_bytes_total", "Bytes read from storage and hashed by the hierarchy.", func(t tier.Stats) float64 { return float64(t.BytesHashed) }),
		tierCounter("tarfa_scrub_passes_total", "Scrub passes over the resident copies.", func(t tier.Stats) float64 { return float64(t.ScrubPasses) }),
		tierCounter("tarfa_scrubbed_bytes_total", "Bytes re-hashed by scrubbing.", func(t tier.Stats) float64 { return float64(t.ScrubbedBytes) }),
		tierCounter("tarfa_scrub_failures_total", "Resident copies scrubbing found changed.", func(t tier.Stats) float64 { return float64(t.ScrubFailures) }),
	)
	return m
}

func (m *metrics) handler() http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.request(r, http.StatusOK)
		h.ServeHTTP(w, r)
	})
}

// request counts one request.
func (m *metrics) request(r *http.Request, code int) {
	ep := r.URL.Path
	switch {
	case endpoints[ep]:
	case len(ep) > len("/v1/attestations/") && ep[:len("/v1/attestations/")] == "/v1/attestations/":
		ep = "/v1/attestations"
	case len(ep) > len("/v1/models/") && ep[:len("/v1/models/")] == "/v1/models/":
		ep = "/v1/models"
	default:
		ep = "other"
	}
	m.requests.WithLabelValues(ep, strconv.Itoa(code)).Inc()
}

// finished counts a finished response.
func (m *metrics) finished(res runner.Result) {
	m.prompt.Add(float64(res.PromptTokens))
	m.generated.Add(float64(len(res.Tokens)))
	m.verified.Add(float64(res.Ledger.BytesHashed[jnf.BLAKE3]))
	for _, e := range res.Ledger.Experts {
		for t, n := range e.Uses {
			switch t {
			case ledger.TierStorage, ledger.TierRAM, ledger.TierDevice:
				m.uses.WithLabelValues(string(t)).Add(float64(n))
			}
		}
	}
	m.ttft.Observe((res.Queued + res.Prefill).Seconds())
	if n := len(res.Tokens); n > 1 && res.Decode > 0 {
		m.decode.Observe(float64(n-1) / res.Decode.Seconds())
	}
}
