package cuda

import "testing"

// TestPcopy: pcopy copies every element (lengths around its pieces and its
// threshold, src and dst of different lengths) and nothing beyond the
// shorter length.
func TestPcopy(t *testing.T) {
	for _, n := range []int{0, 1, 1000, 2 * pcopyPiece, 2*pcopyPiece + 1, 3*pcopyPiece - 7, 17*pcopyPiece + 5} {
		for _, extra := range []int{0, 3} {
			src := make([]float32, n+extra)
			for i := range src {
				src[i] = float32(i) + 0.5
			}
			dst := make([]float32, n+1)
			dst[n] = -1
			pcopy(dst[:n], src)
			for i := range n {
				if dst[i] != src[i] {
					t.Fatalf("n %d: dst[%d] = %g, want %g", n, i, dst[i], src[i])
				}
			}
			if dst[n] != -1 {
				t.Fatalf("n %d: wrote past the destination", n)
			}
		}
	}
	src := []int32{1, 2, 3}
	dst := make([]int32, 2)
	pcopy(dst, src)
	if dst[0] != 1 || dst[1] != 2 {
		t.Fatalf("int32: %v", dst)
	}
}
