#!/usr/bin/env bash
# ptxcall.sh (on the GPU machine, from the repository root): one device call
# for kernels not yet committed as the device's PTX. The device's nvcc makes
# the PTX from the sources the binaries embed (gen.sh in DEV/kernels), every
# binary loads it (TARFA_CUDA_PTX_DIR; the binaries must be built with
# TAGS=cuda,ptxdir prepare.sh, which refuse PTX of other sources), then:
# conformance.sh (suite, validate hf, replays), BenchmarkMatMul, and
# serve.sh (TIMED=16; SERVE_VARIANTS become serve.sh's VARIANTS). MM=1 also
# runs mmbench.cu, NCU=1 ncu on the LM head's MatMuls; MATMULBENCH=0 and
# SERVE=0 leave out BenchmarkMatMul and serve.sh. The PTX stays in /tmp/ptx
# for a later call on the same machine (abserve.sh with TARFA_CUDA_PTX_DIR). Results: $OUT/ptx.tgz (commit it when everything passed)
# and $OUT/all.tgz.
#
#	# here: DEV=$PWD/.dev/cuda TAGS=cuda,ptxdir SDK=... validation/cudarun/prepare.sh
#	# device call: command "bash .dev/cuda/ptxcall.sh", carry [".dev/cuda"]
#	# then: tar -xzf ptx.tgz -C backend/cuda/kernels; commit; TestPTXIsCurrent passes
set -o pipefail
dev=$(cd "$(dirname "$0")" && pwd)
: "${OUT:?}"
O=$OUT; mkdir -p $O/r
export PATH=$PATH:/usr/local/cuda/bin
(cd $dev/kernels && bash gen.sh && rm -rf /tmp/ptx && mkdir -p /tmp/ptx && cp *.ptx /tmp/ptx && tar -czf $O/ptx.tgz *.ptx) > $O/r/gen.txt 2>&1 || { cat $O/r/gen.txt; exit 1; }
head -1 /tmp/ptx/ops.compute_90.ptx
export TARFA_CUDA_PTX_DIR=/tmp/ptx
if [ "${MM:-0}" = 1 ]; then
	nvcc -arch=sm_90 -std=c++17 -O3 --fmad=false -ftz=false -prec-div=true -prec-sqrt=true -o /tmp/mmbench validation/cudarun/mmbench.cu &&
		timeout 100 /tmp/mmbench > $O/r/mmbench.txt 2>&1
	echo "mmbench: $(grep -c same $O/r/mmbench.txt) same, $(grep -c DIFF $O/r/mmbench.txt) different"
fi
mkdir -p $O/r/conf; OUT=$O/r/conf bash $dev/conformance.sh > $O/r/conf/log.txt 2>&1; echo "conformance rc=$?"
grep -E 'rc=|exact=|FAIL' $O/r/conf/log.txt | grep -v 'rc=0' | head -20
if [ "${MATMULBENCH:-1}" = 1 ]; then
	(cd $dev && ./cuda.test -test.run XXX -test.bench BenchmarkMatMul -test.benchtime 20x) > $O/r/matmulbench.txt 2>&1
	echo "BenchmarkMatMul: $(grep -c ns/op $O/r/matmulbench.txt) results"
fi
# NCU=1: Nsight Compute's warp-state, scheduler and memory sections for the
# LM head's products at 1 and 16 tokens (the clocks left alone, as METHOD.md
# asks); NCU_FILTER picks other BenchmarkMatMul cases.
if [ "${NCU:-0}" = 1 ] && command -v ncu > /dev/null; then
	(cd $dev && timeout 240 ncu --clock-control none --kernel-name regex:matmul --launch-skip 2 --launch-count 6 \
		--section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy \
		./cuda.test -test.run XXX -test.bench "${NCU_FILTER:-BenchmarkMatMul/head.*/T=(1|16)/}" -test.benchtime 3x) > $O/r/ncu.txt 2>&1
	echo "ncu rc=$?: $(grep -c 'Section: Warp State' $O/r/ncu.txt) kernels profiled"
fi
if [ "${SERVE:-1}" = 1 ]; then
mkdir -p $O/r/serve
OUT=$O/r/serve LIMIT=${SERVE_LIMIT:-330} TIMED=16 BACKENDS=cuda ROUNDS=${ROUNDS:-2} VARIANTS="${SERVE_VARIANTS:-}" bash $dev/serve.sh > $O/r/serve/log.txt 2>&1
echo "serve rc=$?"
grep -oE '^(cuda|variant)[^:]*|"tokens_per_second":[0-9.]*' $O/r/serve/log.txt | paste - -
fi
cd $O && tar -czf all.tgz r && rm -rf r
