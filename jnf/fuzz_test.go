package jnf

import (
	"bytes"
	"strings"
	"testing"
)

func buildFile(t *Table) []byte {
	tableLen, size, err := PlanTable(t)
	if err != nil {
		panic(err)
	}
	tb, _ := EncodeTable(t)
	if len(tb) != tableLen {
		panic("table length")
	}
	out := make([]byte, size)
	copy(out, Preamble(tb))
	copy(out[PreambleSize:], tb)
	return out
}

func sampleTable() *Table {
	z := "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	return &Table{Format: FormatName, Version: Version, File: "layer-00001.jnf", Layer: 1, ConfigSHA256: z,
		Sources: []SourceFile{{File: "a", Size: 1000, SHA256: z}},
		Records: []Record{
			{Kind: KindTensor, Name: "model.layers.1.input_layernorm.weight", Layer: 1, Expert: -1, DType: BF16, Shape: []int64{4}, Length: 8, SHA256: z, BLAKE3: z,
				Source: []SourceRange{{File: "a", Offset: 100, Length: 8}}},
			{Kind: KindExpert, Name: "model.layers.1.mlp.experts.0", Layer: 1, Expert: 0, Length: 24, SHA256: z, BLAKE3: z, Parts: []Part{
				{Name: "gate_proj", DType: BF16, Shape: []int64{2, 2}, Offset: 0, Length: 8, Source: SourceRange{File: "a", Length: 8}},
				{Name: "up_proj", DType: BF16, Shape: []int64{2, 2}, Offset: 8, Length: 8, Source: SourceRange{File: "a", Offset: 8, Length: 8}},
				{Name: "down_proj", DType: BF16, Shape: []int64{2, 2}, Offset: 16, Length: 8, Source: SourceRange{File: "a", Offset: 16, Length: 8}},
			}},
		}}
}

func TestTableRoundTripAndRules(t *testing.T) {
	b := buildFile(sampleTable())
	f, err := ParseTable(bytes.NewReader(b), int64(len(b)), "layer-00001.jnf")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Table.Records) != 2 || f.Table.Records[1].Offset%Align != 0 || f.Size%Align != 0 {
		t.Errorf("parsed %+v", f.Table)
	}
	if _, err := ParseTable(bytes.NewReader(b), int64(len(b)), "layer-00002.jnf"); err == nil {
		t.Error("renamed file accepted")
	}
}

// TestTableRules checks each rule of SPEC.md §2–3 that a record table can
// break while its preamble digest still matches.
func TestTableRules(t *testing.T) {
	z := sampleTable().ConfigSHA256
	for _, c := range []struct {
		name   string
		mutate func(*Table)
		want   string
	}{
		{"inconsistent expert part", func(t *Table) { t.Records[1].Parts[2].Shape = []int64{2, 3} }, "inconsistent with shape"},
		// [2^58+512, 64] BF16: the element count wraps to 2^15, the
		// byte count to 2^16 — a small length that must not pass.
		{"shape whose byte size wraps", func(t *Table) {
			t.Records[0].Shape = []int64{1<<58 + 512, 64}
			t.Records[0].Length = 1 << 16
			t.Records[0].Source[0].Length = 1 << 16
			t.Sources[0].Size = 1 << 20
		}, "overflows"},
		{"negative dimension", func(t *Table) { t.Records[0].Shape = []int64{-4, -1} }, "negative dimension"},
		{"newline in a name", func(t *Table) { t.Records[0].Name = "model.norm\nlength=1" }, "is not a letter"},
		{"source not listed", func(t *Table) { t.Records[0].Source[0].File = "b" }, "do not list"},
		{"source listed but unused", func(t *Table) {
			t.Sources = append(t.Sources, SourceFile{File: "b", Size: 1, SHA256: z})
		}, "no record draws bytes"},
		{"sources out of order", func(t *Table) {
			t.Sources = append([]SourceFile{{File: "b", Size: 1, SHA256: z}}, t.Sources...)
		}, "sorted by file"},
		{"source range beyond the shard", func(t *Table) { t.Records[0].Source[0].Offset = 995 }, "outside the 1000-byte shard"},
		{"layout in a layer file", func(t *Table) { t.Layout = LayoutFused }, "global.jnf only"},
		{"ignored in a layer file", func(t *Table) { t.Ignored = []Ignored{{Name: "x", Reason: "r", Bytes: 1}} }, "global.jnf only"},
		{"tensor without a source", func(t *Table) { t.Records[0].Source = nil }, "one source range"},
	} {
		tb := sampleTable()
		c.mutate(tb)
		b := buildFile(tb)
		_, err := ParseTable(bytes.NewReader(b), int64(len(b)), "layer-00001.jnf")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func FuzzJNFTable(f *testing.F) {
	f.Add(buildFile(sampleTable()))
	f.Add(buildFile(&Table{Format: FormatName, Version: Version, File: "layer-00001.jnf", Layer: 1, ConfigSHA256: sampleTable().ConfigSHA256}))
	wrap := sampleTable()
	wrap.Records[0].Shape = []int64{1<<58 + 512, 64}
	f.Add(buildFile(wrap))
	f.Fuzz(func(t *testing.T, b []byte) {
		jf, err := ParseTable(bytes.NewReader(b), int64(len(b)), "layer-00001.jnf")
		if err != nil {
			return
		}
		// Invariants of an accepted file.
		off := DataStart(len(jf.TableBytes))
		for _, r := range jf.Table.Records {
			if r.Offset != off || r.Offset%Align != 0 || r.Length <= 0 {
				t.Fatalf("accepted bad record layout %+v", r)
			}
			off = AlignUp(r.Offset + r.Length)
		}
		if off != int64(len(b)) {
			t.Fatalf("accepted size %d, table implies %d", len(b), off)
		}
	})
}
