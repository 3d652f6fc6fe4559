package hf_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/jnf/hf/hftest"
)

func TestFP8CheckpointMaps(t *testing.T) {
	for _, sd := range []jnf.DType{jnf.F32, jnf.BF16} {
		t.Run(string(sd), func(t *testing.T) {
			ck, err := hf.Open(hftest.FP8Checkpoint(t, hftest.FP8{ScaleDType: sd}))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			q := ck.Config.Quant
			if q == nil || q.BlockN != 24 || q.BlockK != 40 || q.Format != "e4m3" || q.Activation != "dynamic" {
				t.Fatalf("quant %+v", q)
			}
			if got := ck.Config.Precision(); got != "fp8 (e4m3, 24×40 blocks, dynamic activation scales)" {
				t.Errorf("precision %q", got)
			}
			// q_proj [256, 64] → scales [ceil(256/24), ceil(64/40)] = [11, 2], right after it.
			for i, tr := range ck.Tensors {
				if tr.Name != "model.layers.1.self_attn.q_proj.weight" {
					continue
				}
				s := ck.Tensors[i+1]
				if tr.DType != jnf.F8E4 || s.Name != tr.Name+"_scale_inv" || s.DType != sd || !slices.Equal(s.Shape, []int64{11, 2}) || s.Layer != 1 {
					t.Errorf("q_proj %v %v, next %s %s %v layer %d", tr.DType, tr.Shape, s.Name, s.DType, s.Shape, s.Layer)
				}
			}
			if tr, _ := ck.Tensor("model.layers.0.linear_attn.in_proj_a.weight"); tr.DType != jnf.BF16 {
				t.Errorf("in_proj_a is %s", tr.DType)
			}
			for i := 1; i < len(ck.Tensors); i++ {
				a, b := ck.Tensors[i-1], ck.Tensors[i]
				if a.Layer > b.Layer || a.Layer == b.Layer && a.Name >= b.Name {
					t.Fatalf("tensors out of canonical order: %s (layer %d) before %s (layer %d)", a.Name, a.Layer, b.Name, b.Layer)
				}
			}
			e := ck.Experts[1][7]
			var names []string
			for _, p := range e.Parts {
				names = append(names, p.Name)
			}
			if !e.FP8() || !slices.Equal(names, jnf.FP8ExpertParts) {
				t.Fatalf("expert parts %v", names)
			}
			// gate [32,64] → [2,2]; down [64,32] → [3,1].
			if !slices.Equal(e.Parts[3].Shape, []int64{2, 2}) || !slices.Equal(e.Parts[5].Shape, []int64{3, 1}) || e.Parts[5].DType != sd ||
				e.Parts[5].Orig != "model.language_model.layers.1.mlp.experts.7.down_proj.weight_scale_inv" {
				t.Errorf("scale parts %+v %+v", e.Parts[3], e.Parts[5])
			}
			if want := int64(3*32*64 + (2*2+2*2+3*1)*sd.Size()); e.Length() != want {
				t.Errorf("expert length %d, want %d", e.Length(), want)
			}
			var ignored []string
			for _, ig := range ck.Ignored {
				ignored = append(ignored, ig.Name)
			}
			if !slices.Contains(ignored, "mtp.fc.weight_scale_inv") || !slices.Contains(ignored, "model.visual.blocks.0.attn.qkv.weight") {
				t.Errorf("ignored %v", ignored)
			}
		})
	}
}

func find(ts []hftest.Tensor, name string) int {
	for i, x := range ts {
		if x.Name == name {
			return i
		}
	}
	panic(name)
}

const (
	q    = "model.language_model.layers.1.self_attn.q_proj.weight"
	qs   = q + "_scale_inv"
	down = "model.language_model.layers.0.mlp.experts.3.down_proj.weight"
)

// TestFP8CheckpointRejections: every way a block-FP8 checkpoint can be
// wrong is refused, naming the tensor, the shard and what was wanted.
func TestFP8CheckpointRejections(t *testing.T) {
	edit := func(f func([]hftest.Tensor) []hftest.Tensor) hftest.FP8 { return hftest.FP8{Edit: f} }
	drop := func(name string) hftest.FP8 {
		return edit(func(ts []hftest.Tensor) []hftest.Tensor { return slices.Delete(ts, find(ts, name), find(ts, name)+1) })
	}
	retype := func(name string, d jnf.DType) hftest.FP8 {
		return edit(func(ts []hftest.Tensor) []hftest.Tensor {
			i := find(ts, name)
			n, _ := jnf.ByteSize(d, ts[i].Shape)
			ts[i].DType, ts[i].Data = d, make([]byte, n)
			return ts
		})
	}
	reshape := func(name string, shape []int64) hftest.FP8 {
		return edit(func(ts []hftest.Tensor) []hftest.Tensor {
			i := find(ts, name)
			n, _ := jnf.ByteSize(ts[i].DType, shape)
			ts[i].Shape, ts[i].Data = shape, make([]byte, n)
			return ts
		})
	}
	noQuant := hftest.FP8{Config: func(m map[string]any) { delete(m, "quantization_config") }}
	cases := []struct {
		name string
		o    hftest.FP8
		want []string
	}{
		{"missing scale", drop(qs), []string{q, "model.safetensors", "is F8_E4M3 but has no " + qs}},
		{"missing expert scale", drop(down + "_scale_inv"), []string{down, "has no " + down + "_scale_inv"}},
		{"misshapen scale", reshape(qs, []int64{10, 2}), []string{qs, "model.safetensors", "shape [10 2], want [11 2] = [ceil(256/24), ceil(64/40)]", "weight_block_size [24, 40]"}},
		{"misshapen expert scale", reshape(down+"_scale_inv", []int64{2, 1}), []string{down + "_scale_inv", "shape [2 1], want [3 1]"}},
		{"F64 scale", retype(qs, jnf.F64), []string{qs, "dtype F64, want F32, BF16 or F16"}},
		{"F8 scale", retype(qs, jnf.F8E4), []string{qs, "dtype F8_E4M3, want F32, BF16 or F16"}},
		{"orphan scale of a BF16 weight", retype(q, jnf.BF16), []string{qs, "a scale without its F8_E4M3 weight " + q, "it is not F8_E4M3 (in model.safetensors)"}},
		{"orphan scale", edit(func(ts []hftest.Tensor) []hftest.Tensor {
			return append(ts, hftest.Tensor{Name: "model.language_model.layers.0.linear_attn.in_proj_b.weight_scale_inv", DType: jnf.F32, Shape: []int64{1, 1}, Data: make([]byte, 4)})
		}), []string{"in_proj_b.weight_scale_inv (model.safetensors): a scale without its F8_E4M3 weight", "it is not F8_E4M3"}},
		{"scale of no tensor", edit(func(ts []hftest.Tensor) []hftest.Tensor {
			return append(ts, hftest.Tensor{Name: "model.language_model.layers.0.mlp.nothing.weight_scale_inv", DType: jnf.F32, Shape: []int64{1, 1}, Data: make([]byte, 4)})
		}), []string{"mlp.nothing.weight_scale_inv", "no such tensor"}},
		{"F8 embedding", retype("model.language_model.embed_tokens.weight", jnf.F8E4), []string{"model.language_model.embed_tokens.weight (model.safetensors): F8_E4M3 is allowed only for a matrix", "it must stay float"}},
		{"F8 norm", retype("model.language_model.layers.0.input_layernorm.weight", jnf.F8E4), []string{"input_layernorm.weight", "F8_E4M3 is allowed only"}},
		{"F8 conv1d", retype("model.language_model.layers.0.linear_attn.conv1d.weight", jnf.F8E4), []string{"conv1d.weight", "F8_E4M3 is allowed only"}},
		{"F8 A_log", retype("model.language_model.layers.0.linear_attn.A_log", jnf.F8E4), []string{"A_log", "F8_E4M3 is allowed only"}},
		{"F8 dt_bias", retype("model.language_model.layers.0.linear_attn.dt_bias", jnf.F8E4), []string{"dt_bias", "F8_E4M3 is allowed only"}},
		{"F8 without quantization_config", noQuant, []string{"is F8_E4M3, but config.json has no quantization_config"}},
		{"quantization_config without F8", edit(func(ts []hftest.Tensor) []hftest.Tensor {
			var out []hftest.Tensor
			for _, x := range ts {
				if strings.HasSuffix(x.Name, "_scale_inv") && !strings.HasPrefix(x.Name, "mtp.") && !strings.HasPrefix(x.Name, "model.visual.") {
					continue
				}
				if x.DType == jnf.F8E4 && !strings.HasPrefix(x.Name, "mtp.") && !strings.HasPrefix(x.Name, "model.visual.") {
					n, _ := jnf.ByteSize(jnf.BF16, x.Shape)
					x.DType, x.Data = jnf.BF16, make([]byte, n)
				}
				out = append(out, x)
			}
			return out
		}), []string{"has a quantization_config (fp8 (e4m3, 24×40 blocks, dynamic activation scales)), but no tensor is F8_E4M3"}},
		{"mixed expert precision", edit(func(ts []hftest.Tensor) []hftest.Tensor {
			ts = retype(down, jnf.BF16).Edit(ts)
			return slices.Delete(ts, find(ts, down+"_scale_inv"), find(ts, down+"_scale_inv")+1)
		}), []string{"layer 0 expert 3", "F8_E4M3, F8_E4M3, BF16", "share one precision"}},
		{"one BF16 expert", edit(func(ts []hftest.Tensor) []hftest.Tensor {
			for _, p := range jnf.ExpertParts {
				n := "model.language_model.layers.1.mlp.experts.5." + p + ".weight"
				i := find(ts, n)
				b, _ := jnf.ByteSize(jnf.BF16, ts[i].Shape)
				ts[i].DType, ts[i].Data = jnf.BF16, make([]byte, b)
				ts = slices.Delete(ts, find(ts, n+"_scale_inv"), find(ts, n+"_scale_inv")+1)
			}
			return ts
		}), []string{"layer 1 expert 5 is BF16, but layer 0 expert 0 is F8_E4M3", "all routed experts of a model share one precision"}},
		{"fused F8 experts", edit(func(ts []hftest.Tensor) []hftest.Tensor {
			var out []hftest.Tensor
			for _, x := range ts {
				if !strings.Contains(x.Name, "layers.0.mlp.experts.") {
					out = append(out, x)
				}
			}
			return append(out, hftest.Tensor{Name: "model.language_model.layers.0.mlp.experts.gate_up_proj", DType: jnf.F8E4, Shape: []int64{8, 64, 64}, Data: make([]byte, 8*64*64)})
		}), []string{"experts.gate_up_proj (model.safetensors): fused F8_E4M3 experts are not supported"}},
		{"F8 E5M2", retype(q, jnf.F8E5), []string{q, "dtype F8_E5M2 is not a float type"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ck, err := hf.Open(hftest.FP8Checkpoint(t, tc.o))
			if err == nil {
				ck.Close()
				t.Fatalf("opened; want an error naming %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// TestFP8TiedLMHead: the scales of an lm_head that tied embeddings make
// unused are ignored with it, not an orphan.
func TestFP8TiedLMHead(t *testing.T) {
	o := hftest.FP8{
		Config: func(m map[string]any) {
			m["tie_word_embeddings"] = true
			m["text_config"].(map[string]any)["tie_word_embeddings"] = true
		},
		Edit: func(ts []hftest.Tensor) []hftest.Tensor {
			return append(ts,
				hftest.Tensor{Name: "lm_head.weight", DType: jnf.F8E4, Shape: []int64{256, 64}, Data: make([]byte, 256*64)},
				hftest.Tensor{Name: "lm_head.weight_scale_inv", DType: jnf.F32, Shape: []int64{11, 2}, Data: make([]byte, 11*2*4)})
		},
	}
	ck, err := hf.Open(hftest.FP8Checkpoint(t, o))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	n := 0
	for _, ig := range ck.Ignored {
		if strings.HasPrefix(ig.Name, "lm_head.") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("ignored %+v", ck.Ignored)
	}
}
