# What every one-call GPU script in bench/ shares, sourced after it sets LOGS (a fresh folder of logs) and OUT:
# the clock and its deadline, the wheels the GPU machine's Python lacks (.whl, made by bench/step_split_prepare.sh),
# ssh-keygen from a carried openssh-client package where the machine has none (runs are then signed, and a run
# signed here can be trusted there), the hardware params chosen from NVML's name, and the pinned llama-server (and
# llama-bench) built for sm_90, or LLAMA_BIN's for a CPU rehearsal.
set -uo pipefail
ROOT=$PWD
DEADLINE_S=${DEADLINE_S:-585}
PY=${PY:-python3}
START=$(date +%s)
DEV=$ROOT/.device-build
rm -rf "$LOGS" && mkdir -p "$OUT" "$LOGS" "$DEV/models" && exec > >(tee "$OUT/session.log") 2>&1
stamp() { echo "== $(date -u +%T) (+$(( $(date +%s) - START )) s) $*"; }
left() { echo $(( DEADLINE_S - ($(date +%s) - START) )); }
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false XDG_CACHE_HOME=$ROOT/.device/xdg
if [ "${WHEELS:-1}" = 1 ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$ROOT"/.whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$ROOT JUPYTER_PATH=/tmp/site/share/jupyter
else
    export PYTHONPATH=$ROOT
fi
"$PY" -c 'import sparknb, papermill, openai, gguf, yaml, pydantic' || exit 1
if ! command -v ssh-keygen >/dev/null && ls "$ROOT"/.device/openssh-client_*.deb >/dev/null 2>&1; then
    dpkg -x "$ROOT"/.device/openssh-client_*.deb /tmp/ssh && export PATH=$PATH:/tmp/ssh/usr/bin
fi
command -v ssh-keygen >/dev/null || echo "(no ssh-keygen here: every run below is sealed UNSIGNED)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1 |
    tee "$LOGS/gpu.txt"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
pick="from sparknb.model_add import hardware_for; print(hardware_for('$GPU'))"
HARDWARE=${HARDWARE:-$([ -n "$GPU" ] && "$PY" -c "$pick" || echo cpu-host)}
echo "GPU: ${GPU:-none}; hardware params: $HARDWARE"

build_llama() {  # the pinned llama-server and llama-bench for sm_90 into $DEV/bin (or LLAMA_BIN's)
    if [ -n "${LLAMA_BIN:-}" ]; then
        ln -sfn "$LLAMA_BIN" "$DEV/bin"
        return 0
    fi
    stamp "llama.cpp: llama-server and llama-bench for sm_90"
    rm -rf "$DEV/src" && tar -xJf "$ROOT/.device/llama.cpp-src.tar.xz" -C "$DEV" && mv "$DEV/llama.cpp" "$DEV/src" ||
        return 1
    sed -i 's/^set(BUILD_NUMBER 0)$/set(BUILD_NUMBER 1)/; s/^set(BUILD_COMMIT "unknown")$/set(BUILD_COMMIT "0c1e570")/; s/^if(Git_FOUND)$/if(FALSE)/' \
        "$DEV/src/cmake/build-info.cmake"
    local flags targets t0 rc
    read -r -a flags <<< "$("$PY" -c 'from sparknb.serving import llama_server as l; print(*l.CMAKE_FLAGS)')"
    read -r -a targets <<< "$("$PY" -c 'from sparknb.serving import llama_server as l; print(*l.TARGETS)')"
    t0=$(date +%s)
    cmake -S "$DEV/src" -B "$DEV/build" -G Ninja "${flags[@]}" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        > "$LOGS/build.log" 2>&1 &&
        timeout 420 cmake --build "$DEV/build" -j "$(nproc)" --target "${targets[@]}" >> "$LOGS/build.log" 2>&1
    rc=$?
    echo "build exit $rc in $(( $(date +%s) - t0 )) s ($(nproc) cores)" | tee -a "$LOGS/build.log"
    [ $rc = 0 ] || { tail -30 "$LOGS/build.log"; return 1; }
    ln -sfn build/bin "$DEV/bin"
}
