#!/usr/bin/env bash
# Issue 37 on a lent H100 (or H200) in one call of at most 10 minutes, from the repository root the call copies
# there, carrying .device and .whl (made beforehand by bench/step_split_prepare.sh, where the network is):
#
#   bash bench/step_split_gpu.sh
#
# 1. llama-server and llama-bench for sm_90 from the pinned llama.cpp source (the targets and flags of
#    sparknb.serving.llama_server, with CUDA), and meanwhile two random F16 GGUFs written by
#    docs/examples/h200-llamacpp/make_model.py with Qwen's 151,936-row vocabulary: an MoE in Qwen3-30B-A3B's shape
#    cut to 24 layers (128 experts, 8 a token; 15.6 B parameters, 31.2 GB) and Qwen3-4B's dense shape (8.0 GB);
# 2. each model's params written here: engine llama.cpp, its GGUF as `checkpoint` (the census counts it at the start
#    of every run), the hardware chosen from NVML's name (sparknb.model_add.hardware_for), one slot, --cache-ram 0;
# 3. a campaign (the MoE first, so it is the comparison's base): decode at 111 and 4,096 prompt tokens
#    (128-token answers, with engine_alone: llama-bench on the same GGUF after each sweep) and prefill at 111, 512 and
#    2,048, six requests a length; then the comparison of that campaign, its rows printed;
# 4. bench/step_split_show.py: each model's step split (bytes' time, rest, the engine alone, the server's own), the
#    predicted ratios, prefill's floors, the comparison's own words.
# What comes back in $OUT: session.log (all of it, the tables at its end) and runs.tgz (the sealed run folders, the
# campaign, the comparison, the logs).
#
# A CPU rehearsal (the same steps with 2-layer GGUFs of the test bed's vocabulary, 16-token answers, and a CPU
# llama-server and llama-bench; HARDWARE=h200 draws a limit there, a wrong one, to show every table): SMALL=1 WHEELS=0
# PY=.venv/bin/python LLAMA_BIN=<folder of llama-server and llama-bench> bash bench/step_split_gpu.sh
OUT=${OUT:-/tmp/step-split-out}
SMALL=${SMALL:-0}
LOGS=/tmp/step-split-logs
source "$(dirname "$0")/gpu_common.sh"

stamp "the two GGUFs, beside the build"
MOE=qwen3-30b-a3b-24l DENSE=qwen3-4b
gguf() { "$PY" docs/examples/h200-llamacpp/make_model.py "$DEV/models/$1-random-f16.gguf" --shape "$1" \
         $([ "$SMALL" = 1 ] && echo --small || echo --vocab 151936); }
(gguf $MOE && gguf $DENSE) > "$LOGS/models.log" 2>&1 &
writer=$!

build_llama || { tar -czf "$OUT/runs.tgz" -C /tmp step-split-logs; exit 1; }
wait "$writer"; rc=$?; cat "$LOGS/models.log"; echo "models exit $rc"
[ $rc = 0 ] || exit 1
"$DEV/bin/llama-server" --version 2>&1 | tail -2

stamp "the params: checkpoint for the census, hardware $HARDWARE"
params() {  # $1 name, $2 shape, $3 architecture, $4 port
    cat > "params/models/$1.yaml" <<EOF
# Written by bench/step_split_gpu.sh: a random F16 GGUF (docs/examples/h200-llamacpp/make_model.py --shape $2
# --vocab 151936) on llama-server, one slot, --cache-ram 0; the census is counted from the checkpoint.
name: $1
served_model_name: $1
endpoint: http://127.0.0.1:$4/v1
hardware: $HARDWARE
architecture: $3
engine: llama.cpp
checkpoint: .device-build/models/$2-random-f16.gguf
lifecycle:
  start: ".device-build/bin/llama-server --model .device-build/models/$2-random-f16.gguf --alias $1 --host {host} --port {port} -ngl 99 --ctx-size 16384 --parallel 1 --metrics --cache-ram 0 --log-prefix --log-timestamps --log-colors off"
  ready_url: "http://{host}:{port}/health"
  ready_timeout_s: 300
EOF
}
params moe-30b-a3b-24l $MOE moe 8091 && params dense-4b $DENSE dense 8092

stamp "the campaign ($(left) s left)"
LENGTHS_D=$([ "$SMALL" = 1 ] && echo "[64, 256]" || echo "[111, 4096]")
ANSWER=$([ "$SMALL" = 1 ] && echo 16 || echo 128)
LENGTHS_P=$([ "$SMALL" = 1 ] && echo "[64, 700]" || echo "[111, 512, 2048]")
cat > "$LOGS/step-split.yaml" <<EOF
name: step-split
question: On one GPU, why is an MoE in Qwen3-30B-A3B's shape not as fast as its bytes say, against Qwen3-4B's?
models: [moe-30b-a3b-24l, dense-4b]
repetitions: 1
studies:
  decode:
    prompt_lengths: $LENGTHS_D
    output_tokens: $ANSWER
    repetitions: 6
    engine_alone: true
  prefill:
    prompt_lengths: $LENGTHS_P
    repetitions: 6
EOF
timeout --signal=INT --kill-after=20 $(( $(left) - 60 )) "$PY" -m sparknb campaign run "$LOGS/step-split.yaml" 2>&1 |
    tee -a "$LOGS/campaign.log" | grep --line-buffered -E "^\[[0-9]+/[0-9]+\] |^campaign |Error|FAIL|Traceback" |
    cut -c1-300
ID=$(ls -t outputs/campaigns 2>/dev/null | head -1)
stamp "the comparison of campaign $ID"
if [ -n "$ID" ] && timeout 60 "$PY" -m sparknb run compare -p campaign "$ID" > "$LOGS/compare.log" 2>&1; then
    grep -E "sealed|comparison folder" "$LOGS/compare.log" | cut -c1-300
    "$PY" docs/examples/h200-verdict/show.py "$(ls -td outputs/compare/*/ | head -1)"
else
    tail -30 "$LOGS/compare.log"
fi
stamp "the tables"
"$PY" bench/step_split_show.py outputs 2>&1 | tee "$LOGS/tables.txt"
stamp "pack"
tail -c 20000 "$LOGS/build.log" > "$LOGS/build-tail.log" 2>/dev/null; rm -f "$LOGS/build.log"
cp "$OUT/session.log" "$LOGS/" 2>/dev/null
tar -czf "$OUT/runs.tgz" --exclude='*.ipynb' outputs params/models/moe-30b-a3b-24l.yaml params/models/dense-4b.yaml \
    -C /tmp step-split-logs
ls -la "$OUT"
stamp done
