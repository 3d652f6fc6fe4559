#!/usr/bin/env bash
# prepare.sh builds, on a machine without a GPU, what the device runs need
# and puts it in DEV (default .dev/cuda, git-ignored there): the -tags cuda
# test binary and tarfa, the golden records of the fixtures made with the
# CPU reference (greedy and sampled prompts of prompts.jsonl), and the
# scripts. CUDA headers and the stub libcuda come from Debian's
# nvidia-cuda-dev (backend/cuda/doc.go): SDK=path/to/extracted/root.
#
#	SDK=$PWD/cuda-sdk/root validation/cudarun/prepare.sh
#	# on the GPU machine, from the repository root:
#	bash .dev/cuda/conformance.sh   # suite, validate hf, replay
#	bash .dev/cuda/decode.sh        # decode on a synth --preset real slice
#	bash .dev/cuda/bench.sh         # issue 12 §3 in one call (see its header)
#
# TAGS=cuda,ptxdir builds the binaries that take the kernels' PTX from
# TARFA_CUDA_PTX_DIR (backend/cuda/ptxdir.go): PTX made on the GPU machine by
# kernels/gen.sh from the same sources, run there before it is committed
# (a device-validation build, never a release).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dev=${DEV:-$root/.dev/cuda}
: "${SDK:?SDK=the extracted nvidia-cuda-dev root (usr/include/cuda.h, usr/lib/x86_64-linux-gnu/stubs)}"
tags=${TAGS:-cuda}
export CGO_CFLAGS="-I$SDK/usr/include" CGO_LDFLAGS="-L$SDK/usr/lib/x86_64-linux-gnu/stubs"
mkdir -p "$dev"
cd "$root"
go test -c -tags "$tags" -ldflags="-s -w" -o "$dev/cuda.test" ./backend/cuda
go test -c -tags "$tags" -ldflags="-s -w" -o "$dev/engine.test" ./engine
go test -c -tags "$tags" -ldflags="-s -w" -o "$dev/decodebench.test" ./validation/decodebench
go build -ldflags="-s -w" -o "$dev/charts" ./reports/cmd/charts
go build -tags "$tags" -ldflags="-s -w" -o "$dev/tarfa" ./cmd/tarfa
go build -o "$dev/tarfa-cpu" ./cmd/tarfa
cp validation/cudarun/*.sh validation/cudarun/*.py "$dev/"
# The PTX tests read the kernel sources from kernels/ beside the test binary.
mkdir -p "$dev/kernels"
cp backend/cuda/kernels/*.cu backend/cuda/kernels/*.cuh backend/cuda/kernels/gen.sh "$dev/kernels/"
cd "$dev"
for m in qwen3moe-dev-a qwen35moe-dev-c qwen35moe-dev-e-long; do
	rm -rf "jnf-$m" "golden-$m"
	./tarfa-cpu convert "$root/validation/testdata/fixtures/$m/checkpoint" --out "jnf-$m" >/dev/null
	./tarfa-cpu golden record --model "jnf-$m" --prompts "$root/validation/cudarun/prompts.jsonl" --out "golden-$m"
done
# The block-FP8 checkpoints (synthref-fp8): replayed on cuda with the
# block-FP8 kernels on (conformance.sh).
for m in q3-fp8 q35-fp8; do
	rm -rf "jnf-$m" "golden-$m"
	./tarfa-cpu convert "$root/validation/testdata/synthref-fp8/$m/checkpoint" --out "jnf-$m" >/dev/null
	./tarfa-cpu golden record --model "jnf-$m" --prompts "$root/validation/cudarun/prompts.jsonl" --out "golden-$m"
done
rm -rf golden-default
./tarfa-cpu golden record --prompts "$root/validation/cudarun/prompts.jsonl" --out golden-default
# The converted models are made again on the device, and the binaries travel
# compressed (the tree that travels is limited to 64 MiB: the repository is
# about 30 MB of it): each script unpacks them first (unpack.sh).
rm -rf jnf-* tarfa-cpu
gzip -9f cuda.test engine.test decodebench.test charts tarfa
du -sh "$dev"
