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
#     same logits as the cpu backend (≈ 30 s; both never ran on a GPU yet).
#     PIN=1 makes step 3 pin the slots too (--pin-slots).
#  2. synth --preset real --layers 4 (Qwen3.5-122B-A10B shapes, one
#     full-attention layer; HF ≈ 22 GB) and convert (JNF ≈ 23 GB; the disk
#     has 64 GiB, so the HF copy is kept for the peer; ≈ 3 min for both).
#  3. bench decode: raw / verified / hash figures, then decode (cold and warm,
#     RAM tier 27% of the routed experts, as 64 GB is of the full model) on
#     cuda under --vram-budget 16GiB and 12GiB and on cpu, every figure next
#     to the others in each round, page cache dropped; --repeat 2 when the
#     time allows (≈ 130 s a round), else 1. JSON and text into $OUT, and the
#     charts drawn next to the JSON by the charts binary built by prepare.sh.
#  4. The transformers + accelerate peer (peer.py: resident, cpu_offload,
#     disk_offload) on the same HF checkpoint while time remains (each mode
#     needs minutes: expect resident at most; peer.sh is the full peer run).
#     The JNF copy is deleted first (disk_offload writes its own copy).
# For a dry run on a machine without a GPU (the script's logic, tiny shapes):
#	SYNTH="--preset tiny --layers 4" BACKENDS=cpu VRAM= LIMIT=300 OUT=/tmp/o \
#	    bash .dev/cuda/bench.sh   # with the binaries of prepare.sh
# Output in $OUT: env.txt, counters.log, synth.json, convert.log,
# decode.json, decode.txt, decode.err, decode-*.png, peer.jsonl, peer-*.err.
set -o pipefail
export PYTHONUNBUFFERED=1 TARFA_TEST_DISALLOW_SKIP=1
dev=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$dev/../.." && pwd)
T=$dev/tarfa
: "${OUT:?OUT=a directory for the results}"
LIMIT=${LIMIT:-540}
SYNTH=${SYNTH:---preset real --layers 4}
BACKENDS=${BACKENDS:-cuda,cpu}
VRAM=${VRAM-16GiB,12GiB}
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
at "convert"

# 3. bench decode: cuda at 16 and 12 GiB and cpu, 27% of the experts in RAM.
rounds=1
[ "$(left)" -gt 330 ] && rounds=2
timeout $(($(left) - 15)) "$T" bench decode "$B/jnf" --backend "$BACKENDS" ${VRAM:+--vram-budget "$VRAM"} --ram-fraction 0.27 \
	--repeat $rounds --decode-tokens 8 --ledger=false ${PIN:+--pin-slots} --json > "$OUT/decode.json" 2> "$OUT/decode.err"
echo "bench decode ($rounds rounds) rc=$?"
tail -3 "$OUT/decode.err"
at "bench decode"
if [ -s "$OUT/decode.json" ]; then
	"$dev/charts" "$OUT/decode.json"
	# The text form of the same result (the JSON is the record).
	python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); [print(d["name"], "s/token", d["seconds_per_token"]["median"], "storage B/token", d["storage_bytes_per_token"]["median"], "h2d GB/s", d.get("h2d_gbps"), "GPU busy", d.get("gpu_busy",{}).get("median"), "device/host experts per token", d.get("experts_on_device_per_token",{}).get("median"), d.get("experts_on_host_per_token",{}).get("median")) for d in r["decode"]]' "$OUT/decode.json" | tee "$OUT/decode.txt"
fi

# 4. The peer, while time remains.
rm -rf "$B/jnf"
for mode in resident cpu_offload disk_offload; do
	[ "$(left)" -gt 90 ] || { echo "no time left for peer $mode"; break; }
	timeout $(($(left) - 10)) python3 "$root/validation/cudarun/peer.py" "$B/hf" $mode 4 "$B/offload" 2> "$OUT/peer-$mode.err" | tee -a "$OUT/peer.jsonl"
	echo "peer $mode rc=$?"
	tail -2 "$OUT/peer-$mode.err"
	rm -rf "$B/offload"
	at "peer $mode"
done
rm -rf "$B"
at "done"
