package jnf

import (
	"strings"
	"testing"
)

// fp8Expert is a valid six-part expert record: I = 32, H = 64, blocks
// 24×40 (scales [2,2], [2,2], [3,1], F32).
func fp8Expert() Record {
	z := strings.Repeat("0", 64)
	r := Record{Kind: KindExpert, Name: "model.layers.1.mlp.experts.0", Layer: 1, Expert: 0, SHA256: z, BLAKE3: z}
	shapes := [][]int64{{32, 64}, {32, 64}, {64, 32}, {2, 2}, {2, 2}, {3, 1}}
	off := int64(0)
	for i, n := range FP8ExpertParts {
		d := F8E4
		if i >= 3 {
			d = F32
		}
		l, _ := ByteSize(d, shapes[i])
		r.Parts = append(r.Parts, Part{Name: n, DType: d, Shape: shapes[i], Offset: off, Length: l, Source: SourceRange{File: "a", Offset: off, Length: l}})
		off += l
	}
	r.Length = off
	return r
}

// relayout recomputes the part offsets and lengths after a test changed a
// dtype or shape, so that only the change itself is wrong.
func relayout(r *Record) {
	off := int64(0)
	for i := range r.Parts {
		p := &r.Parts[i]
		p.Length, _ = ByteSize(p.DType, p.Shape)
		p.Offset, p.Source.Offset, p.Source.Length = off, off, p.Length
		off += p.Length
	}
	r.Length = off
}

func TestValidateFP8Expert(t *testing.T) {
	ok := fp8Expert()
	if err := ok.Validate(1); err != nil {
		t.Fatalf("valid FP8 expert refused: %v", err)
	}
	bf := fp8Expert()
	bf.Parts[3].DType, bf.Parts[4].DType, bf.Parts[5].DType = BF16, BF16, BF16
	relayout(&bf)
	if err := bf.Validate(1); err != nil {
		t.Fatalf("FP8 expert with BF16 scales refused: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(r *Record)
		want string
	}{
		{"four parts", func(r *Record) { r.Parts = r.Parts[:4] }, "has 4 parts, want 3 (gate_proj, up_proj, down_proj) or, block FP8, 6"},
		{"scales first", func(r *Record) { r.Parts[0], r.Parts[3] = r.Parts[3], r.Parts[0] }, `part 0 is "gate_proj.weight_scale_inv", want "gate_proj"`},
		{"misnamed scale", func(r *Record) { r.Parts[5].Name = "down_proj.scale" }, `part 5 is "down_proj.scale", want "down_proj.weight_scale_inv"`},
		{"BF16 weight", func(r *Record) { r.Parts[1].DType = BF16 }, "part up_proj: dtype BF16, want F8_E4M3"},
		{"F64 scale", func(r *Record) { r.Parts[4].DType = F64 }, "part up_proj.weight_scale_inv: dtype F64, want F32, BF16 or F16"},
		{"1-D scale", func(r *Record) { r.Parts[5].Shape = []int64{3} }, "part down_proj.weight_scale_inv: shape [3], want 2 dimensions"},
		{"zero scales", func(r *Record) { r.Parts[3].Shape = []int64{0, 2} }, "part gate_proj.weight_scale_inv"},
		{"more scales than weights", func(r *Record) { r.Parts[5].Shape = []int64{3, 33} }, "part down_proj.weight_scale_inv: shape [3 33], want 1 to [64 32] scales per dimension"},
		{"gate and up scales differ", func(r *Record) { r.Parts[4].Shape = []int64{1, 2} }, "gate_proj and up_proj have one shape"},
		{"down not transposed", func(r *Record) { r.Parts[2].Shape = []int64{32, 64} }, "want [I,H], [I,H], [H,I]"},
		{"six BF16 parts", func(r *Record) {
			for i := range r.Parts {
				r.Parts[i].DType = BF16
			}
		}, "part gate_proj: dtype BF16, want F8_E4M3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := fp8Expert()
			c.edit(&r)
			relayout(&r)
			err := r.Validate(1)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	// Three parts stay three float parts: an F8 expert without its scales is refused.
	three := fp8Expert()
	three.Parts = three.Parts[:3]
	relayout(&three)
	if err := three.Validate(1); err == nil || !strings.Contains(err.Error(), "part gate_proj: dtype F8_E4M3, want BF16, F32 or F16") {
		t.Errorf("three F8 parts: %v", err)
	}
}

func TestValidateFP8Tensors(t *testing.T) {
	z := strings.Repeat("0", 64)
	rec := func(name string, d DType, shape []int64) Record {
		n, _ := ByteSize(d, shape)
		return Record{Kind: KindTensor, Name: name, Layer: 1, Expert: -1, DType: d, Shape: shape, Length: n, SHA256: z, BLAKE3: z,
			Source: []SourceRange{{File: "a", Length: n}}}
	}
	for _, r := range []Record{
		rec("model.layers.1.self_attn.q_proj.weight", F8E4, []int64{256, 64}),
		rec("model.layers.1.self_attn.q_proj.weight_scale_inv", F32, []int64{11, 2}),
		rec("model.layers.1.self_attn.q_proj.weight_scale_inv", BF16, []int64{11, 2}),
	} {
		if err := r.Validate(1); err != nil {
			t.Errorf("%s %s: %v", r.Name, r.DType, err)
		}
	}
	for _, c := range []struct {
		r    Record
		want string
	}{
		{rec("model.layers.1.x.weight", F8E4, []int64{256}), "an F8_E4M3 tensor is a block-FP8 matrix: shape [256], want 2 dimensions"},
		{rec("model.layers.1.x.weight_scale_inv", F64, []int64{1, 1}), "block-FP8 scales: F64[1 1], want F32, BF16 or F16 with 2 dimensions"},
		{rec("model.layers.1.x.weight_scale_inv", F32, []int64{4}), "want F32, BF16 or F16 with 2 dimensions"},
	} {
		if err := c.r.Validate(1); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.r.Name, err, c.want)
		}
	}
}
