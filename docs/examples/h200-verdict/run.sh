#!/usr/bin/env bash
# The H200 run behind docs/examples/h200-verdict/, in one call on the lent machine, from the repository root
# the tool copied there:
#
#   tar -xOf .device/tree.tar docs/examples/h200-verdict/run.sh > /tmp/run.sh && DEADLINE_S=575 bash /tmp/run.sh
#
# 1. llama-server for sm_90 from the pinned llama.cpp source, and beside it two random F16 GGUFs, in Qwen3-4B's
#    and Qwen3-1.7B's shapes (docs/examples/h200-llamacpp/make_model.py), 7.29 and 2.84 GB;
# 2. the campaign h200-verdict.yaml: decode and prefill with the defaults (repetitions auto) on both, each
#    model's llama-server brought up by its params' lifecycle (one slot, --cache-ram 0);
# 3. the comparison of that campaign, and its verdict printed row by row (show.py).
#
# What it reads, made beforehand where the network is (README.md here): .device/tree.tar (`git archive HEAD`),
# .device/llama.cpp-src.tar.xz, .device/xdg/ (the test bed's tokenizer, so nothing is built from a recipe there)
# and .whl/ (what the machine's Python 3.12 lacks). It leaves $OUT/session.log and $OUT/runs.tgz (the campaign,
# the run folders, the comparison, the build's and the GGUF writers' logs).
# A CPU rehearsal: PY=.venv/bin/python WHEELS=0 LLAMA_BIN=path/to/llama-server SMALL=1 (2-layer GGUFs, and the
# campaign cut to two short lengths and six repetitions).
set -uo pipefail
OUT=${OUT:-/tmp/h200-verdict-out}
ROOT=$PWD
REPO=${REPO:-/tmp/repo}
DEADLINE_S=${DEADLINE_S:-580}
START=$(date +%s)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false XDG_CACHE_HOME=$ROOT/.device/xdg
stamp() { echo "== $(date -u +%T) (+$(( $(date +%s) - START )) s) $*"; }
left() { echo $(( DEADLINE_S - ($(date +%s) - START) )); }
LOGS=/tmp/verdict-logs
mkdir -p "$OUT" "$LOGS" && exec > >(tee "$OUT/session.log") 2>&1
PY=${PY:-python3}
RESUME=${RESUME:-0}  # 1: a second call on the same warm machine finishes the campaign a first one cut short
[ "$RESUME" = 1 ] || { rm -rf "$REPO" && mkdir -p "$REPO" && tar -xf "$ROOT/.device/tree.tar" -C "$REPO"; } || exit 1
if [ "${WHEELS:-1}" = 1 ] && [ "$RESUME" = 0 ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$ROOT"/.whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$REPO JUPYTER_PATH=/tmp/site/share/jupyter
cd "$REPO" || exit 1
DEV=$REPO/.device-build
mkdir -p "$DEV/models"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$LOGS/gpu.txt"

if [ "$RESUME" = 0 ]; then
stamp "the two GGUFs (beside the build)"
gguf() {  # $1: shape; $2: the params that must count as many parameters
    if [ "${SMALL:-0}" = 1 ]; then set -- "$1" "" --small; else set -- "$1" "$2" --check "$2"; fi
    "$PY" docs/examples/h200-llamacpp/make_model.py "$DEV/models/$1-random-f16.gguf" --shape "$1" "${@:3}"
}
(gguf qwen3-4b qwen3-4b-random-llamacpp && gguf qwen3-1.7b qwen3-1.7b-random-llamacpp) > "$LOGS/models.log" 2>&1 &
writer=$!

stamp "llama.cpp: configure and build llama-server for sm_90"
if [ -n "${LLAMA_BIN:-}" ]; then mkdir -p "$DEV/bin" && ln -s "$LLAMA_BIN" "$DEV/bin/llama-server"; else
tar -xJf "$ROOT/.device/llama.cpp-src.tar.xz" -C "$DEV" && mv "$DEV/llama.cpp" "$DEV/src" || exit 1
sed -i 's/^set(BUILD_NUMBER 0)$/set(BUILD_NUMBER 1)/; s/^set(BUILD_COMMIT "unknown")$/set(BUILD_COMMIT "0c1e570")/; s/^if(Git_FOUND)$/if(FALSE)/' \
    "$DEV/src/cmake/build-info.cmake"
t0=$(date +%s)
cmake -S "$DEV/src" -B "$DEV/build" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    > "$LOGS/build.log" 2>&1 && timeout 400 cmake --build "$DEV/build" -j 16 --target llama-server >> "$LOGS/build.log" 2>&1
rc=$?
echo "build exit $rc in $(( $(date +%s) - t0 )) s" | tee -a "$LOGS/build.log"
[ $rc = 0 ] || { tail -30 "$LOGS/build.log"; exit 1; }
ln -sfn build/bin "$DEV/bin"
fi
wait "$writer"; rc=$?; echo "models exit $rc"; cat "$LOGS/models.log"
[ $rc = 0 ] || exit 1
fi
"$DEV/bin/llama-server" --version 2>&1 | tail -2

CAMPAIGN=docs/examples/h200-verdict/h200-verdict.yaml
if [ "${SMALL:-0}" = 1 ]; then  # the rehearsal: two short lengths, six repetitions, the same steps
    "$PY" - "$CAMPAIGN" /tmp/h200-verdict-small.yaml <<'EOF'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
for study in ("decode", "prefill"):
    c["studies"][study] = {"prompt_lengths": [64, 700], "repetitions": 6}
c["studies"]["decode"]["output_tokens"] = 16
yaml.safe_dump(c, open(sys.argv[2], "w"))
EOF
    CAMPAIGN=/tmp/h200-verdict-small.yaml
fi
stamp "the campaign ($(left) s left)"
AGAIN=$([ "$RESUME" = 1 ] && echo "--resume $(ls -t outputs/campaigns | head -1)")
timeout --signal=INT --kill-after=20 $(( $(left) - 75 )) "$PY" -m sparknb campaign run "$CAMPAIGN" $AGAIN 2>&1 |
    tee -a "$LOGS/campaign.log" |
    grep --line-buffered -E "^\[[0-9]+/[0-9]+\] [a-z_]+/|^campaign |Error|FAIL|Traceback" |
    cut -c1-300
ID=$(ls -t outputs/campaigns 2>/dev/null | head -1)
stamp "the comparison of campaign $ID"
if [ -n "$ID" ] && "$PY" -m sparknb run compare -p campaign "$ID" > "$LOGS/compare.log" 2>&1; then
    grep -E "sealed|comparison folder|report" "$LOGS/compare.log" | cut -c1-300
    "$PY" docs/examples/h200-verdict/show.py "$(ls -td outputs/compare/*/ | head -1)"
else
    tail -30 "$LOGS/compare.log"
fi
stamp "pack"
tail -c 20000 "$LOGS/build.log" > "$LOGS/build-tail.log" 2>/dev/null; rm -f "$LOGS/build.log"
tar -czf "$OUT/runs.tgz" outputs -C /tmp verdict-logs
ls -la "$OUT"
stamp done
