// Package fp8host runs the CUDA backend's block-FP8 kernels
// (backend/cuda/kernels/fp8.cuh: the work of one warp of fp8_quantize and
// of matmul_fp8) on the host, compiled by the C compiler with a warp of 32
// coroutines (one per lane, run in turn up to each exchange), so
// that their arithmetic and indexing are checked against canon's
// QuantizeFP8 and DotFP8 without a GPU. The kernels themselves are checked
// on a GPU by backend/cuda's conformance suite (TestCUDA).
package fp8host
