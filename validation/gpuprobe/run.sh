#!/usr/bin/env bash
# Builds and runs probe.cu on the GPU machine (from the repository root),
# twice: with --fmad=false (the project's setting) and with --fmad=true (to
# show that the explicit intrinsics of canon.cuh alone prevent contraction).
# Writes OUT/results.json and OUT/results-fmad.json; compare them here with
#   go run ./validation/gpuprobe/cmd/gpuprobe -all OUT/results.json
set -euo pipefail
out=${OUT:-.}
nvcc --version | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
flags="-O2 -arch=sm_90 -ftz=false -prec-div=true -prec-sqrt=true -I backend/cuda/kernels"
nvcc $flags --fmad=false -o /tmp/probe validation/gpuprobe/probe.cu
nvcc $flags --fmad=true -o /tmp/probe-fmad validation/gpuprobe/probe.cu
time /tmp/probe > "$out/results.json"
time /tmp/probe-fmad > "$out/results-fmad.json"
strip() { sed -e 's/, "ms": [0-9.]*//' -e '/sweep_ms/d' "$1"; }
if cmp -s <(strip "$out/results.json") <(strip "$out/results-fmad.json"); then
  echo "fmad=false and fmad=true give the same aggregates"
else
  echo "fmad=false and fmad=true DIFFER"
fi
head -c 600 "$out/results.json"; echo
grep -o '"rows": [0-9]*, "k": [0-9]*, "w_seed": [0-9]*, "x_seed": [0-9]*, "agg": "[0-9a-f]*", "ms": [0-9.]*' "$out/results.json"
