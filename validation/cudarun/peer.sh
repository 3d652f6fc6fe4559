#!/usr/bin/env bash
# peer.sh (on the GPU machine, from the repo root): the transformers +
# accelerate peer (resident, cpu_offload, disk_offload) and Tarfa on the same
# 4-layer synth --preset real slice (layer 3 is full attention: transformers'
# cached decode fails on a slice of DeltaNet layers only — see BENCHMARKS.md),
# GPU and prompt, in one run. Each step
# checks the time left (LIMIT seconds in all) so the run ends inside its call.
# TARFA: a -tags cuda tarfa binary. Output: $OUT/peer.jsonl, $OUT/tarfa.jsonl.
set -o pipefail
export PYTHONUNBUFFERED=1
T=${TARFA:?a -tags cuda tarfa binary}
LIMIT=${LIMIT:-560}   # a 4-layer slice needs about 9 minutes: run it in a call of its own
s0=$(date +%s)
left() { echo $(( LIMIT - ($(date +%s) - s0) )); }
B=/tmp/peer; rm -rf $B; mkdir -p $B
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import transformers, accelerate, torch; print('transformers', transformers.__version__, 'accelerate', accelerate.__version__, 'torch', torch.__version__)"
$T synth --arch qwen3_5_moe --preset real --layers ${LAYERS:-4} --out $B/hf --json | tee $OUT/synth.json || exit 1
echo "synth done at $(( $(date +%s) - s0 )) s"
N=${N:-4}
for mode in resident cpu_offload disk_offload; do
  [ "$(left)" -gt 60 ] || { echo "no time left for $mode"; break; }
  timeout $(( $(left) - 20 )) python3 validation/cudarun/peer.py $B/hf $mode $N $B/offload 2> $OUT/peer-$mode.err | tee -a $OUT/peer.jsonl
  echo "$mode rc=$? at $(( $(date +%s) - s0 )) s"; tail -2 $OUT/peer-$mode.err
  rm -rf $B/offload
done
[ "$(left)" -gt 120 ] || { echo "no time left for tarfa"; exit 0; }
timeout $(( $(left) - 30 )) $T convert $B/hf --out $B/jnf 2>&1 | tail -1
echo "convert done at $(( $(date +%s) - s0 )) s"
rm -rf $B/hf
for be in "--backend cuda --vram-budget 16GiB" "--backend cpu"; do
  [ "$(left)" -gt 25 ] || break
  sync; echo 3 > /proc/sys/vm/drop_caches
  timeout $(( $(left) - 5 )) $T run --model $B/jnf --tokens 1,2,3,4 --max-tokens 8 --ram-budget 2600MiB --heat=false --json $be 2> $OUT/tarfa.err | tee -a $OUT/tarfa.jsonl
  echo "tarfa $be rc=$? at $(( $(date +%s) - s0 )) s"; grep -E "device|experts" $OUT/tarfa.err | head -3
done
