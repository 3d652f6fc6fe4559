//go:build !purego

package canon

// fp8Sums writes, for g < groups, sums[g] = the exact Σ_{k<n} of
// W(w[g·stride+k])·x[g·stride+k] (blockfp8_amd64.s): n a multiple of 8, W(c)
// = c's E4M3 value·2^-8, x in the form of FP8Wide. sums[g] is then the
// integer P of those n terms.
//
//go:noescape
func fp8Sums(sums *float64, w *byte, x *float64, groups, n, stride int)

// fp8Sums4 is fp8Sums of four activation rows: sums[4g+j] for row xj.
//
//go:noescape
func fp8Sums4(sums *float64, w *byte, x0, x1, x2, x3 *float64, groups, n, stride int)
