#!/usr/bin/env bash
# abserve.sh (on the GPU machine, from the repository root): two tarfa
# binaries' bench serve on the 2-layer slice of 122B shapes, interleaved
# (A B A B …, ROUNDS rounds, 1 and 16 clients each), for a change with no
# knob of its own. One line of JSON a run in $OUT/ab.jsonl. FLAGS are added
# to every bench serve, CLIENTS are the levels (default "1 16"): for the
# page-cache path of issue 22 item 2, CLIENTS=1 FLAGS="--direct off
# --ram-budget 0 --vram-budget 6GiB" (every use read from the page cache and
# hashed, few device slots). BINARIES (default "old new") names the binaries
# run: BINARIES=new FLAGS=--device-time ROUNDS=2 times one binary's
# kernels by name at each level.
#
#	# here: go build -tags cuda -o .dev/ab/tarfa-old ./cmd/tarfa (at the base), the same for tarfa-new; gzip both
#	# device call: command "bash validation/cudarun/abserve.sh", carry [".dev/ab"]
set -o pipefail
: "${OUT:?}"
AB=${AB:-.dev/ab}
ROUNDS=${ROUNDS:-3}
LIMIT=${LIMIT:-400}
s0=$SECONDS
BINARIES=${BINARIES:-old new}
for b in $BINARIES; do gunzip -c $AB/tarfa-$b.gz > /tmp/tarfa-$b && chmod +x /tmp/tarfa-$b || exit 1; done
M=/tmp/slice2/jnf
if [ ! -s $M/manifest.json ]; then
	/tmp/tarfa-${BINARIES##* } synth --arch qwen3_5_moe --preset real --layers 2 --jnf --workers "$(nproc)" --out $M --no-tokenizer 2>&1 | tail -1
fi
echo "synth done at $((SECONDS - s0)) s"
# PREFILL=n: after the rounds, each binary's prefill of one n-token prompt
# (1 client, 1 token generated: the time to first token is the prefill),
# twice, interleaved (prefill.jsonl).
for r in $(seq $ROUNDS); do
	for b in $BINARIES; do
		for c in ${CLIENTS:-1 16}; do
			[ $((LIMIT - (SECONDS - s0))) -lt 25 ] && { echo "round $r $b $c: out of time"; continue; }
			j=$(timeout 60 /tmp/tarfa-$b bench serve --model $M --backend cuda --clients $c --max-tokens 32 --prompt-tokens 16 --heat=false --json $FLAGS 2> /tmp/ab.err)
			echo "round $r $b clients=$c rc=$?: $(echo "$j" | grep -oE '"tokens_per_second":[0-9.]*|"identical_to_solo":[a-z]*|"emit_s_per_step":[0-9.e-]*|"bytes_verified_per_token":[0-9.e+]*' | tr '\n' ' ')"
			echo "{\"round\": $r, \"binary\": \"$b\", \"clients\": $c, \"result\": ${j:-null}}" >> $OUT/ab.jsonl
		done
	done
done
if [ -n "${PREFILL:-}" ]; then
	for r in 1 2; do
		for b in $BINARIES; do
			[ $((LIMIT - (SECONDS - s0))) -lt 25 ] && { echo "prefill $r $b: out of time"; continue; }
			j=$(timeout 60 /tmp/tarfa-$b bench serve --model $M --backend cuda --clients 1 --max-tokens 1 --prompt-tokens $PREFILL --heat=false --json $FLAGS 2> /tmp/ab.err)
			echo "prefill $r $b n=$PREFILL rc=$?: $(echo "$j" | grep -oE '"ttft_p50_s":[0-9.e-]*|"identical_to_solo":[a-z]*' | tr '\n' ' ')"
			echo "{\"round\": $r, \"binary\": \"$b\", \"prompt_tokens\": $PREFILL, \"result\": ${j:-null}}" >> $OUT/prefill.jsonl
		done
	done
fi
