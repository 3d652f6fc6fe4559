#!/usr/bin/env bash
# fp8bench.sh (on the GPU machine): issue 23 item 4. The 4-layer slice of
# Qwen3.5-122B-A10B shapes (synth --preset real --layers 4 --jnf, uniform
# routing) in BF16 and the same model in block FP8 (--dtype fp8: Qwen's
# official FP8 layout, 128×128 blocks), then `tarfa run --tokens 1,2,3,4
# --max-tokens TOKENS (24) --backend cuda` with the defaults at --vram-budget 16GiB
# and 12GiB: cold (page cache dropped before the run) and warm (the same
# run again at once, its files in the page cache), BF16 and FP8 alternated,
# REPS times. Each line: decode s/token, bytes read from storage and hashed
# a generated token, the tokens' checksum (each dtype's runs must agree).
# Then the storage bound: the slice's largest layer file read with 8
# parallel O_DIRECT streams. LIMIT seconds in all.
set -o pipefail
cd "$(dirname "$0")"
. ./unpack.sh
: "${OUT:?}"
LIMIT=${LIMIT:-560}
REPS=${REPS:-2}
TOKENS=${TOKENS:-24}
WARM=${WARM:-1}   # 0: cold runs only
EXTRA=${EXTRA:-} # one more cold configuration, alternated the same way, e.g. "--vram-budget 12GiB --ram-budget 0"
start=$SECONDS
left() { echo $((LIMIT - (SECONDS - start))); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for dt in bf16 fp8; do
	B=/tmp/s4-$dt
	if [ ! -s $B/manifest.json ]; then
		rm -rf $B
		s0=$SECONDS
		./tarfa synth --arch qwen3_5_moe --preset real --layers 4 --dtype $dt --jnf --workers $(nproc) --out $B 2>&1 | tail -1
		echo "synth $dt: $((SECONDS - s0)) s, $(du -sb $B | cut -f1) bytes"
	fi
done
run() { # label, dtype, flags...
	local name=$1 dt=$2; shift 2
	[ "$(left)" -lt 45 ] && { echo "$name: skipped, $(left) s left"; return; }
	timeout $(($(left) - 10)) ./tarfa run --model /tmp/s4-$dt --backend cuda --tokens 1,2,3,4 --max-tokens $TOKENS --heat=false --json "$@" > $OUT/r.json 2> $OUT/r.err
	echo "$name $dt rc=$?: $(python3 -c '
import json, sys, hashlib
r = json.load(open(sys.argv[1])); t = r["timing"]; l = r.get("expert_levels") or {}; s = l.get("storage") or {}
n = len(r["tokens"])
print("mode %r decode %.3f s/token (%.2f tok/s), load %.1f s, storage read %.0f MB/token hashed %.0f MB/token, device hits %s, tokens %s" % (
    r["mode"], 1 / max(t["decode_tokens_per_second"], 1e-9), t["decode_tokens_per_second"], t["load_seconds"],
    s.get("bytes_read", 0) / n / 1e6, s.get("bytes_hashed", 0) / n / 1e6, (l.get("device") or {}).get("hits"),
    hashlib.md5(str(r["tokens"]).encode()).hexdigest()[:8]))' $OUT/r.json 2>&1)"
	grep -iE "error|refus" $OUT/r.err | head -3
	python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r["label"]=sys.argv[2]; print(json.dumps(r))' $OUT/r.json "$name $dt $*" >> $OUT/fp8bench.jsonl
}
for i in $(seq $REPS); do
	for v in 16GiB 12GiB; do
		for dt in bf16 fp8; do
			sync; echo 3 > /proc/sys/vm/drop_caches
			run "rep $i, $v, cold" $dt --vram-budget $v
			[ "$WARM" = 1 ] && run "rep $i, $v, warm" $dt --vram-budget $v
		done
	done
	if [ -n "$EXTRA" ]; then
		for dt in bf16 fp8; do
			sync; echo 3 > /proc/sys/vm/drop_caches
			run "rep $i, cold, $EXTRA" $dt $EXTRA
		done
	fi
done
echo "== storage bound: 8 parallel O_DIRECT streams over the largest layer file of each"
for dt in bf16 fp8; do
	f=$(ls -S /tmp/s4-$dt/*.jnf | head -1); sz=$(stat -c %s $f)
	sync; echo 3 > /proc/sys/vm/drop_caches
	t0=$(date +%s.%N)
	for k in 0 1 2 3 4 5 6 7; do
		dd if=$f of=/dev/null bs=16M iflag=direct skip=$((k * sz / 8 / (16 << 20))) count=$(((sz / 8 + (16 << 20) - 1) / (16 << 20))) status=none &
	done
	wait
	echo "$dt $f: $sz bytes in $(python3 -c "import time; print('%.2f s, %.2f GB/s' % (time.time() - $t0, $sz / (time.time() - $t0) / 1e9))")"
done
rm -f $OUT/r.json $OUT/r.err
echo "done in $((SECONDS - start)) s"
