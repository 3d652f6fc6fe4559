#!/usr/bin/env bash
# copyhash.sh (on the GPU machine): issue 22 item 2, experts in RAM at the
# copy-and-hash limit, in ONE call of LIMIT seconds (default 570):
#   1. the copy bound: cuda.test's BenchmarkH2D (one buffer of 1, 4, 18 and
#      64 MiB from cuMemHostAlloc'd, registered — the tier's buffers — and
#      pageable memory, each copy waited for) and BenchmarkLoadExpert (one
#      18 MiB expert verified in a pinned and in an unpinned arena buffer:
#      what the step's goroutine spends per expert that crosses);
#   2. the hash bound: tarfa bench hash --jobs 1,2,4,8,16 (experts at once,
#      each on one core, and one expert in 1 MiB parts on N cores);
#      the goal is 0.7 × min(registered 18 MiB H2D, parts at nproc);
#   3. the 4-layer slice of Qwen3.5-122B-A10B shapes (synth --preset real
#      --layers 4, convert; about 23 GB, kept in $B for a later call with
#      KEEP=1, else deleted at the end) and tarfa run --max-tokens TOKENS in
#      the placements
#        vram      every expert in device slots (no --vram-budget): a
#                  PROMPT_LEN-token prefill touches every expert, the decode
#                  steps are warm;
#        ram       the RAM tier holds every expert (--direct off --ram-budget
#                  RAM_ALL: with --direct auto a record in the page cache is
#                  served from there and not admitted; the same warm
#                  prefill), --vram-budget VRAM_SMALL: few slots, so nearly
#                  every use crosses to the device;
#        pagecache --direct off --ram-budget 0 (the page cache holds the
#                  files after convert), at VRAM_SMALL and at 16GiB (the
#                  issue's 0.068 s/token), --tokens 1,2,3,4, and at VRAM_SMALL
#                  with --device-verify=false (what hashing the copies on the
#                  device costs) and with 4 and 16 readers (the readers'
#                  page-cache copies share the cores with the hashers);
#        split     the ram placement with --placement auto (measured costs)
#                  and --placement host;
#      each printing s/token, the routed-expert bytes per decode token over
#      the s/token (GB/s), the bytes verified and copied per second of the
#      run, device hits and experts computed on the host; and whether every
#      run of one prompt made the same tokens (it must).
# Results in $OUT/copyhash.tgz (copyhash/, summary.txt).
#
#	# here: SDK=... validation/cudarun/prepare.sh (copies this into .dev/cuda)
#	# device: command "bash .dev/cuda/copyhash.sh", carry [".dev/cuda"]
# On a CPU machine (the test of its CPU parts):
#	BACKEND=cpu PRESET=tiny LAYERS=2 B=/tmp/ch-small TARFA=/path/to/tarfa OUT=/tmp/ch-out bash validation/cudarun/copyhash.sh
set -o pipefail
dev=$(cd "$(dirname "$0")" && pwd)
cd "$dev"
. ./unpack.sh
: "${OUT:?OUT=a directory for the results}"
LIMIT=${LIMIT:-570}
BACKEND=${BACKEND:-cuda}
PRESET=${PRESET:-real}
LAYERS=${LAYERS:-4}
B=${B:-/tmp/slice4}
T=${TARFA:-./tarfa}
TOKENS=${TOKENS:-48}
PROMPT_LEN=${PROMPT_LEN:-256}
VRAM_SMALL=${VRAM_SMALL:-6GiB}
RAM_ALL=${RAM_ALL:-40GiB}
JOBS=${JOBS:-1,2,4,8,16}
KEEP=${KEEP:-0}
start=$SECONDS
R=$OUT/copyhash
mkdir -p "$R"
cleanup() {
	[ "$KEEP" = 1 ] || rm -rf "$B"
	tar -czf "$OUT/copyhash.tgz" -C "$OUT" copyhash && rm -rf "$R"
}
trap cleanup EXIT
left() { echo $((LIMIT - (SECONDS - start))); }
say() { echo "$*" | tee -a "$R/summary.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
	nproc; grep -m1 "model name" /proc/cpuinfo; grep -o -w -m1 'avx512f' /proc/cpuinfo || echo "no avx512f"
	grep MemTotal /proc/meminfo; df -h "$(dirname "$B")" | tail -1; } > "$R/env.txt" 2>&1
cat "$R/env.txt"

# 1. The copy bound.
H2D=
if [ "$BACKEND" = cuda ]; then
	if [ -x ./cuda.test ]; then
		timeout $(($(left) - 30)) ./cuda.test -test.run '^$' -test.bench 'H2D|LoadExpert' -test.benchtime 40x -test.v > "$R/copy.txt" 2>&1
		say "copy benchmarks rc=$?:"
		grep -E '^Benchmark.*GB/s' "$R/copy.txt" | awk '{for (i = 1; i <= NF; i++) if ($i == "GB/s") g = $(i-1); print "  " $1, g " GB/s"}' | tee -a "$R/summary.txt"
		H2D=$(grep -E '^BenchmarkH2D/registered/18MiB' "$R/copy.txt" | awk '{for (i = 1; i <= NF; i++) if ($i == "GB/s") print $(i-1)}' | head -1)
	else
		say "copy benchmarks: no ./cuda.test (prepare.sh builds it)"
	fi
fi

# 2. The hash bound.
timeout $(($(left) - 30)) $T bench hash --jobs "$JOBS" --repeat 5 --json > "$R/hash.json" 2> "$R/hash.err"
say "bench hash rc=$?: $(python3 - "$R/hash.json" "$(nproc)" "${H2D:-0}" <<'EOF' 2>&1
import json, sys
r = json.load(open(sys.argv[1])); cores = int(sys.argv[2]); h2d = float(sys.argv[3])
by = {}
for f in r["figures"]:
    by.setdefault(f["mode"], []).append("%d:%.2f" % (f["jobs"], f["gbps_median"]))
out = "; ".join("%s %s GB/s" % (m, " ".join(v)) for m, v in by.items())
parts = [f for f in r["figures"] if f["mode"] == "parts"]
best = max(parts, key=lambda f: (f["jobs"] <= cores, f["jobs"]))
one = [f for f in r["figures"] if f["mode"] == "experts" and f["jobs"] == 1]
out += " | one core (zeebo) %.2f GB/s; one expert in parts on %d: %.2f GB/s" % (one[0]["gbps_median"] if one else 0, best["jobs"], best["gbps_median"])
tree1 = [f for f in r["figures"] if f["mode"] == "experts-tree" and f["jobs"] == 1]
if h2d > 0 and tree1:
    issue = min(h2d, tree1[0]["gbps_median"] * cores)
    bound = min(h2d, best["gbps_median"])
    out += (" | the issue's bound min(H2D %.1f, one core %.2f x %d hashers) = %.1f GB/s, goal 0.7x = %.1f GB/s;"
            " measured in parts: min(H2D %.1f, %.1f) = %.1f GB/s, 0.7x = %.1f GB/s") % (
        h2d, tree1[0]["gbps_median"], cores, issue, 0.7 * issue, h2d, best["gbps_median"], bound, 0.7 * bound)
print(out)
EOF
)"

# 3. The slice.
if [ ! -s "$B/jnf/manifest.json" ]; then
	rm -rf "$B"; mkdir -p "$B"
	s0=$SECONDS
	timeout $(($(left) - 60)) $T synth --arch qwen3_5_moe --preset $PRESET --layers $LAYERS --out "$B/hf" --no-tokenizer > "$R/synth.txt" 2>&1 &&
		timeout $(($(left) - 60)) $T convert "$B/hf" --out "$B/jnf" > "$R/convert.txt" 2>&1
	rc=$?
	rm -rf "$B/hf"
	say "slice rc=$rc in $((SECONDS - s0)) s: $(tail -1 "$R/synth.txt"); $(du -sh "$B/jnf" 2>/dev/null | cut -f1)"
	[ $rc -eq 0 ] || exit 1
else
	say "slice: $B/jnf exists"
fi
read -r EXPERT_BYTES MOE TOPK < <(python3 - "$B/jnf" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1] + "/manifest.json")); c = json.load(open(sys.argv[1] + "/config.json"))
ex = [e for e in m["entries"] if e["kind"] == "expert"]
print(ex[0]["length"], len({e["layer"] for e in ex}), c["num_experts_per_tok"])
EOF
)
say "routed experts: $MOE MoE layers x top-$TOPK x $EXPERT_BYTES bytes = $((MOE * TOPK * EXPERT_BYTES)) bytes per token"
WARM=$(python3 -c "print(','.join(str(1 + i % 500) for i in range($PROMPT_LEN)))")

run() { # name, prompt (warm|short), flags...
	local name=$1 prompt=$2; shift 2
	[ "$(left)" -lt 40 ] && { say "run $name: skipped, $(left) s left"; return; }
	local ids=1,2,3,4
	[ "$prompt" = warm ] && ids=$WARM
	local bf=(--backend "$BACKEND")
	timeout $(($(left) - 20)) $T run --model "$B/jnf" "${bf[@]}" --tokens "$ids" --max-tokens "$TOKENS" --heat=false --json "$@" > "$R/run-$name.json" 2> "$R/run-$name.err"
	local rc=$?
	say "run $name ($prompt prompt; $*) rc=$rc: $(python3 - "$R/run-$name.json" $((MOE * TOPK * EXPERT_BYTES)) <<'EOF' 2>&1
import json, sys
r = json.load(open(sys.argv[1])); per = int(sys.argv[2]); t = r["timing"]; L = r.get("expert_levels") or {}
d, m, s, pc = L.get("device") or {}, L.get("ram") or {}, L.get("storage") or {}, L.get("page_cache") or {}
p = r.get("placement") or {}
spt = 1 / t["decode_tokens_per_second"] if t["decode_tokens_per_second"] > 0 else float("nan")
busy = t["prefill_seconds"] + t["decode_seconds"]
print("decode %.4f s/token, routed experts %.2f GB/s; prefill %.2f s, load %.1f s; over the run: verified %.2f GB/s, copied to the device %.2f GB/s; device %s/%s hit (%s slots), RAM %s/%s, page cache %s, storage %s reads; experts on the host %s, on the device %s"
      % (spt, per / spt / 1e9, t["prefill_seconds"], t["load_seconds"], s.get("bytes_hashed", 0) / busy / 1e9, d.get("bytes_copied", 0) / busy / 1e9,
         d.get("hits"), d.get("uses"), d.get("capacity"), m.get("hits"), m.get("uses"), pc.get("hits"), s.get("uses"), p.get("host"), p.get("device")))
EOF
)"
	[ $rc -eq 0 ] || tail -3 "$R/run-$name.err" | tee -a "$R/summary.txt"
}

if [ "$BACKEND" = cuda ]; then
	run vram warm --placement device
	run ram warm --direct off --ram-budget "$RAM_ALL" --vram-budget "$VRAM_SMALL" --placement device
	run pagecache short --direct off --ram-budget 0 --vram-budget "$VRAM_SMALL" --placement device
	run pagecache-16g short --direct off --ram-budget 0 --vram-budget 16GiB --placement device
	run pagecache-noverify short --direct off --ram-budget 0 --vram-budget "$VRAM_SMALL" --placement device --device-verify=false
	run pagecache-readers4 short --direct off --ram-budget 0 --vram-budget "$VRAM_SMALL" --placement device --readers 4
	run pagecache-readers16 short --direct off --ram-budget 0 --vram-budget "$VRAM_SMALL" --placement device --readers 16
	run split-auto warm --direct off --ram-budget "$RAM_ALL" --vram-budget "$VRAM_SMALL" --placement auto
	run split-host warm --direct off --ram-budget "$RAM_ALL" --vram-budget "$VRAM_SMALL" --placement host
else
	run ram warm --direct off --ram-budget "$RAM_ALL"
	run pagecache short --direct off --ram-budget 0
	run pagecache-auto short --ram-budget 0
fi
# Exactness: every run of one prompt made the same tokens.
say "tokens: $(python3 - "$R" <<'EOF' 2>&1
import glob, json, os, sys
by = {}
for p in sorted(glob.glob(sys.argv[1] + "/run-*.json")):
    try:
        r = json.load(open(p))
    except Exception:
        continue
    by.setdefault(tuple(r["prompt_tokens"]), []).append((os.path.basename(p)[4:-5], tuple(r["tokens"])))
out = []
for runs in by.values():
    same = len({t for _, t in runs}) == 1
    out.append("%s: %s" % (" ".join(n for n, _ in runs), "identical" if same else "DIFFER: " + "; ".join("%s %s" % (n, list(t[:6])) for n, t in runs)))
print(" | ".join(out))
EOF
)"
say "done in $((SECONDS - start)) s"
