package jnf

import (
	"bytes"
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
		Records: []Record{
			{Kind: KindTensor, Name: "model.layers.1.input_layernorm.weight", Layer: 1, Expert: -1, DType: BF16, Shape: []int64{4}, Length: 8, SHA256: z, BLAKE3: z},
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
	bad := sampleTable()
	bad.Records[1].Parts[2].Shape = []int64{2, 3}
	if _, err := ParseTable(bytes.NewReader(buildFile(bad)), int64(len(buildFile(bad))), "layer-00001.jnf"); err == nil {
		t.Error("inconsistent expert part accepted")
	}
}

func FuzzJNFTable(f *testing.F) {
	f.Add(buildFile(sampleTable()))
	f.Add(buildFile(&Table{Format: FormatName, Version: Version, File: "layer-00001.jnf", Layer: 1, ConfigSHA256: sampleTable().ConfigSHA256}))
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
