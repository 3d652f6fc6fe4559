#!/usr/bin/env bash
# conformance.sh (on the GPU machine): the CUDA conformance suite, validate hf
# of every fixture with --backend cuda, and replay of the CPU golden records
# under several placements and budgets. Logs go to $OUT.
set -o pipefail
cd "$(dirname "$0")"
. ./unpack.sh
root=$(cd ../.. && pwd)
export TARFA_TEST_DISALLOW_SKIP=1
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
echo "== conformance suite"
timeout 300 ./cuda.test -test.v -test.timeout 290s > $OUT/test.log 2>&1; echo "cuda.test rc=$?"
grep -E "^\s*--- (FAIL|PASS)|^(PASS|FAIL|ok)|cuda_test.go|backendtest.go|panic" $OUT/test.log | grep -v "^    --- PASS" | head -40
echo "== the CUDA tests of engine and decodebench (engine.test, decodebench.test -tags cuda)"
dev=$PWD
(cd "$root/engine" && timeout 120 "$dev/engine.test" -test.v -test.run 'CUDA' -test.timeout 110s) >> $OUT/test.log 2>&1; echo "engine.test -test.run CUDA rc=$?"
(cd "$root/validation/decodebench" && timeout 120 "$dev/decodebench.test" -test.v -test.run 'CUDA' -test.timeout 110s) >> $OUT/test.log 2>&1; echo "decodebench.test -test.run CUDA rc=$?"
grep -E "^--- (FAIL|PASS): TestCUDA" $OUT/test.log
echo "== validate hf"
for d in fixtures/qwen3moe-dev-a fixtures/qwen35moe-dev-c fixtures/qwen35moe-dev-e-long synthref/q3-dense-tied-norenorm synthref/q3-heap-topk-sparse-step synthref/q35-ratio3-hd40-tied \
    synthref-fp8/q3-fp8 synthref-fp8/q35-fp8 synthref-fp8/q3-fp8/w8a16 synthref-fp8/q35-fp8/w8a16; do
  c=$root/validation/testdata/${d%/w8a16}/checkpoint
  timeout 60 ./tarfa validate hf --backend cuda --checkpoint $c --reference $root/validation/testdata/$d > $OUT/v.tmp 2>&1; rc=$?
  echo "validate $d rc=$rc"; cat $OUT/v.tmp >> $OUT/validate.log; tail -3 $OUT/v.tmp
done
echo "== golden replay"
for m in qwen3moe-dev-a qwen35moe-dev-c qwen35moe-dev-e-long; do ./tarfa convert $root/validation/testdata/fixtures/$m/checkpoint --out jnf-$m 2>&1 | tail -1; done
for m in qwen3moe-dev-a qwen35moe-dev-c qwen35moe-dev-e-long default; do
  model="--model jnf-$m"; [ $m = default ] && model=""
  for o in "" "--placement host" "--placement random" "--placement device --vram-budget 1GiB" "--vram-budget 1GiB --placement host" "--vram-budget 1GiB --placement random --ram-budget 0" "--vram-budget 1GiB --placement balance"; do
    timeout 60 ./tarfa replay --backend cuda $model --golden golden-$m $o > $OUT/r.tmp 2>&1; rc=$?
    echo "replay $m [$o] rc=$rc: $(tail -1 $OUT/r.tmp)"; cat $OUT/r.tmp >> $OUT/replay.log
  done
done
echo "== block-FP8 golden replay (synthref-fp8; kernels/fp8.cu)"
for m in q3-fp8 q35-fp8; do
  ./tarfa convert $root/validation/testdata/synthref-fp8/$m/checkpoint --out jnf-$m 2>&1 | tail -1
  for o in "" "--placement host" "--placement random" "--placement device --vram-budget 1GiB" "--vram-budget 1GiB --placement random --ram-budget 0"; do
    timeout 60 ./tarfa replay --backend cuda --model jnf-$m --golden golden-$m $o > $OUT/r.tmp 2>&1; rc=$?
    echo "replay $m [$o] rc=$rc: $(tail -1 $OUT/r.tmp)"; cat $OUT/r.tmp >> $OUT/replay.log
  done
done
rm -f $OUT/v.tmp $OUT/r.tmp
echo "replays exact=true: $(grep -c "exact=true" $OUT/replay.log), exact=false: $(grep -c "exact=false" $OUT/replay.log)"
