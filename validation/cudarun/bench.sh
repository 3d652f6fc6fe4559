#!/usr/bin/env bash
# bench.sh (on the GPU machine): the measurement of issue 12 §3 in one device
# call (LIMIT seconds in all, 540 by default: every step checks the time
# left, like peer.sh, so the run ends inside a 600 s call with its results).
#
# Run it from the repository root after prepare.sh put the binaries in
# .dev/cuda (on the CPU machine, in the tree the device is sent):
#
#	SDK=$PWD/cuda-sdk/root validation/cudarun/prepare.sh   # here
#	# device call: command "bash .dev/cuda/bench.sh", carry [".dev/cuda"]
#
# Steps, each only if the time left allows it:
#  1. TestCUDACounters (engine.test -tags cuda): the cuda backend's counters
#     against the model's placements on the reference fixture, and
#     TestCUDAPinnedSlots (decodebench.test): the tier's device slots pinned
#     by the backend, experts copied from them with no staging copy, the
#     same logits as the cpu backend (≈ 10 s; both passed on the H200, 2026-12-01).
#  2. synth --preset real --layers 4 (Qwen3.5-122B-A10B shapes, one
#     full-attention layer; HF ≈ 22 GB) and convert (JNF ≈ 23 GB; ≈ 3 min
#     for both; the HF copy is deleted after the convert).
#  3. bench decode, one round a process (a round cut short by the time left
#     loses only itself), up to three rounds while the time allows: raw /
#     verified / hash figures, then decode (cold and warm, RAM tier 27% of
#     the routed experts, as 64 GB is of the full model) on cuda under
#     --vram-budget 16GiB and 12GiB and on cpu, every figure next to the
#     others, page cache dropped; the ledger's cost (--ledger-pairs 4, every
#     routed expert resident, on the first backend: cpu, which the simulator
#     is calibrated on too; the third round reverses the order, so its ledger
#     figure and calibration are cuda's). Rounds after the first pin the
#     device slots (--pin-slots) when TestCUDAPinnedSlots passed (PIN=0: never).
#     JSON and text into $OUT, and the charts drawn next to the JSON by the
#     charts binary built by prepare.sh.
# The transformers + accelerate peer is peer.sh, a call of its own.
# BACKENDS, VRAM (the cuda budgets), PAIRS (the ledger's pairs a round, 4)
# and TOKENS (decoded a generation, 8) change what is measured, e.g.
#	BACKENDS=cuda VRAM=16GiB,4GiB PAIRS=10 TOKENS=16 bash .dev/cuda/bench.sh
# For a dry run on a machine without a GPU (the script's logic, tiny shapes):
#	SYNTH="--preset tiny --layers 4" BACKENDS=cpu VRAM= LIMIT=300 OUT=/tmp/o \
#	    bash .dev/cuda/bench.sh   # with the binaries of prepare.sh
# Output in $OUT/results.tgz: env.txt, counters.log, synth.json, convert.log,
# decodeN.json, decodeN.txt, decodeN.err, decodeN-*.png for round N.
set -o pipefail
export PYTHONUNBUFFERED=1 TARFA_TEST_DISALLOW_SKIP=1
dev=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$dev/../.." && pwd)
T=$dev/tarfa
. "$dev/unpack.sh"
: "${OUT:?OUT=a directory for the results}"
# At most 8 files come back from a device call: the results are written to
# a folder of their own and packed into $OUT/results.tgz on exit.
back=$OUT
OUT=$(mktemp -d /tmp/bench-results.XXXX)
trap 'tar -C "$OUT" -czf "$back/results.tgz" . && tail -c 2000 "$OUT"/decode*.txt 2>/dev/null' EXIT
LIMIT=${LIMIT:-540}
SYNTH=${SYNTH:---preset real --layers 4}
BACKENDS=${BACKENDS:-cpu,cuda}
VRAM=${VRAM-16GiB,12GiB}
# The ledger's alternated pairs per round and the tokens of each generation.
PAIRS=${PAIRS:-4}
TOKENS=${TOKENS:-8}
s0=$(date +%s)
left() { echo $((LIMIT - ($(date +%s) - s0))); }
at() { echo "$1 at $(($(date +%s) - s0)) s (left $(left) s)"; }
B=${BENCH_DIR:-/tmp/bench}
rm -rf "$B"
mkdir -p "$B"

{
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
	nproc
	free -g
	df -hT "$B"
	(cd "$root" && git log -1 --format='commit %H %s' 2>/dev/null)
} 2>&1 | tee "$OUT/env.txt"

# 1. The counters on the GPU.
if [ "$(left)" -gt 120 ]; then
	(cd "$root/engine" && timeout 60 "$dev/engine.test" -test.run 'TestCUDACounters' -test.v) > "$OUT/counters.log" 2>&1
	echo "TestCUDACounters rc=$?"
	grep -q -- "--- PASS: TestCUDACounters" "$OUT/counters.log" || echo "TestCUDACounters did not pass (or did not run: is engine.test built with -tags cuda?)"
	(cd "$root/validation/decodebench" && timeout 60 "$dev/decodebench.test" -test.run 'TestCUDAPinnedSlots' -test.v) >> "$OUT/counters.log" 2>&1
	echo "TestCUDAPinnedSlots rc=$?"
	grep -q -- "--- PASS: TestCUDAPinnedSlots" "$OUT/counters.log" || echo "TestCUDAPinnedSlots did not pass (or did not run)"
	grep -E "^(--- |ok|PASS|FAIL)|counters|digest" "$OUT/counters.log" | head -20
	at "counters"
fi

# 2. The checkpoint.
[ "$(left)" -gt 360 ] || { echo "no time left for synth + convert + bench"; exit 1; }
timeout $(($(left) - 200)) "$T" synth --arch qwen3_5_moe $SYNTH --out "$B/hf" --json > "$OUT/synth.json" || { echo "synth failed"; exit 1; }
at "synth"
timeout $(($(left) - 150)) "$T" convert "$B/hf" --out "$B/jnf" > "$OUT/convert.log" 2>&1 || { echo "convert failed"; tail -3 "$OUT/convert.log"; exit 1; }
tail -1 "$OUT/convert.log"
du -sb "$B/hf" "$B/jnf"
rm -rf "$B/hf"
at "convert"

# 3. bench decode: cuda at 16 and 12 GiB and cpu, 27% of the experts in RAM,
# and the ledger's cost (--ledger-pairs, every routed expert resident, on the
# first backend). One round a process, so that a round cut short by the time
# left loses only itself: the first without pinned slots, the second (when
# time allows and TestCUDAPinnedSlots passed) with --pin-slots.
pinned=
grep -q -- "--- PASS: TestCUDAPinnedSlots" "$OUT/counters.log" 2>/dev/null && pinned=--pin-slots
[ "${PIN:-1}" = 0 ] && pinned=
n=0
for extra in "" "$pinned" "$pinned"; do
	n=$((n + 1))
	if [ $n -gt 1 ]; then
		[ -n "$took" ] && [ "$(left)" -gt $((took + took / 4 + 20)) ] || { echo "no time left for bench decode round $n"; break; }
	fi
	t0=$(date +%s)
	# The third round puts the backends in reverse order, so the ledger's
	# cost (measured on the first backend) is measured on cuda too.
	order=$BACKENDS
	[ $n -eq 3 ] && order=$(echo "$BACKENDS" | tr ',' '\n' | tac | paste -sd, -)
	timeout $(($(left) - 10)) "$T" bench decode "$B/jnf" --backend "$order" ${VRAM:+--vram-budget "$VRAM"} --ram-fraction 0.27 \
		--repeat 1 --decode-tokens "$TOKENS" --ledger --ledger-pairs "$PAIRS" $extra --json > "$OUT/decode$n.json" 2> "$OUT/decode$n.err"
	rc=$?
	took=$(($(date +%s) - t0))
	echo "bench decode round $n [$extra] rc=$rc in $took s"
	tail -3 "$OUT/decode$n.err"
	[ $rc -eq 0 ] || took=
	at "bench decode $n"
	if [ -s "$OUT/decode$n.json" ]; then
		"$dev/charts" "$OUT/decode$n.json"
		# The text form of the same result (the JSON is the record).
		python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); [print(d["name"], "s/token", d["seconds_per_token"]["median"], "storage B/token", d["storage_bytes_per_token"]["median"], "h2d GB/s", d.get("h2d_gbps"), "GPU busy", d.get("gpu_busy",{}).get("median"), "device/host experts per token", d.get("experts_on_device_per_token",{}).get("median"), d.get("experts_on_host_per_token",{}).get("median")) for d in r["decode"]]' "$OUT/decode$n.json" | tee "$OUT/decode$n.txt"
	fi
done
rm -rf "$B"
at "done"
