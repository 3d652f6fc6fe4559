package golden

import "testing"

func BenchmarkChainNext248k(b *testing.B) {
	lg := make([]float32, 248320)
	for i := range lg {
		lg[i] = float32(i) * 0.001
	}
	var c [32]byte
	b.SetBytes(int64(4 * len(lg)))
	for b.Loop() {
		c = ChainNext(c, lg)
	}
}
