// Package canon is Tarfa's canonical arithmetic: the scalar functions and the
// reduction order that every backend must reproduce bit for bit. It is the
// executable form of the "Canonical arithmetic" section of EXACTNESS.md at the
// repository root; read that first.
//
// Summary:
//
//   - Values are IEEE-754 binary32 (float32) with round-to-nearest-even, no
//     flush-to-zero. Weights are exact BF16 (or F32) values widened to float32.
//   - There is no fused multiply-add anywhere: a product is rounded to float32
//     before it is added. In Go every product that feeds an addition is written
//     float32(x*y) (or float64(x*y) in the float64 helpers), which the Go
//     specification guarantees is not fused; CUDA code uses __fmul_rn and
//     __fadd_rn (__dmul_rn/__dadd_rn) and is compiled with --fmad=false.
//   - Every sum over a vector dimension is the lane reduction of Sum: element k
//     goes to lane (k/8) mod 32, each lane adds its terms in increasing k
//     starting from +0, and the 32 lane totals are combined by the xor
//     butterfly of Combine. A dot product is that sum over the rounded
//     products float32(w[k]*x[k]).
//   - Transcendental functions (Exp, Sigmoid, SiLU, Softplus, the RoPE
//     cos/sin table, the RoPE inverse frequencies) are computed from their
//     float32 argument with float64 basic operations only (+, -, *, / and bit
//     manipulation; the algorithms are fdlibm's, ported with explicit
//     rounding) and rounded once to float32. Go's math.Exp/Log/Sin/Cos/Pow
//     are never used: on amd64 math.Exp and math.Log are assembly whose
//     result depends on whether the CPU has FMA, and the pure-Go ones are
//     contracted into FMA under GOAMD64=v3 and on arm64.
//   - Square root and division are the correctly rounded IEEE operations.
//   - On amd64 with AVX2 the dot products of full 256-term rounds run in
//     assembly over the lane-major layout of lanemajor.go: 8 lanes per
//     vector, each lane's additions in the canonical order, VMULPS and VADDPS
//     only. The build tag purego (or another GOARCH) keeps the scalar loops;
//     both give the same bits.
//   - Top-k follows torch.topk's CPU order exactly (libstdc++ nth_element /
//     partial_sort), argmax ties go to the lowest index.
//
// Nothing in this package allocates in its hot functions, and nothing depends
// on the thread count, the batch size, or the cache state.
package canon
