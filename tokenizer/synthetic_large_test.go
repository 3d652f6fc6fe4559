package tokenizer

import "testing"

// The real-shape synth presets need vocabularies far beyond the corpus and
// the 65,536 byte pairs (Qwen3.5: 248,320).
func TestSyntheticLargeVocabulary(t *testing.T) {
	for _, v := range []int{70000, 248320} {
		tj, cj, err := SyntheticFiles(v)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := Parse(tj, cj)
		if err != nil {
			t.Fatal(err)
		}
		if tk.VocabSize() != v {
			t.Errorf("vocabulary %d, want %d", tk.VocabSize(), v)
		}
		const text = "Hello world, experts! ünïcode 专家"
		if s, err := tk.Decode(tk.Encode(text)); err != nil || s != text {
			t.Errorf("vocab %d round trip: %q %v", v, s, err)
		}
	}
}
