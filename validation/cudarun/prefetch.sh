#!/usr/bin/env bash
# prefetch.sh (on the GPU machine): issue 22 item 3, prefetch against
# --prefetch=false, storage-cold. Two 4-layer slices of Qwen3.5-122B-A10B
# shapes with a 4096-token vocabulary are made one after the other (synth
# --jnf, no HF copy: the disk holds two JNF slices, not four
# copies): one with synth's uniform routing (random routers), one with
# --routing local (a stable half of each layer's experts for every token;
# the next layer's router on this layer's input predicts the rest). Then
# `tarfa run --tokens 1,2,3,4 --max-tokens 32 --backend cuda --vram-budget
# 16GiB --ram-budget 2.5GiB` runs with prefetch and with --prefetch=false,
# alternated, twice each per slice, the page cache dropped before every
# run. Every run prints its decode s/token, storage reads, what prefetch
# did (reads issued / used / wasted / skipped), what its back-off did
# (hinted experts held back, probes, reads ahead their step did not use and
# of those lost to eviction, used late, the read time hidden and unused)
# and the hints' precision (came true / scored, all and by rank for the
# first 8 ranks). LIMIT seconds in all (the synth and convert
# included); a run that would not fit is skipped and says so. For a check
# of the script on a machine without a GPU: BACKEND=cpu LAYERS=1 TOKENS=2
# (and SLICES=/tmp/somewhere: the slices' directory, /tmp by default).
set -o pipefail
cd "$(dirname "$0")"
. ./unpack.sh
: "${OUT:?}"
LIMIT=${LIMIT:-470}
TOKENS=${TOKENS:-32}
LAYERS=${LAYERS:-4}
BACKEND=${BACKEND:-cuda}
SLICES=${SLICES:-/tmp}
dev=(--backend "$BACKEND")
[ "$BACKEND" = cuda ] && dev+=(--vram-budget 16GiB)
start=$SECONDS
left() { echo $((LIMIT - (SECONDS - start))); }
mkslice() { # dir, routing
	if [ ! -s $1/jnf/manifest.json ]; then
		rm -rf $1; mkdir -p $1
		# synth --jnf: the files and root of synth then convert, without
		# the Hugging Face copy.
		./tarfa synth --arch qwen3_5_moe --preset real --layers $LAYERS --vocab 4096 --routing $2 --jnf --workers "$(nproc)" --out $1/jnf --no-tokenizer 2>&1 | tail -1
	fi
	echo "$2 slice ready at $((SECONDS - start)) s"
}
mkslice $SLICES/pf4u uniform
mkslice $SLICES/pf4l local
run() { # label, dir, flags...
	local name=$1 dir=$2; shift 2
	[ "$(left)" -lt 45 ] && { echo "$name: skipped, $(left) s left"; return; }
	sync; echo 3 > /proc/sys/vm/drop_caches
	timeout $(($(left) - 10)) ./tarfa run --model $dir/jnf "${dev[@]}" --ram-budget 2.5GiB --tokens 1,2,3,4 --max-tokens $TOKENS --heat=false --json "$@" > $OUT/r.json 2> $OUT/r.err
	echo "$name rc=$?: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); t=r["timing"]; l=r.get("expert_levels") or {}; p=l.get("prefetch") or {}; print("decode %.3f s/token, load %.1f s, tokens %s…" % (1/max(t["decode_tokens_per_second"],1e-9), t["load_seconds"], r["tokens"][:3]), "storage reads", (l.get("storage") or {}).get("uses"), "prefetch issued/useful/wasted/skipped %s/%s/%s/%s" % (p.get("issued"), p.get("useful"), p.get("wasted"), p.get("skipped")), "back-off: held back %s, probes %s, unused %s (lost %s), late %s, hidden %.2f s, unused %.2f s" % (p.get("backed_off"), p.get("probes"), p.get("unused"), p.get("lost"), p.get("late"), p.get("saved_seconds") or 0, p.get("unused_seconds") or 0), "hints true/scored %s/%s" % (p.get("hints_true"), p.get("hints_scored")), "by rank", list(zip(p.get("hints_true_by_rank") or [], p.get("hints_scored_by_rank") or []))[:8])' $OUT/r.json 2>&1 || tail -3 $OUT/r.err)"
	cat $OUT/r.json >> $OUT/prefetch.jsonl; echo >> $OUT/prefetch.jsonl
}
for i in 1 2; do
	for routing in uniform local; do
		d=$SLICES/pf4${routing:0:1}
		run "$routing, prefetch" $d
		run "$routing, --prefetch=false" $d --prefetch=false
	done
done
rm -f $OUT/r.json $OUT/r.err
echo "done in $((SECONDS - start)) s"
