#!/usr/bin/env bash
# The H200 session behind docs/examples/h200-census/, in one call on the lent machine, from the repository root
# the tool copied there:
#
#   tar -xOf .device/tree.tar docs/examples/h200-census/run.sh > /tmp/run.sh && DEADLINE_S=575 bash /tmp/run.sh
#
# 1. llama-server for sm_90 from the pinned llama.cpp source, and beside it the random F16 GGUF in Qwen3-4B's
#    shape (docs/examples/h200-llamacpp/make_model.py);
# 2. llama-server on it (one slot, --cache-ram 0), then `sparknb model add` against it: the params written from
#    what the server says and the census of the GGUF it names;
# 3. decode at 111, 512, 4,096 and 10,714 tokens with that file as written (the limit from the census, KV counted);
# 4. where time is left, decode on llama-server's default host prompt cache, where decode names its stall.
#
# What it reads, made beforehand where the network is (README.md here): .device/tree.tar (`git archive HEAD`),
# .device/llama.cpp-src.tar.xz, .device/xdg/ (the test bed's tokenizer, so nothing is built from a recipe there)
# and .whl/ (what the machine's Python 3.12 lacks). It leaves $OUT/session.log and $OUT/runs.tgz (the run folders,
# the params written, the servers' and the build's logs).
set -uo pipefail
OUT=${OUT:-/tmp/h200-census-out}
ROOT=$PWD
REPO=/tmp/repo
DEADLINE_S=${DEADLINE_S:-580}
START=$(date +%s)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false XDG_CACHE_HOME=$ROOT/.device/xdg
stamp() { echo "== $(date -u +%T) (+$(( $(date +%s) - START )) s) $*"; }
left() { echo $(( DEADLINE_S - ($(date +%s) - START) )); }
LOGS=/tmp/logs
mkdir -p "$OUT" "$LOGS" && exec > >(tee "$OUT/session.log") 2>&1
rm -rf "$REPO" && mkdir -p "$REPO" && tar -xf "$ROOT/.device/tree.tar" -C "$REPO" || exit 1
PY=${PY:-python3}  # rehearsal on a CPU: PY=.venv/bin/python WHEELS=0 LLAMA_BIN=path/to/llama-server SMALL=1
if [ "${WHEELS:-1}" = 1 ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$ROOT"/.whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$REPO JUPYTER_PATH=/tmp/site/share/jupyter
cd "$REPO" || exit 1
DEV=$REPO/.device-build
mkdir -p "$DEV/models"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$LOGS/gpu.txt"

stamp "the GGUF (beside the build)"
"$PY" docs/examples/h200-llamacpp/make_model.py "$DEV/models/qwen3-4b-random-f16.gguf" \
    $([ "${SMALL:-0}" = 1 ] && echo --small || echo --check qwen3-4b-random-llamacpp) > "$LOGS/model.log" 2>&1 &
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
wait "$writer"; echo "model exit $?"; cat "$LOGS/model.log"

serve() {  # $1: log name; the rest: extra flags. llama-server as the params' lifecycle starts it, on :8090
    "$DEV/bin/llama-server" --model "$DEV/models/qwen3-4b-random-f16.gguf" --alias qwen3-4b-random --host 127.0.0.1 \
        --port 8090 -ngl 99 --ctx-size 16384 --parallel 1 --metrics --log-prefix --log-timestamps --log-colors off \
        "${@:2}" > "$LOGS/$1" 2>&1 &
    SERVER=$!
    for _ in $(seq 240); do
        curl -sf http://127.0.0.1:8090/health > /dev/null && return 0
        kill -0 $SERVER 2>/dev/null || { tail -20 "$LOGS/$1"; return 1; }
        sleep 0.5
    done
    echo "llama-server not ready in 120 s"; return 1
}
decode() {  # $1: the model's params; $2: seconds it may take
    timeout "$2" "$PY" -m sparknb run decode -p model "$1" -p prompt_lengths "${LENGTHS:-[111, 512, 4096, 10714]}" \
        -p output_tokens 128 -p repetitions 6 -p warmup 1
}

stamp "llama-server, --cache-ram 0"
serve server.log --cache-ram 0 || exit 1
stamp "sparknb model add"
"$PY" -m sparknb model add qwen3-4b-census --endpoint http://127.0.0.1:8090/v1 --hardware h200 2>&1 |
    tee "$LOGS/model-add.log"
[ -f params/models/qwen3-4b-census.yaml ] || { echo "model add wrote nothing"; exit 1; }
stamp "decode with the written params"
decode qwen3-4b-census 170 > "$LOGS/decode-census.log" 2>&1
grep -E "census|probe|sealed|FAIL|Error|That is|IMPOSSIBLE|BANDWIDTH" "$LOGS/decode-census.log" | cut -c1-900
kill $SERVER; wait $SERVER 2>/dev/null
if [ "$(left)" -gt 110 ]; then
    stamp "llama-server on its default host prompt cache"
    serve server-cache.log && {
        sed 's/^name: qwen3-4b-census/name: qwen3-4b-census-cache/' params/models/qwen3-4b-census.yaml \
            > params/models/qwen3-4b-census-cache.yaml
        decode qwen3-4b-census-cache $(( $(left) - 20 )) > "$LOGS/decode-cache.log" 2>&1
        grep -E "sealed|FAIL|Error|STALL|That is" "$LOGS/decode-cache.log" | cut -c1-900
        kill $SERVER; wait $SERVER 2>/dev/null
    }
fi
stamp "pack"
tail -c 20000 "$LOGS/build.log" > "$LOGS/build-tail.log" && rm "$LOGS/build.log"
tar -czf "$OUT/runs.tgz" outputs/decode params/models/qwen3-4b-census*.yaml -C /tmp logs
ls -la "$OUT"
stamp done
