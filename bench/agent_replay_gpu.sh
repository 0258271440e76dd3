#!/usr/bin/env bash
# Issue 35 on a lent GPU in one call of at most 10 minutes: a sealed live agent run made beforehand (SmolLM2-135M on
# llama-server with sparknb's tool template, BFCL sessions) replayed to two random-weight models of different sizes
# (Qwen3-1.7B's and Qwen3-4B's shapes, F16, the test bed's vocabulary) on the pinned llama-server built there, with
# the same template, prompt cache on, 8 slots: each model at 1 and at 4 sessions in flight, each level on a fresh
# server (one that had served the level before held its prompts: the 4-in-flight first steps were warm), then the
# comparison of the two models at each. Random weights cannot call tools; a replay sends the live run's messages at
# every step and asks each answer at the live one's length, so it measures speed, never quality. While the small
# model is served, two benches: where each step's time before its first token goes (bench/agent_ttft_control.py: the
# step as chat, and as the server's own token ids), and the client's cost per step at 1 and 8 sessions in flight
# (bench/agent_client_cost.py).
#
# Prepare here, where the network is (from the repository root):
#   bash bench/step_split_prepare.sh                 # .device (llama.cpp source, tokenizer) and .whl (wheels)
#   bash bench/agent_replay_prepare.sh RUN_FOLDER    # the live run, its signer's public key, openssh-client
# then one call: `bash bench/agent_replay_gpu.sh` (COST_ONLY=1: the two benches alone), carrying .device and .whl.
# Back in $OUT: session.log and runs.tgz. A live run of many long answers (20 sessions of SmolLM2: 75 steps, 16,481
# tokens) does not fit one call of 10 minutes: PART=1 (the build, both GGUFs, the small model's two levels and the
# benches), then PART=2 (the large model's, and the comparisons): 513 and 504 s on an H100. On the machine still
# warm, PART=2 found PART=1's runs under outputs/ but built again (.device-build, ignored only by .git/info/exclude,
# was not kept); on a fresh one PART=1's runs come from runs.tgz unpacked here and carried (outputs/agent), their
# signer's key from $OUT/part1-signer.pub.
# A CPU rehearsal: SMALL=1 WHEELS=0 PY=.venv/bin/python LLAMA_BIN=<folder of llama-server> bash bench/agent_replay_gpu.sh
OUT=${OUT:-/tmp/agent-replay-out}
LOGS=/tmp/agent-replay-logs
source "$(dirname "$0")/gpu_common.sh"

LIVE=$(ls -d "$ROOT"/.device/agent/outputs/agent/*/ 2>/dev/null | head -1)
[ -n "$LIVE" ] || { echo "no live run under .device/agent: run bench/agent_replay_prepare.sh first"; exit 1; }
# trust refuses a key trusted already (a second call on a warm machine): verify decides
"$PY" -m sparknb trust "$(cat "$ROOT/.device/agent/signer.pub")" --as live-box
"$PY" -m sparknb verify "$LIVE" || exit 1

[ -f "$ROOT/.device/agent/part1-signer.pub" ] &&  # PART=1's runs, on a fresh machine: carried, signed there
    "$PY" -m sparknb trust "$(cat "$ROOT/.device/agent/part1-signer.pub")" --as gpu-part-1

stamp "two GGUFs, beside the build"
gguf() { [ -s "$DEV/models/$1-random-f16.gguf" ] ||
         "$PY" docs/examples/h200-llamacpp/make_model.py "$DEV/models/$1-random-f16.gguf" --shape "$1" \
         $([ "${SMALL:-0}" = 1 ] && echo --small); }
(gguf qwen3-1.7b && gguf qwen3-4b) > "$LOGS/models.log" 2>&1 &
writer=$!
build_llama || { tar -czf "$OUT/runs.tgz" -C /tmp agent-replay-logs; exit 1; }
wait "$writer"; rc=$?; cat "$LOGS/models.log"; [ $rc = 0 ] || exit 1

serve() {  # $1 shape, $2 name, $3 port: the params file, then the server alone on the GPU (the guard refuses a
           # run beside another's GPU process), ready within 120 s
    cat > "params/models/$2.yaml" <<EOF2
# Written by bench/agent_replay_gpu.sh: a random F16 GGUF (make_model.py --shape $1) on llama-server, 8 slots,
# --jinja with sparknb's tool template, the slots' prompt cache on, --cache-ram 0.
name: $2
served_model_name: $2
endpoint: http://127.0.0.1:$3/v1
hardware: $HARDWARE
architecture: dense
engine: llama.cpp
checkpoint: .device-build/models/$1-random-f16.gguf
EOF2
    "$DEV/bin/llama-server" --model "$DEV/models/$1-random-f16.gguf" --alias "$2" --host 127.0.0.1 --port "$3" \
        -ngl 99 --ctx-size 131072 --parallel 8 --metrics --cache-ram 0 --jinja \
        --chat-template-file sparknb/serving/templates/chatml-tools.jinja --log-prefix --log-timestamps \
        > "$LOGS/$2.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 120); do curl -sf "http://127.0.0.1:$3/health" >/dev/null && return 0; sleep 1; done
    echo "llama-server for $2 never became ready"; return 1
}

benches() {  # $1 model, $2 port: while the small model is served (CONTROL=0: the client's cost alone)
    [ "${CONTROL:-1}" = 1 ] && stamp "$1: the step's time before its first token, as chat and as token ids" &&
        timeout 120 "$PY" bench/agent_ttft_control.py --url "http://127.0.0.1:$2/v1" --model "$1" \
        --run "$LIVE" 2>&1 | tee "$LOGS/ttft-control.log"
    stamp "$1: the client's cost per step at 1 and 8 sessions in flight"
    timeout 120 "$PY" bench/agent_client_cost.py --url "http://127.0.0.1:$2/v1" --model "$1" \
        --run "$LIVE" --in-flight 1 8 2>&1 | tee "$LOGS/client-cost.log"
}

if [ "${COST_ONLY:-0}" = 1 ]; then  # the two benches alone, on the small model: a call of some 280 s
    serve qwen3-1.7b small-1.7b 8093 || exit 1
    benches small-1.7b 8093
    kill "$SERVER"; wait "$SERVER" 2>/dev/null; exit 0
fi
SPECS=("qwen3-1.7b small-1.7b 8093" "qwen3-4b large-4b 8094")
case "${PART:-all}" in 1) SPECS=("${SPECS[0]}") ;; 2) SPECS=("${SPECS[1]}") ;; esac
declare -A RUNS
[ "${PART:-all}" = 2 ] && for n in 1 4; do  # PART=1's runs, by their level
    for f in "$ROOT"/outputs/agent/*small-1.7b*/; do
        [ -f "$f/manifest.json" ] && grep -q "\"in_flight\": $n\b" "$f/params.json" && RUNS[$n]="${f%/}, "
    done
done
for spec in "${SPECS[@]}"; do
    read -r shape model port <<< "$spec"
    for n in 1 4; do  # each level on a server of its own: its slots hold no prompt of the level before
        stamp "$model: a replay at $n in flight on a fresh server ($(left) s left)"
        serve "$shape" "$model" "$port" || exit 1
        timeout $(( $(left) - 40 )) "$PY" -m sparknb run agent -p model "$model" -p replay_from "$LIVE" \
            -p in_flight "$n" > "$LOGS/agent-$model-$n.log" 2>&1
        grep -E "^- |sealed run|Error" "$LOGS/agent-$model-$n.log" | cut -c1-400
        RUNS[$n]="${RUNS[$n]:-}$(grep -oE 'sealed run: .*' "$LOGS/agent-$model-$n.log" | sed 's/sealed run: //'), "
        [ "$model" = small-1.7b ] && [ "$n" = 4 ] && benches "$model" "$port"
        kill "$SERVER"; wait "$SERVER" 2>/dev/null
    done
done
if [ "${PART:-all}" = 1 ]; then  # the key that signed this part's runs, for PART=2 on a fresh machine
    "$PY" -c 'from sparknb.runs import signing; print(signing._public(signing.key()))' > "$OUT/part1-signer.pub"
fi
for n in 1 4; do
    [ "${PART:-all}" = 1 ] && break
    stamp "the comparison at $n in flight"
    timeout 90 "$PY" -m sparknb run compare -p runs "[${RUNS[$n]%, }]" > "$LOGS/compare-$n.log" 2>&1
    folder=$(grep -oE 'sealed run: .*' "$LOGS/compare-$n.log" | sed 's/sealed run: //')
    [ -n "$folder" ] && "$PY" docs/examples/h200-verdict/show.py "$folder" || tail -20 "$LOGS/compare-$n.log"
done
stamp "pack"
tail -c 20000 "$LOGS/build.log" > "$LOGS/build-tail.log" 2>/dev/null; rm -f "$LOGS/build.log"
tar -czf "$OUT/runs.tgz" --exclude='*.ipynb' outputs $(ls params/models/{small-1.7b,large-4b}.yaml 2>/dev/null) \
    -C /tmp agent-replay-logs
stamp done
