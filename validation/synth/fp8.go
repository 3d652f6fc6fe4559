package synth

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/tarfa-ai/tarfa/canon"
	"github.com/tarfa-ai/tarfa/jnf"
)

// The dtypes of Options.DType.
const (
	DTypeBF16 = "bf16"
	// DTypeFP8 writes the quantised matrices (fp8Quantised) as block FP8
	// in the layout of Qwen's official FP8 releases (transformers'
	// "fine-grained FP8"): X.weight F8_E4M3 [N,K] and X.weight_scale_inv
	// [ceil(N/bn), ceil(K/bk)], and the quantization_config in config.json.
	DTypeFP8 = "fp8"
)

// DefaultFP8Block is the weight_block_size of the official releases.
var DefaultFP8Block = [2]int{128, 128}

// fp8Quantised lists, by name suffix, the matrices an FP8 checkpoint
// stores as F8_E4M3 with a weight_scale_inv; every other tensor keeps the
// dtype of the BF16 checkpoint. One table for both architectures (a
// suffix that an architecture lacks matches nothing).
//
// What the official releases do, as far as public sources show (the
// checkpoints themselves were not reachable from here):
//   - config.json: quantization_config = {"quant_method": "fp8", "fmt":
//     "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128,
//     128], "modules_to_not_convert": [...]} at the top level of the file,
//     beside text_config in the multimodal Qwen3.5 releases (a pinned copy
//     of a Qwen3.6-35B-A3B-FP8 config in a public loader puts it there,
//     with modules_to_not_convert ["lm_head", "model.embed_tokens"]);
//     transformers' FineGrainedFP8Config has these fields (docs:
//     huggingface.co/docs/transformers/quantization/finegrained_fp8).
//   - FP8: self_attn.{q,k,v,o}_proj, linear_attn.{in_proj_qkv, in_proj_z,
//     out_proj}, mlp.shared_expert.{gate,up,down}_proj and every routed
//     expert, per expert (mlp.experts.E.{gate,up,down}_proj.weight: the
//     FP8 releases are not fused even where the BF16 ones are).
//     Kept BF16: lm_head, embed_tokens, every norm (q_norm, k_norm,
//     linear_attn.norm), linear_attn.{A_log, conv1d, dt_bias, in_proj_a,
//     in_proj_b}, the router mlp.gate and mlp.shared_expert_gate.
//     Sources: the description of a re-quantised Qwen3.6-35B-A3B "in the
//     on-disk format of the official Qwen/Qwen3.6-35B-A3B-FP8"
//     (friendli.ai/models/gsting/Qwen3.6-35B-A3B-abliterated-FP8);
//     github.com/0xBakeer/inference-atlas/pull/145 (the official Qwen3.6
//     FP8 pack: fp8/e4m3/dynamic, modules_to_not_convert);
//     github.com/AI-Hypercomputer/maxtext/pull/5076 (Qwen3.5 FP8: gate,
//     shared_expert_gate, norms, embeddings and linear_attn a/b BF16).
//   - The scale dtype is not settled: the preamble of this work says F32,
//     as transformers' FP8Linear allocates weight_scale_inv; the sources
//     above (and github.com/HabanaAI/vllm-fork/pull/2141 for Qwen3-32B-FP8,
//     github.com/lablup/mlxcel/issues/1361 for Qwen3.8-27B-FP8) report
//     BF16 scales in some Qwen FP8 releases. Options.FP8ScaleDType writes
//     either; F32 is the default.
//   - Qwen3-30B-A3B-FP8: the same fields; its linears are self_attn and
//     the experts (the router mlp.gate stays BF16).
var fp8Quantised = []string{
	".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight", ".self_attn.o_proj.weight",
	".linear_attn.in_proj_qkv.weight", ".linear_attn.in_proj_z.weight", ".linear_attn.out_proj.weight",
	".mlp.shared_expert.gate_proj.weight", ".mlp.shared_expert.up_proj.weight", ".mlp.shared_expert.down_proj.weight",
	".mlp.gate_proj.weight", ".mlp.up_proj.weight", ".mlp.down_proj.weight", // dense layers (mlp_only_layers)
	"_proj.weight", // routed experts: matched with isExpertMatrix below
}

// fp8NotConverted is the quantization_config's modules_to_not_convert:
// the module names of the matrices kept BF16 (matched by transformers as
// a prefix or a suffix of a module's name), so that its FineGrainedFP8
// replaces exactly the linears stored as FP8.
var fp8NotConverted = []string{"lm_head", "model.embed_tokens", "mlp.gate", "mlp.shared_expert_gate",
	"linear_attn.in_proj_a", "linear_attn.in_proj_b"}

// isFP8 reports whether the tensor named name is an FP8 matrix.
func isFP8(name string) bool {
	if isExpertMatrix(name) {
		return true
	}
	for _, suf := range fp8Quantised[:len(fp8Quantised)-1] {
		if strings.HasSuffix(name, suf) {
			return true
		}
	}
	return false
}

// isExpertMatrix: mlp.experts.E.{gate,up,down}_proj.weight.
func isExpertMatrix(name string) bool {
	i := strings.Index(name, ".mlp.experts.")
	if i < 0 || !strings.HasSuffix(name, fp8Quantised[len(fp8Quantised)-1]) {
		return false
	}
	rest := name[i+len(".mlp.experts."):]
	dot := strings.IndexByte(rest, '.')
	if dot <= 0 {
		return false
	}
	switch rest[dot+1:] {
	case "gate_proj.weight", "up_proj.weight", "down_proj.weight":
		return true
	}
	return false
}

// fp8Quant is what an FP8 weight or scale spec quantises: the BF16 matrix
// src (the tensor of the BF16 checkpoint, same name and stream) in blocks
// of bn×bk.
type fp8Quant struct {
	src    tensorSpec
	bn, bk int64
}

// quantizationConfig is the config.json entry of an FP8 checkpoint.
func quantizationConfig(block [2]int) map[string]any {
	return map[string]any{"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
		"weight_block_size": []int{block[0], block[1]}, "modules_to_not_convert": fp8NotConverted}
}

// quantize turns every FP8 matrix of specs into its F8_E4M3 weight
// followed by its scale.
func quantize(specs []tensorSpec, block [2]int, scaleDT jnf.DType) []tensorSpec {
	bn, bk := int64(block[0]), int64(block[1])
	out := make([]tensorSpec, 0, len(specs)+len(specs)/2)
	for _, s := range specs {
		if !isFP8(s.name) || len(s.shape) != 2 {
			out = append(out, s)
			continue
		}
		q := &fp8Quant{src: s, bn: bn, bk: bk}
		w := s
		w.dtype, w.fp8 = jnf.F8E4, q
		sc := tensorSpec{name: s.name + "_scale_inv", dtype: scaleDT, fp8: q, fp8Scale: true,
			shape: shape{ceilDiv(s.shape[0], bn), ceilDiv(s.shape[1], bk)}}
		out = append(out, w, sc)
	}
	return out
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// blockScale is the publisher's scale of a block of largest magnitude
// amax: scale = 448/amax (1 for an all-zero block), and the stored
// weight_scale_inv = 1/scale, both rounded to float32.
func blockScale(amax float32) (scale, inv float32) {
	scale = 1
	if amax > 0 {
		scale = float32(canon.E4M3Max / amax)
	}
	return scale, float32(1 / scale)
}

// fp8Code is the stored E4M3 code of the BF16 value w in a block of the
// given scale: E4M3(clamp(w·scale, ±448)), rounded to nearest even.
func fp8Code(w, scale float32) byte {
	x := float32(w * scale)
	x = max(-canon.E4M3Max, min(canon.E4M3Max, x))
	return canon.EncodeE4M3(x)
}

// streamAt is the state of s's stream before element i.
func streamAt(s tensorSpec, seed uint64, i int64) splitmix {
	h := fnv.New64a()
	h.Write([]byte(s.name))
	return splitmix{seed ^ h.Sum64() + uint64(i)*splitmixGamma}
}

// srcValues puts the BF16 values (as float32) of elements [first,
// first+len(dst)) of the source matrix into dst.
func (q *fp8Quant) srcValues(seed uint64, first int64, dst []float32) {
	st := streamAt(q.src, seed, first)
	for j := range dst {
		dst[j] = bf16Value(q.src.value(&st, first+int64(j)))
	}
}

// bf16Value is f rounded to BF16, as float32.
func bf16Value(f float32) float32 { return math.Float32frombits(uint32(bf16(f)) << 16) }

// fp8Bytes puts bytes [off, off+len(dst)) of an FP8 weight or scale into
// dst. A weight is made a band of bn rows at a time (the values of the
// band, then each block's scale, then the codes): memory bn·K float32s a
// band; the bands a call covers are made in parallel (fp8Bands).
func fp8Bytes(s tensorSpec, seed uint64, off int64, dst []byte) error {
	q := s.fp8
	N, K := q.src.shape[0], q.src.shape[1]
	if !s.fp8Scale {
		if off < 0 || off+int64(len(dst)) > N*K {
			return fmt.Errorf("tensor %s: bytes [%d,+%d) outside its %d", s.name, off, len(dst), N*K)
		}
		fp8Bands(q, seed, off, dst)
		return nil
	}
	esz := s.dtype.Size()
	nbk := s.shape[1]
	if off < 0 || off+int64(len(dst)) > numel(s.shape)*esz {
		return fmt.Errorf("tensor %s: bytes [%d,+%d) outside its %d", s.name, off, len(dst), numel(s.shape)*esz)
	}
	// Each scale is its block's; a band of bn rows gives the scales of a
	// row of blocks, so the bands the range covers are made (in parallel)
	// and their scales written in order.
	if len(dst) == 0 {
		return nil
	}
	e0, e1 := off/esz, (off+int64(len(dst))-1)/esz
	b0 := e0 / nbk
	amax := make([][]float32, e1/nbk-b0+1)
	eachBand(b0, e1/nbk, func(br int64) { _, amax[br-b0] = q.bandValues(seed, br) })
	var el [4]byte
	for e := e0; len(dst) > 0; e++ {
		_, inv := blockScale(amax[e/nbk-b0][e%nbk])
		switch s.dtype {
		case jnf.F32:
			binary.LittleEndian.PutUint32(el[:], math.Float32bits(inv))
		case jnf.BF16:
			binary.LittleEndian.PutUint16(el[:], bf16(inv))
		default:
			return fmt.Errorf("tensor %s: synth cannot write scales of dtype %s", s.name, s.dtype)
		}
		skip := 0
		if e == e0 {
			skip = int(off - e*esz)
		}
		dst = dst[copy(dst, el[skip:esz]):]
	}
	return nil
}

// bandValues is band br of q's source matrix (rows br·bn … br·bn+bn−1, as
// float32 BF16 values, row-major) and the largest magnitude of each of its
// blocks.
func (q *fp8Quant) bandValues(seed uint64, br int64) (band, amax []float32) {
	N, K := q.src.shape[0], q.src.shape[1]
	r0 := br * q.bn
	rows := min(q.bn, N-r0)
	band = make([]float32, rows*K)
	q.srcValues(seed, r0*K, band)
	amax = make([]float32, ceilDiv(K, q.bk))
	for r := range rows {
		for c, w := range band[r*K : (r+1)*K] {
			if a := float32(math.Abs(float64(w))); a > amax[int64(c)/q.bk] {
				amax[int64(c)/q.bk] = a
			}
		}
	}
	return band, amax
}

// fp8Bands makes the codes of bytes [off, off+len(dst)) of q's weight, the
// bands of bn rows in parallel (eachBand): each band's codes depend on its
// own values only.
func fp8Bands(q *fp8Quant, seed uint64, off int64, dst []byte) {
	if len(dst) == 0 {
		return
	}
	band, end := q.bn*q.src.shape[1], off+int64(len(dst))
	eachBand(off/band, (end-1)/band, func(br int64) {
		lo, hi := max(off, br*band), min(end, (br+1)*band)
		fp8Band(q, seed, lo, dst[lo-off:hi-off])
	})
}

// eachBand runs fn for bands b0 … b1, at most GOMAXPROCS at once (one band:
// on the caller's goroutine).
func eachBand(b0, b1 int64, fn func(br int64)) {
	if b0 == b1 {
		fn(b0)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for br := b0; br <= b1; br++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(br)
		}()
	}
	wg.Wait()
}

// fp8Band makes the codes of bytes [off, off+len(dst)) of q's weight, all
// within one band of bn rows.
func fp8Band(q *fp8Quant, seed uint64, off int64, dst []byte) {
	K := q.src.shape[1]
	br := off / K / q.bn
	band, amax := q.bandValues(seed, br)
	scales := make([]float32, len(amax))
	for cb, a := range amax {
		scales[cb], _ = blockScale(a)
	}
	r0 := br * q.bn
	for i := range dst {
		j := off + int64(i) - r0*K
		dst[i] = fp8Code(band[j], scales[(j%K)/q.bk])
	}
}
