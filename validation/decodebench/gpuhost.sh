#!/bin/bash
# The bench-decode run of BENCHMARKS.md ("Streaming decode under RAM budgets") on the
# GPU host (its CPU side only): synth + convert a 2-layer real-shape slice there, then
# bench decode at 16 and 4 cores. Results go to $OUT. TARFA: the tarfa binary.
set -o pipefail
T=${TARFA:-$PWD/.dev/lead/tarfa}
df -hT . /tmp /root 2>&1 | tee $OUT/df.txt
nproc; free -g
D=$PWD/.dev/ck
mkdir -p $D
S=$(date +%s)
$T synth --arch qwen3_5_moe --preset real --layers 2 --out $D/hf --json > $OUT/synth.json || exit 1
echo synth $(( $(date +%s)-S )) s
$T convert $D/hf --out $D/jnf 2>&1 | tail -3 || exit 1
echo convert $(( $(date +%s)-S )) s
rm -rf $D/hf
du -sh $D/jnf
timeout 330 $T bench decode $D/jnf --repeat 4 --ram-fraction 0.25 --decode-tokens 16 --json > $OUT/decode16.json 2> $OUT/decode16.err
echo decode16 rc=$? $(( $(date +%s)-S )) s
tail -5 $OUT/decode16.err
R=$(( 560 - ($(date +%s)-S) ))
[ $R -gt 60 ] && GOMAXPROCS=4 timeout $R $T bench decode $D/jnf --repeat 3 --ram-fraction 0.25 --decode-tokens 8 --ledger=false --json > $OUT/decode4.json 2> $OUT/decode4.err
echo decode4 rc=$? $(( $(date +%s)-S )) s
