// Package b3host runs the CUDA backend's BLAKE3 (backend/cuda/kernels/blake3.cuh)
// on the host, compiled by the C compiler, so that its arithmetic is checked
// against github.com/zeebo/blake3 without a GPU. Sum walks the tree the way
// the kernels do: every chunk's chaining value (blake3_chunks), then the
// levels of parents, pairs left to right with an odd last node carried up
// (blake3_parents). The kernels themselves are checked on a GPU by
// backend/cuda's TestDeviceBLAKE3.
package b3host
