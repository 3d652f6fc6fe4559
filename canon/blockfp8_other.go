//go:build !amd64 || purego

package canon

func fp8Sums(sums *float64, w *byte, x *float64, groups, n, stride int) {
	panic("canon: no vector kernels in this build")
}

func fp8Sums4(sums *float64, w *byte, x0, x1, x2, x3 *float64, groups, n, stride int) {
	panic("canon: no vector kernels in this build")
}
