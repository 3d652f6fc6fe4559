#!/usr/bin/env bash
# devlevel.sh (on the GPU machine): issue 21's measurement of the device
# level, in one call. On a 4-layer slice of Qwen3.5-122B-A10B shapes
# (synth --preset real --layers 4: 1024 routed experts of 18.9 MB, uniform
# routing by the synthetic router) at --vram-budget 16GiB:
#  1. tarfa run --json, each device policy (--device-policy, fifo being
#     the CUDA backend's own policy before the device level; inclusive, and
#     exclusive for the default policy), --trace recorded: the device
#     level's measured uses, hits and slots (expert_levels);
#  2. tarfa sim --measured on each trace (the run's slots and RAM capacity):
#     the same policy simulated beside the measured counts, and Belady's
#     optimum on the same trace;
#  3. tarfa bench decode, cold and warm, the new binary and, if
#     tarfa-fifo is beside it (main before the device level: the CUDA
#     backend's FIFO of slots), the old one, one after the other.
# ONLY=fifo runs step 3's old binary alone (a second call on the warm
# machine, when the tree that travels cannot hold both binaries; the slice
# in /tmp is kept). Every step checks the time left (LIMIT seconds in all, 540 by default).
# Results in $OUT/results.tgz (at most 8 files come back from a call).
#
#	# here: prepare.sh, then cp /tmp/tarfa-fifo .dev/cuda/ && gzip -9 .dev/cuda/tarfa-fifo
#	# device call: command "bash .dev/cuda/devlevel.sh", carry [".dev/cuda"]
set -o pipefail
dev=$(cd "$(dirname "$0")" && pwd)
cd "$dev"
. ./unpack.sh
: "${OUT:?OUT=a directory for the results}"
LIMIT=${LIMIT:-540}
TOKENS=${TOKENS:-128}
VRAM=${VRAM:-16GiB}
start=$SECONDS
R=$OUT/devlevel; mkdir -p "$R"
trap 'tar -czf "$OUT/results.tgz" -C "$OUT" devlevel; rm -rf "$R"' EXIT
left() { echo $((LIMIT - (SECONDS - start))); }
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | tee "$R/env.txt"
B=/tmp/slice4
if [ ! -s $B/jnf/manifest.json ]; then
	rm -rf $B; mkdir -p $B
	s0=$SECONDS
	timeout $(left) ./tarfa synth --arch qwen3_5_moe --preset real --layers 4 --out $B/hf --no-tokenizer 2>&1 | tail -1
	timeout $(left) ./tarfa convert $B/hf --out $B/jnf 2>&1 | tail -1; rm -rf $B/hf
	echo "synth+convert $((SECONDS - s0)) s"
fi
du -sh $B/jnf | tee -a "$R/env.txt"
run() { # name, flags...
	local name=$1; shift
	[ "$(left)" -lt 60 ] && { echo "$name: skipped, $(left) s left"; return; }
	timeout $(($(left) - 20)) ./tarfa run --model $B/jnf --backend cuda --vram-budget $VRAM --tokens 1,2,3,4 --max-tokens $TOKENS \
		--heat=false --json --trace "$R/trace-$name.jsonl" "$@" > "$R/run-$name.json" 2> "$R/run-$name.err"
	echo "run $name rc=$?: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); d=r["expert_levels"]["device"]; m=r["expert_levels"]["ram"]; print("device %d of %d uses hit (%.1f%%, %d slots), RAM %d of %d; decode %.2f tok/s" % (d["hits"], d["uses"], 100*d["hits"]/max(d["uses"],1), d["capacity"], m["hits"], m["uses"], r["timing"]["decode_tokens_per_second"]))' "$R/run-$name.json" 2>&1)"
}
sim() { # name, policy, flags...: the run's trace, its slots and RAM capacity (--measured)
	local name=$1 pol=$2; shift 2
	[ -s "$R/run-$name.json" ] || { echo "sim $name: no run"; return; }
	./tarfa sim --trace "$R/trace-$name.jsonl" --measured "$R/run-$name.json" --policy $pol "$@" --json > "$R/sim-$name-$pol.json" 2> "$R/sim-$name-$pol.err"
	echo "sim $name --policy $pol $* rc=$?: $(python3 -c 'import json,sys; o=json.load(open(sys.argv[1])); r=o["result"]; l=r["levels"]; m=o["measured"]["device"]; print("device %d of %d uses hit (%.1f%%; measured %d of %d, %.1f%%), %d slots" % (l["device"]["hits"], l["device"]["uses"], 100*r["hit_device"], m["hits"], m["uses"], 100*m["hits"]/max(m["uses"],1), r["config"]["device_slots"]))' "$R/sim-$name-$pol.json" 2>&1)"
}
bench() { # name, binary
	[ "$(left)" -lt 120 ] && { echo "bench $1: skipped, $(left) s left"; return; }
	timeout $(($(left) - 20)) "$2" bench decode $B/jnf --backend cuda --vram-budget $VRAM --repeat 1 --ledger=false \
		--decode-tokens $TOKENS --ram-fraction 1 --json > "$R/bench-$1.json" 2> "$R/bench-$1.err"
	echo "bench $1 rc=$?: $(grep -o '"device_hits":[0-9]*\|"device_uses":[0-9]*\|"device_slots":[0-9]*\|"experts_resident_per_token":[0-9.]*' "$R/bench-$1.json" | tr '\n' ' ')"
}
if [ "${ONLY:-}" != fifo ]; then
run predict
sim predict predict
sim predict belady
run fifo --device-policy fifo
sim fifo fifo
run lru --device-policy lru
sim lru lru
run heat --device-policy heat
sim heat heat
run predict-excl --exclusive
sim predict-excl predict --exclusive
bench tiered ./tarfa
fi
[ -x ./tarfa-fifo ] && bench fifo ./tarfa-fifo
echo "done in $((SECONDS - start)) s"
