package synth

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/jnf/hf"
	"github.com/tarfa-ai/tarfa/jnf/safetensors"
)

// wantFP8 is, independently of synth's table, the matrices an FP8
// checkpoint quantises: attention and linear-attention projections but
// in_proj_a/b, the shared expert, dense MLPs and every routed expert.
var wantFP8 = regexp.MustCompile(`\.(self_attn\.[qkvo]_proj|linear_attn\.(in_proj_qkv|in_proj_z|out_proj)|mlp\.shared_expert\.(gate|up|down)_proj|mlp\.(gate|up|down)_proj|mlp\.experts\.\d+\.(gate|up|down)_proj)\.weight$`)

type ckTensor struct {
	dtype jnf.DType
	shape []int64
	data  []byte
}

// readCheckpoint reads every tensor of the checkpoint in dir, through its
// index.
func readCheckpoint(t *testing.T, dir string) (map[string]ckTensor, map[string]any) {
	t.Helper()
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	out := map[string]ckTensor{}
	files := map[string]*safetensors.File{}
	for name, shard := range idx.WeightMap {
		f := files[shard]
		if f == nil {
			if f, err = safetensors.Open(filepath.Join(dir, shard)); err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			files[shard] = f
		}
		ti, data, err := f.ReadTensor(name)
		if err != nil {
			t.Fatalf("%s in %s: %v", name, shard, err)
		}
		out[name] = ckTensor{ti.DType, ti.Shape, data}
	}
	var cfg map[string]any
	b, err = os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	return out, cfg
}

func f32At(b []byte, i int64) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}
func bf16At(b []byte, i int64) float32 {
	return math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
}

// checkFP8 compares the FP8 checkpoint fp against the BF16 checkpoint bf
// of the same options: the quantised matrices are F8_E4M3 with a scale of
// the right shape and dtype, each scale is 1/(448/amax) of its block of
// BF16 values, each code dequantises (code × scale_inv) to within e4m3's
// rounding of the BF16 value, a block's largest value to ±448 exactly;
// every other tensor is the BF16 checkpoint's, byte for byte.
func checkFP8(t *testing.T, bf, fp map[string]ckTensor, bn, bk int64, scaleDT jnf.DType) {
	t.Helper()
	quantised := 0
	for name, b := range bf {
		f, ok := fp[name]
		if !ok {
			t.Errorf("%s: missing from the FP8 checkpoint", name)
			continue
		}
		if !reflect.DeepEqual(f.shape, b.shape) {
			t.Errorf("%s: shape %v, the BF16 checkpoint's is %v", name, f.shape, b.shape)
			continue
		}
		sc, hasScale := fp[name+"_scale_inv"]
		if !wantFP8.MatchString(name) {
			if f.dtype != b.dtype || !bytes.Equal(f.data, b.data) || hasScale {
				t.Errorf("%s: not quantised, yet dtype %s (BF16 checkpoint: %s), same bytes %v, a scale %v", name, f.dtype, b.dtype, bytes.Equal(f.data, b.data), hasScale)
			}
			continue
		}
		quantised++
		N, K := b.shape[0], b.shape[1]
		wantShape := []int64{(N + bn - 1) / bn, (K + bk - 1) / bk}
		if f.dtype != jnf.F8E4 || !hasScale || sc.dtype != scaleDT || !reflect.DeepEqual(sc.shape, wantShape) {
			t.Errorf("%s: dtype %s, scale %v %s %v; want F8_E4M3 and a %s scale %v", name, f.dtype, hasScale, sc.dtype, sc.shape, scaleDT, wantShape)
			continue
		}
		for br := range wantShape[0] {
			for bc := range wantShape[1] {
				var amax float32
				for r := br * bn; r < min(N, (br+1)*bn); r++ {
					for c := bc * bk; c < min(K, (bc+1)*bk); c++ {
						amax = max(amax, float32(math.Abs(float64(bf16At(b.data, r*K+c)))))
					}
				}
				scale := float32(1)
				if amax != 0 {
					scale = float32(448) / amax
				}
				wantInv := float32(1) / scale
				var inv float32
				if scaleDT == jnf.BF16 {
					wantInv = bf16Value(wantInv)
					inv = bf16At(sc.data, br*wantShape[1]+bc)
				} else {
					inv = f32At(sc.data, br*wantShape[1]+bc)
				}
				if inv != wantInv {
					t.Fatalf("%s block (%d,%d): scale_inv %g, want %g (amax %g)", name, br, bc, inv, wantInv, amax)
				}
				for r := br * bn; r < min(N, (br+1)*bn); r++ {
					for c := bc * bk; c < min(K, (bc+1)*bk); c++ {
						w := bf16At(b.data, r*K+c)
						code := f.data[r*K+c]
						q := float64(w) * float64(scale) // the value e4m3 rounds
						dq := float64(canon.DecodeE4M3(code)) * float64(inv)
						// e4m3 rounding: half a step, 2^-4 relative for
						// normals, 2^-10 absolute below 2^-6; then the
						// scale's own rounding.
						bound := max(math.Abs(q)/16, 1.0/1024)*float64(inv) + math.Abs(float64(w))*1e-6
						if d := math.Abs(dq - float64(w)); d > bound || math.IsNaN(dq) {
							t.Fatalf("%s [%d,%d]: code %#x dequantises to %g, the BF16 value is %g (|Δ| %g > %g)", name, r, c, code, dq, w, d, bound)
						}
						if amax != 0 && float32(math.Abs(float64(w))) == amax && code&0x7F != 0x7E {
							t.Fatalf("%s [%d,%d]: the block's largest value %g has code %#x, want ±448", name, r, c, w, code)
						}
					}
				}
			}
		}
	}
	for name := range fp {
		if _, ok := bf[name]; !ok && !(strings.HasSuffix(name, "_scale_inv") && wantFP8.MatchString(strings.TrimSuffix(name, "_scale_inv"))) {
			t.Errorf("%s: in the FP8 checkpoint only", name)
		}
	}
	if quantised == 0 {
		t.Error("no quantised matrix")
	}
}

func TestFP8Checkpoint(t *testing.T) {
	for _, c := range []struct {
		name    string
		o       Options
		bn, bk  int64
		scaleDT jnf.DType
	}{
		// The official 128×128 blocks: every tiny matrix is one partial block.
		{"q3-128", Options{Arch: hf.Qwen3MoE, Preset: "tiny", Seed: 5, Set: map[string]any{"mlp_only_layers": []int{1}}}, 128, 128, jnf.F32},
		{"q35-128", Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: 5}, 128, 128, jnf.F32},
		// Blocks that are not square and do not divide every dimension
		// (48 rows of the shared expert, 96 of the dense MLP).
		{"q3-32x16", Options{Arch: hf.Qwen3MoE, Preset: "tiny", Seed: 6, FP8Block: [2]int{32, 16}, Set: map[string]any{"mlp_only_layers": []int{1}}}, 32, 16, jnf.F32},
		{"q35-16x40-bf16", Options{Arch: hf.Qwen35MoE, Preset: "tiny", Seed: 6, FP8Block: [2]int{16, 40}, FP8ScaleDType: jnf.BF16}, 16, 40, jnf.BF16},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := c.o
			bfDir, fpDir := filepath.Join(t.TempDir(), "bf16"), filepath.Join(t.TempDir(), "fp8")
			bo := o
			bo.FP8Block, bo.FP8ScaleDType = [2]int{}, ""
			if err := Write(bfDir, bo); err != nil {
				t.Fatal(err)
			}
			o.DType = DTypeFP8
			if err := Write(fpDir, o); err != nil {
				t.Fatal(err)
			}
			bf, bcfg := readCheckpoint(t, bfDir)
			fp, fcfg := readCheckpoint(t, fpDir)
			checkFP8(t, bf, fp, c.bn, c.bk, c.scaleDT)
			q, _ := json.Marshal(fcfg["quantization_config"])
			want := fmt.Sprintf(`{"activation_scheme":"dynamic","fmt":"e4m3","modules_to_not_convert":["lm_head","model.embed_tokens","mlp.gate","mlp.shared_expert_gate","linear_attn.in_proj_a","linear_attn.in_proj_b"],"quant_method":"fp8","weight_block_size":[%d,%d]}`, c.bn, c.bk)
			if string(q) != want {
				t.Errorf("quantization_config %s, want %s", q, want)
			}
			delete(fcfg, "quantization_config")
			if !reflect.DeepEqual(fcfg, bcfg) {
				t.Error("the FP8 config differs from the BF16 one by more than its quantization_config")
			}
		})
	}
}

// Same options, same bytes; another seed, other bytes. The shards made on
// demand (Shards, the path of synth --jnf) are the files, at any offset.
func TestFP8DeterministicAndShards(t *testing.T) {
	o := shardsOptions(t, hf.LayoutPerExpert)
	o.DType, o.FP8Block = DTypeFP8, [2]int{16, 16}
	a, b, c := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b"), filepath.Join(t.TempDir(), "c")
	for _, d := range []string{a, b} {
		if err := Write(d, o); err != nil {
			t.Fatal(err)
		}
	}
	o2 := o
	o2.Seed++
	if err := Write(c, o2); err != nil {
		t.Fatal(err)
	}
	if dirDigest(t, a) != dirDigest(t, b) {
		t.Error("same options, different bytes")
	}
	if dirDigest(t, a) == dirDigest(t, c) {
		t.Error("different seeds, same bytes")
	}
	open, err := Shards(o)
	if err != nil {
		t.Fatal(err)
	}
	_, n, _ := Size(o)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 1; i <= n; i++ {
		want, err := os.ReadFile(shardPath(a, i, n))
		if err != nil {
			t.Fatal(err)
		}
		v, size, err := open(filepath.Base(shardPath(a, i, n)))
		if err != nil || size != int64(len(want)) {
			t.Fatalf("shard %d: size %d, %v; the file has %d", i, size, err, len(want))
		}
		got := make([]byte, size)
		if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("shard %d: the made bytes differ from the file's (%v)", i, err)
		}
		for range 300 {
			off := rng.Int64N(size)
			k := rng.Int64N(min(size-off, 3000) + 1)
			p := make([]byte, k)
			v.ReadAt(p, off)
			if !bytes.Equal(p, want[off:off+k]) {
				t.Fatalf("shard %d: bytes [%d,+%d) differ", i, off, k)
			}
		}
	}
}

func TestFP8RefusesBadOptions(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Options)
		want string
	}{
		{func(o *Options) { o.DType = "fp4" }, `dtype "fp4": want bf16 or fp8`},
		{func(o *Options) { o.DType, o.Layout = DTypeFP8, hf.LayoutFused }, "the FP8 releases store experts per expert"},
		{func(o *Options) { o.FP8Block = [2]int{64, 64} }, "without dtype fp8"},
		{func(o *Options) { o.DType, o.FP8Block = DTypeFP8, [2]int{0, 64} }, "FP8 block size 0x64"},
		{func(o *Options) { o.DType, o.FP8ScaleDType = DTypeFP8, jnf.F16 }, "FP8 scale dtype F16"},
	} {
		o := tiny
		c.mod(&o)
		if _, _, err := Size(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", o, err, c.want)
		}
	}
}

// The real shapes (Qwen3.5-122B-A10B, Qwen3-30B-A3B): the FP8 checkpoint
// is about half the BF16 one, and a range deep inside its largest FP8
// matrix is made from one band of rows, quickly, and dequantises to the
// BF16 values.
func TestFP8RealShapes(t *testing.T) {
	for _, arch := range []hf.Arch{hf.Qwen35MoE, hf.Qwen3MoE} {
		o := Options{Arch: arch, Preset: "real", Seed: 1, Layers: 1}
		bfBytes, _, err := Size(o)
		if err != nil {
			t.Fatal(err)
		}
		o.DType = DTypeFP8
		p, err := newPlan(o)
		if err != nil {
			t.Fatal(err)
		}
		_, cfg, _ := Config(o)
		emb := 2 * int64(cfg.Vocab) * int64(cfg.Hidden) * 2 // embedding and LM head stay BF16
		if r := float64(p.bytes-emb) / float64(bfBytes-emb); r < 0.5 || r > 0.52 {
			t.Errorf("%s: the FP8 layer is %.3f of the BF16 one, want about half", arch, r)
		}
		var big tensorSpec
		for _, sh := range p.shards {
			for _, s := range sh {
				if s.fp8 != nil && !s.fp8Scale && numel(s.shape) > numel(big.shape) {
					big = s
				}
			}
		}
		N, K := big.shape[0], big.shape[1]
		r0 := N/2 + 3
		codes := make([]byte, 2*K+5)
		if err := tensorBytes(big, o.Seed, r0*K+7, codes); err != nil {
			t.Fatal(err)
		}
		var inv [4]byte
		if err := tensorBytes(tensorSpec{name: big.name + "_scale_inv", dtype: jnf.F32, fp8: big.fp8, fp8Scale: true,
			shape: shape{ceilDiv(N, 128), ceilDiv(K, 128)}}, o.Seed, 4*((r0/128)*ceilDiv(K, 128)), inv[:]); err != nil {
			t.Fatal(err)
		}
		src := make([]float32, 100)
		big.fp8.srcValues(o.Seed, r0*K+7, src)
		s := math.Float32frombits(binary.LittleEndian.Uint32(inv[:]))
		for j, w := range src {
			if dq := canon.DecodeE4M3(codes[j]) * s; math.Abs(float64(dq-w)) > math.Abs(float64(w))/16+float64(s)/1024 {
				t.Fatalf("%s %s: element %d dequantises to %g, the BF16 value is %g", arch, big.name, r0*K+7+int64(j), dq, w)
			}
		}
		t.Logf("%s: largest FP8 matrix %s %v; FP8 layer %d bytes, BF16 %d", arch, big.name, big.shape, p.bytes, bfBytes)
	}
}

// The publisher's rule at its edges: an all-zero block has scale 1 (and
// codes 0), a block whose largest magnitude is 448 scale 1, and any other
// 448/amax rounded to float32, its inverse rounded again.
func TestFP8BlockScale(t *testing.T) {
	for _, c := range []struct{ amax, scale, inv float32 }{
		{0, 1, 1}, {448, 1, 1}, {1, 448, float32(1) / 448}, {0.03, float32(448) / 0.03, float32(1) / (float32(448) / 0.03)},
	} {
		if s, inv := blockScale(c.amax); s != c.scale || inv != c.inv {
			t.Errorf("amax %g: scale %g, inverse %g; want %g, %g", c.amax, s, inv, c.scale, c.inv)
		}
	}
	if fp8Code(0, 1) != 0 || fp8Code(-1e30, 1) != 0xFE || fp8Code(1e30, 1) != 0x7E {
		t.Error("zero, or a value past ±448, is not coded 0 / ±448")
	}
}
