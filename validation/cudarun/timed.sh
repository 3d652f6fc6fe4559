#!/usr/bin/env bash
# timed.sh (on the GPU machine, from the repository root): one tarfa
# binary's bench serve on the 2-layer slice of 122B shapes with
# --device-time, at each of CLIENTS (default "1 16"), ROUNDS times (default
# 2): the kernels' device time by name, the copies, and the step's split, as
# JSON in $OUT/timed.jsonl. The binary is $AB/tarfa-new.gz (abserve.sh's).
#
#	device call: command "bash validation/cudarun/timed.sh", carry [".dev/ab"]
set -o pipefail
: "${OUT:?}"
AB=${AB:-.dev/ab}
gunzip -c $AB/tarfa-new.gz > /tmp/tarfa-new && chmod +x /tmp/tarfa-new || exit 1
M=/tmp/slice2/jnf
if [ ! -s $M/manifest.json ]; then
	/tmp/tarfa-new synth --arch qwen3_5_moe --preset real --layers 2 --jnf --workers "$(nproc)" --out $M --no-tokenizer 2>&1 | tail -1
fi
for r in $(seq ${ROUNDS:-2}); do
	for c in ${CLIENTS:-1 16}; do
		j=$(timeout 60 /tmp/tarfa-new bench serve --model $M --backend cuda --clients $c --max-tokens 32 --prompt-tokens 16 --heat=false --device-time --json $FLAGS 2> /tmp/t.err)
		echo "round $r clients=$c rc=$?: $(echo "$j" | grep -oE '"tokens_per_second":[0-9.]*|"identical_to_solo":[a-z]*' | tr '\n' ' ')"
		echo "{\"round\": $r, \"clients\": $c, \"result\": ${j:-null}}" >> $OUT/timed.jsonl
	done
done
