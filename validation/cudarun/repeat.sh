#!/usr/bin/env bash
# repeat.sh (on the GPU machine): issue 22 item 4, a repeat run. The 4-layer
# slice of Qwen3.5-122B-A10B shapes is made (synth --jnf: its files are
# then in the page cache, as after an earlier run), and `tarfa run --tokens
# 1,2,3,4 --max-tokens 48 --backend cuda --vram-budget 16GiB` runs with the
# defaults and with the issue's best flags (--direct off --ram-budget 0),
# alternated, twice each, the page cache kept; then once each after
# dropping it (cold). Every run prints its decode tokens/s, its reads from
# the page cache (cached_reads) and with O_DIRECT. LIMIT seconds in all.
set -o pipefail
cd "$(dirname "$0")"
. ./unpack.sh
: "${OUT:?}"
LIMIT=${LIMIT:-420}
start=$SECONDS
left() { echo $((LIMIT - (SECONDS - start))); }
B=/tmp/slice4
if [ ! -s $B/jnf/manifest.json ]; then
	rm -rf $B; mkdir -p $B
	# synth --jnf: the files and root of synth then convert, without the
	# Hugging Face copy (118 s on 16 cores, against about 170 for the two).
	./tarfa synth --arch qwen3_5_moe --preset real --layers 4 --jnf --workers "$(nproc)" --out $B/jnf --no-tokenizer 2>&1 | tail -1
fi
runs=0
run() { # label, flags... (a CPU profile of each run: prof-N.pprof)
	local name=$1; shift
	[ "$(left)" -lt 40 ] && { echo "$name: skipped, $(left) s left"; return; }
	runs=$((runs + 1))
	TARFA_CPUPROFILE=$OUT/prof-$runs.pprof timeout $(($(left) - 10)) ./tarfa run --model $B/jnf --backend cuda --vram-budget 16GiB --tokens 1,2,3,4 --max-tokens 48 --heat=false --json "$@" > $OUT/r.json 2> $OUT/r.err
	echo "$runs. $name rc=$?: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); t=r["timing"]; l=r.get("expert_levels") or {}; print("decode %.2f tok/s (%.3f s/token), load %.1f s, tokens %s…" % (t["decode_tokens_per_second"], 1/max(t["decode_tokens_per_second"],1e-9), t["load_seconds"], r["tokens"][:3]), "device hits", (l.get("device") or {}).get("hits"), "page cache", (l.get("page_cache") or {}).get("hits"), "storage reads", (l.get("storage") or {}).get("uses"))' $OUT/r.json 2>&1)"
	cat $OUT/r.json >> $OUT/repeat.jsonl; echo >> $OUT/repeat.jsonl
}
for i in 1 2; do
	run "repeat, defaults"
	run "repeat, --direct off --ram-budget 0" --direct off --ram-budget 0
done
sync; echo 3 > /proc/sys/vm/drop_caches
run "cold, defaults"
sync; echo 3 > /proc/sys/vm/drop_caches
run "cold, --prefetch=false" --prefetch=false
rm -f $OUT/r.json $OUT/r.err
echo "done in $((SECONDS - start)) s"
