package synth

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf/hf"
)

// tensorValues fills the spec of o named by suffix and returns its values.
func tensorValues(t *testing.T, o Options, suffix string) ([]float32, tensorSpec) {
	t.Helper()
	p, err := newPlan(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range p.shards {
		for _, s := range sh {
			if !strings.HasSuffix(s.name, suffix) {
				continue
			}
			var buf bytes.Buffer
			if err := fill(&buf, s, o.Seed); err != nil {
				t.Fatal(err)
			}
			b := buf.Bytes()
			v := make([]float32, len(b)/2)
			for i := range v {
				v[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
			}
			return v, s
		}
	}
	t.Fatalf("no tensor %s", suffix)
	return nil, tensorSpec{}
}

// With --routing local the routers applied to the token embeddings (what
// the first layer routes on, before attention moves it) pick a stable half
// of the experts for nearly every token, as real models' routing does; with
// uniform routing no expert is chosen for more than a small share of the
// tokens. And the uniform routing is the bytes of the option left unset.
func TestRoutingLocal(t *testing.T) {
	base := Options{Arch: hf.Qwen35MoE, Preset: "real", Layers: 2, Vocab: 64, Seed: 1}
	for _, routing := range []string{RoutingUniform, RoutingLocal} {
		o := base
		o.Routing = routing
		emb, es := tensorValues(t, o, "embed_tokens.weight")
		H := int(es.shape[1])
		for _, layer := range []string{"layers.0.mlp.gate.weight", "layers.1.mlp.gate.weight"} {
			router, rs := tensorValues(t, o, layer)
			E, k := int(rs.shape[0]), 8
			chosen := make([]int, E)
			for tok := range int(es.shape[0]) {
				x := emb[tok*H : (tok+1)*H]
				ss := 0.0
				for _, v := range x {
					ss += float64(v) * float64(v)
				}
				rms := math.Sqrt(ss / float64(H))
				logit := make([]float64, E)
				idx := make([]int, E)
				for e := range E {
					for j, v := range x {
						logit[e] += float64(router[e*H+j]) * float64(v) / rms
					}
					idx[e] = e
				}
				sort.Slice(idx, func(a, b int) bool { return logit[idx[a]] > logit[idx[b]] })
				for _, e := range idx[:k] {
					chosen[e]++
				}
			}
			slices.Sort(chosen)
			slices.Reverse(chosen)
			tokens := int(es.shape[0])
			switch routing {
			case RoutingLocal:
				if chosen[k/2-1] < tokens*9/10 {
					t.Errorf("local, %s: the %d most chosen experts are in a token's top-%d for %v of %d tokens, want at least 9 in 10", layer, k/2, k, chosen[:k/2], tokens)
				}
			default:
				if chosen[0] > tokens/3 {
					t.Errorf("uniform, %s: an expert is chosen by %d of %d tokens", layer, chosen[0], tokens)
				}
			}
		}
	}
	a, _ := tensorValues(t, base, "layers.0.mlp.gate.weight")
	u := base
	u.Routing = RoutingUniform
	b, _ := tensorValues(t, u, "layers.0.mlp.gate.weight")
	if !slices.Equal(a, b) {
		t.Error("uniform routing changed the router's bytes")
	}
	bad := base
	bad.Routing = "sticky"
	if _, _, err := Size(bad); err == nil || !strings.Contains(err.Error(), "sticky") {
		t.Errorf("routing sticky: %v", err)
	}
}
