#!/usr/bin/env bash
# decode.sh (on the GPU machine): decode on a 2-layer synth --preset real
# slice of Qwen3.5-122B-A10B, storage-bound (RAM tier 27% of the routed
# experts) and with every expert fitting in RAM, CUDA and CPU, page cache
# dropped before each run, and the raw O_DIRECT bandwidth of a layer file.
set -o pipefail
cd "$(dirname "$0")"
. ./unpack.sh
export TARFA_TEST_DISALLOW_SKIP=1
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
echo "== bench: synth --preset real --layers 2"
B=/tmp/bench; rm -rf $B; mkdir -p $B
s0=$(date +%s)
timeout 120 ./tarfa synth --arch qwen3_5_moe --preset real --layers 2 --out $B/hf --no-tokenizer 2>&1 | tail -1
timeout 120 ./tarfa convert $B/hf --out $B/jnf 2>&1 | tail -1; rm -rf $B/hf
echo "synth+convert $(( $(date +%s) - s0 )) s"; du -sb $B/jnf; ls -la $B/jnf | head
sync; echo 3 > /proc/sys/vm/drop_caches
big=$(ls -S $B/jnf/* | head -1); echo "raw O_DIRECT of $big:"; dd if=$big of=/dev/null bs=16M iflag=direct 2>&1 | tail -1
run() { sync; echo 3 > /proc/sys/vm/drop_caches; echo "-- run $*"; timeout 100 ./tarfa run --model $B/jnf --tokens 1,2,3,4 --heat=false --json "$@" > $OUT/r.json 2> $OUT/r.err; echo "rc=$? $(grep -o '"tokens":\[[0-9,]*\]' $OUT/r.json | md5sum | cut -c1-8) $(grep -o '"timing":.*' $OUT/r.json)"; grep -E "device:|experts:" $OUT/r.err; cat $OUT/r.json >> $OUT/bench.jsonl; echo >> $OUT/bench.jsonl; }
for rep in 1 2; do
run --backend cuda --vram-budget 16GiB --ram-budget 2600MiB --max-tokens 24
run --backend cpu --ram-budget 2600MiB --max-tokens 24
done
run --backend cuda --vram-budget 16GiB --ram-budget 2600MiB --max-tokens 24 --placement device
run --backend cuda --vram-budget 16GiB --ram-budget 2600MiB --max-tokens 24 --placement host
run --backend cuda --vram-budget 12GiB --ram-budget 2600MiB --max-tokens 24
run --backend cuda --vram-budget 16GiB --ram-budget 12GiB --max-tokens 48
run --backend cpu --ram-budget 12GiB --max-tokens 48
run --backend cuda --ram-budget 12GiB --max-tokens 48 --placement device
rm -f $OUT/r.json $OUT/r.err
