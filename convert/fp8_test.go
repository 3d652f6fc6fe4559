package convert

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf/hftest"
	"github.com/tarfa-ai/tarfa/verify"
)

// TestConvertFP8AndVerify: a block-FP8 checkpoint converts byte for byte
// (weights and scales as stored), verifies, and its records are the
// official layout's: F8 tensors beside their scale tensors, six-part
// experts.
func TestConvertFP8AndVerify(t *testing.T) {
	for _, sd := range []jnf.DType{jnf.F32, jnf.BF16} {
		t.Run(string(sd), func(t *testing.T) {
			src := hftest.FP8Checkpoint(t, hftest.FP8{ScaleDType: sd})
			dst, res := convert(t, src, all())
			if !res.Manifest.Complete || res.Verified != res.Bytes || res.Bytes == 0 {
				t.Errorf("complete %v, verified %d of %d bytes", res.Manifest.Complete, res.Verified, res.Bytes)
			}
			if rep := check(t, dst); !rep.OK() || rep.RecordsChecked != rep.Records {
				t.Fatalf("fresh FP8 conversion does not verify: %+v", rep.Problems)
			}
			var f8, scales, experts int
			for _, e := range res.Manifest.Entries {
				switch {
				case e.Kind == jnf.KindTensor && e.DType == jnf.F8E4:
					f8++
				case e.Kind == jnf.KindTensor && strings.HasSuffix(e.Name, ".weight_scale_inv"):
					scales++
					if e.DType != sd {
						t.Errorf("%s is %s", e.Name, e.DType)
					}
				case e.Kind == jnf.KindExpert:
					experts++
					if len(e.Parts) != 6 || e.Parts[5].Name != "down_proj.weight_scale_inv" || e.Parts[5].DType != sd {
						t.Errorf("expert %s parts %+v", e.Name, e.Parts)
					}
				}
			}
			// Layer 0 (DeltaNet): in_proj_qkv, in_proj_z, out_proj, 3 shared;
			// layer 1 (attention): q, k, v, o, 3 shared.
			if f8 != 13 || scales != 13 || experts != 16 {
				t.Errorf("%d F8 tensors, %d scale tensors, %d experts; want 13, 13, 16", f8, scales, experts)
			}
			// The record bytes are the checkpoint's: the expert is its six
			// source tensors concatenated.
			ex := firstExpert(t, dst, 1)
			leaf := (&verify.Entry{Record: ex}).ContentLeaf()
			if !strings.Contains(string(leaf), "layout=gate_proj:F8_E4M3[32,64];up_proj:F8_E4M3[32,64];down_proj:F8_E4M3[64,32];gate_proj.weight_scale_inv:"+string(sd)+"[2,2];up_proj.weight_scale_inv:"+string(sd)+"[2,2];down_proj.weight_scale_inv:"+string(sd)+"[3,1]\n") {
				t.Errorf("content leaf:\n%s", leaf)
			}
		})
	}
}

// TestConvertFP8PartialAndResume: --layers conversion in parts and a
// resumed conversion give the root of one whole conversion.
func TestConvertFP8PartialAndResume(t *testing.T) {
	src := hftest.FP8Checkpoint(t, hftest.FP8{})
	_, whole := convert(t, src, all())
	dst := filepath.Join(t.TempDir(), "jnf")
	for _, r := range [][2]int{{1, 1}, {0, 0}} {
		res, err := Convert(context.Background(), src, dst, Options{FirstLayer: r[0], LastLayer: r[1], Verify: true})
		if err != nil {
			t.Fatal(err)
		}
		if r[0] == 1 && res.Manifest.Complete {
			t.Error("one layer of two is complete")
		}
		if r[0] == 0 && res.Manifest.Root != whole.Manifest.Root {
			t.Errorf("converted in parts: root %s, whole %s", res.Manifest.Root, whole.Manifest.Root)
		}
	}
	// Interrupted inside a file, then resumed.
	dst2 := filepath.Join(t.TempDir(), "jnf")
	interrupt(t, src, dst2, 30000)
	res, err := Convert(context.Background(), src, dst2, Options{LastLayer: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Root != whole.Manifest.Root {
		t.Errorf("resumed: root %s, whole %s", res.Manifest.Root, whole.Manifest.Root)
	}
	if rep := check(t, dst2); !rep.OK() {
		t.Errorf("resumed conversion: %+v", rep.Problems)
	}
}

func setBytes(name string, off int, b ...byte) hftest.FP8 {
	return hftest.FP8{Edit: func(ts []hftest.Tensor) []hftest.Tensor {
		for i := range ts {
			if ts[i].Name == name {
				copy(ts[i].Data[off:], b)
			}
		}
		return ts
	}}
}

func f32(v float32) []byte { return binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)) }

// TestConvertFP8RefusesNonFiniteValues: an F8 NaN code or a non-finite
// scale is refused while the bytes are read, naming the tensor, the
// element and its value; nothing is left under the file's name.
func TestConvertFP8RefusesNonFiniteValues(t *testing.T) {
	const (
		q  = "model.language_model.layers.1.self_attn.q_proj.weight"
		ex = "model.language_model.layers.0.mlp.experts.2."
	)
	cases := []struct {
		name string
		o    hftest.FP8
		file string
		want []string
	}{
		{"F8 0x7f", setBytes(q, 77, 0x7f), "layer-00001.jnf",
			[]string{"tensor model.layers.1.self_attn.q_proj.weight (model.safetensors): element 77 is 0x7f, a NaN code of F8_E4M3"}},
		{"F8 0xff in an expert", setBytes(ex+"up_proj.weight", 5, 0xff), "layer-00000.jnf",
			[]string{"expert model.layers.0.mlp.experts.2 part up_proj (model.safetensors): element 5 is 0xff, a NaN code"}},
		{"F32 scale +Inf", setBytes(q+"_scale_inv", 4*3, f32(float32(math.Inf(1)))...), "layer-00001.jnf",
			[]string{"tensor model.layers.1.self_attn.q_proj.weight_scale_inv (model.safetensors): element 3 is +Inf (F32 bits 0x7f800000): a block-FP8 scale must be finite"}},
		{"F32 scale NaN in an expert", setBytes(ex+"down_proj.weight_scale_inv", 4*2, f32(float32(math.NaN()))...), "layer-00000.jnf",
			[]string{"expert model.layers.0.mlp.experts.2 part down_proj.weight_scale_inv (model.safetensors): element 2 is NaN"}},
		{"BF16 scale -Inf", hftest.FP8{ScaleDType: jnf.BF16, Edit: setBytes(q+"_scale_inv", 2, 0x80, 0xff).Edit}, "layer-00001.jnf",
			[]string{"q_proj.weight_scale_inv (model.safetensors): element 1 is -Inf (BF16 bits 0xff80)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := hftest.FP8Checkpoint(t, tc.o)
			dst := filepath.Join(t.TempDir(), "jnf")
			_, err := Convert(context.Background(), src, dst, Options{LastLayer: -1})
			if err == nil {
				t.Fatal("converted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
			if _, err := os.Stat(filepath.Join(dst, tc.file)); !os.IsNotExist(err) {
				t.Errorf("%s exists after the refusal", tc.file)
			}
		})
	}
}
