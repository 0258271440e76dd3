#!/usr/bin/env bash
# The GPU session behind docs/examples/h200-llamacpp/, in two calls on the lent H200 machine, each from the
# repository root there (the tool's copy of the working tree):
#
#   docs/examples/h200-llamacpp/run.sh build     # llama-server + llama-bench for sm_90, the two GGUFs, llama-bench,
#                                                # then the GPU tests (pytest -m gpu) in the time left
#   docs/examples/h200-llamacpp/run.sh session   # decode, prefill x2, load, swap (session.py); GPU_TESTS=1: the tests too
#
# What it reads, made beforehand on a machine with the network (see the README here):
#   .device/tree.tar            `git archive HEAD` of the commit measured: the session runs from it, unpacked into
#                               $REPO, so nothing edited meanwhile in the working tree is measured
#   .device/llama.cpp-src.tar.xz  vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist, less docs, models, tests,
#                               examples and the web UI's tests
#   .whl/*.whl                  what the machine's Python 3.12 lacks (pydantic, papermill, nbconvert, ipykernel,
#                               gguf, openai, fastapi, uvicorn, transformers 5.19 and their needs)
# What it keeps between the two calls (while the machine stays warm): .device-build/ (ignored), the build and
# the GGUFs. The session finds it there, or builds again first. Everything it makes goes to $OUT.
# Rehearsal on a CPU: PY=.venv/bin/python WHEELS=0 SMALL=1 with .device-build/bin/ holding a CPU llama-server.
set -uo pipefail
PHASE=${1:?say build or session}
OUT=${OUT:-/tmp/h200-llamacpp-out}
ROOT=$PWD                       # the repository root the tool copied the working tree to
REPO=${REPO:-/tmp/repo}         # the snapshot, unpacked fresh each call; .device-build is linked into it
DEV=$ROOT/.device-build
PY=${PY:-python3}
SMALL=${SMALL:-0}
START=$(date +%s)
mkdir -p "$OUT" "$DEV"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 SPARKNB_GPU_HARDWARE=h200 TOKENIZERS_PARALLELISM=false
stamp() { echo "== $(date -u +%T) (+$(( $(date +%s) - START )) s) $*"; }

setup() {
    stamp "snapshot into $REPO"
    rm -rf "$REPO" && mkdir -p "$REPO" && tar -xf "$ROOT/.device/tree.tar" -C "$REPO" || exit 1
    ln -s "$DEV" "$REPO/.device-build"
    if [ "${WHEELS:-1}" = 1 ]; then
        stamp wheels
        if [ ! -f /tmp/site/.installed ]; then
            "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
                "$ROOT"/.whl/*.whl || exit 1
            touch /tmp/site/.installed
        fi
        export PYTHONPATH=/tmp/site:$REPO JUPYTER_PATH=/tmp/site/share/jupyter  # nbconvert's templates came with them
    else
        export PYTHONPATH=$REPO
    fi
    cd "$REPO" || exit 1
    "$PY" -c "import sparknb, sys; print('sparknb from', sparknb.__file__.replace('$REPO', '\$REPO'), 'python', sys.version.split()[0])"
}

build() {  # llama-server and llama-bench for sm_90; times in build.json
    stamp "llama.cpp source"
    rm -rf "$DEV/src" "$DEV/build" "$DEV/bin"
    tar -xJf "$ROOT/.device/llama.cpp-src.tar.xz" -C "$DEV" && mv "$DEV/llama.cpp" "$DEV/src" || exit 1
    # the build's identity, as the pinned CPU build has it from the sdist's git metadata: b1-0c1e570
    sed -i 's/^set(BUILD_NUMBER 0)$/set(BUILD_NUMBER 1)/; s/^set(BUILD_COMMIT "unknown")$/set(BUILD_COMMIT "0c1e570")/; s/^if(Git_FOUND)$/if(FALSE)/' \
        "$DEV/src/cmake/build-info.cmake"
    grep -q 'BUILD_COMMIT "0c1e570"' "$DEV/src/cmake/build-info.cmake" || { echo "build-info.cmake not patched"; exit 1; }
    stamp configure
    local t0 t1 t2 rc
    t0=$(date +%s.%N)
    cmake -S "$DEV/src" -B "$DEV/build" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
    t1=$(date +%s.%N)
    stamp "build llama-server llama-bench -j 16"
    timeout "${BUILD_TIMEOUT:-480}" cmake --build "$DEV/build" -j 16 --target llama-server llama-bench >> "$OUT/build.log" 2>&1
    rc=$?
    t2=$(date +%s.%N)
    [ $rc = 0 ] || { tail -30 "$OUT/build.log"; echo "build failed (exit $rc)"; exit 1; }
    ln -sfn build/bin "$DEV/bin"
    "$PY" - "$t0" "$t1" "$t2" "$OUT/build.log" > "$OUT/build.json" <<'EOF'
import json, subprocess, sys
t0, t1, t2 = map(float, sys.argv[1:4])
log = open(sys.argv[4], errors="replace").read()
def first(*argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[-1]
    except Exception as e:
        return f"({e})"
print(json.dumps({"configure_s": round(t1 - t0, 1), "build_s": round(t2 - t1, 1), "jobs": 16,
                  "targets": ["llama-server", "llama-bench"], "cuda_objects": log.count("Building CUDA object"),
                  "cxx_objects": log.count("Building CXX object"), "c_objects": log.count("Building C object"),
                  "flags": ["-G", "Ninja", "-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90", "-DCMAKE_BUILD_TYPE=Release",
                            "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                            "-DLLAMA_BUILD_EXAMPLES=OFF"],
                  "cmake": subprocess.run(["cmake", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
                  "nvcc": first("nvcc", "--version"), "c++": subprocess.run(["c++", "--version"], capture_output=True,
                                                                           text=True).stdout.splitlines()[0],
                  "nproc": __import__("os").cpu_count()}, indent=1))
EOF
    cat "$OUT/build.json"
}

models() {  # the two GGUFs, each checked against its params file's parameter count
    local small=()
    [ "$SMALL" = 1 ] && small=(--small)
    mkdir -p "$DEV/models"
    "$PY" docs/examples/h200-llamacpp/make_model.py "$DEV/models/qwen3-4b-random-f16.gguf" "${small[@]}" \
        --check qwen3-4b-random-llamacpp &&
    "$PY" docs/examples/h200-llamacpp/make_model.py "$DEV/models/qwen3-1.7b-random-f16.gguf" --shape qwen3-1.7b \
        "${small[@]}" --check qwen3-1.7b-random-llamacpp
}

versions() {
    "$DEV/bin/llama-server" --version 2>&1 | grep -v "^ggml_cuda_init\|^  Device" | sed 's/^/llama-server --version: /'
}

bench() {  # pp512, pp2048, tg128 at depth 0 and 4096; three samples each after llama-bench's own warm-up
    stamp llama-bench
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
        --format=csv -lms 500 > "$OUT/bench-clocks.csv" 2>&1 &
    local smi=$!
    local reps=3 depth=0,4096
    [ "$SMALL" = 1 ] && reps=2 && depth=0,256
    timeout 240 "$DEV/bin/llama-bench" -m "$DEV/models/qwen3-4b-random-f16.gguf" -ngl 99 -p 512,2048 -n 128 \
        -d "$depth" -r "$reps" -o json -oe md > "$OUT/llama-bench.json" 2> "$OUT/llama-bench.log"
    local rc=$?
    kill "$smi" 2>/dev/null
    echo "llama-bench exit $rc"
    "$PY" docs/examples/h200-llamacpp/bench.py "$OUT/llama-bench.json" --params qwen3-4b-random-llamacpp
}

gpu_tests() {  # pytest -m gpu, in the time left before the call's deadline
    local left=$(( ${DEADLINE_S:-570} - ($(date +%s) - START) ))
    stamp "gpu tests ($left s left)"
    if [ "$left" -lt 90 ]; then
        echo "gpu tests not run: $left s left" | tee "$OUT/gpu-tests.log"
        return
    fi
    timeout "$(( left - 10 ))" "$PY" -m pytest -q -m gpu -rA -p no:cacheprovider tests/test_energy.py tests/test_gpu.py \
        2>&1 | tee "$OUT/gpu-tests.log"
}

case "$PHASE" in
build)
    nvidia-smi > "$OUT/build.log" 2>&1  # the build's log begins with the machine's GPU
    setup
    stamp "models (beside the build)"
    models > "$OUT/models.log" 2>&1 &
    writer=$!
    build
    wait "$writer"; echo "models exit $?"; cat "$OUT/models.log"
    versions
    bench
    gpu_tests
    ;;
bench)  # a rehearsal of the first call without the build: .device-build/bin/ holds a llama-server already
    setup
    models > "$OUT/models.log" 2>&1; echo "models exit $?"; cat "$OUT/models.log"
    versions
    bench
    ;;
session)
    setup
    if [ ! -x "$DEV/bin/llama-server" ]; then
        stamp "no build kept from the first call: building again"
        nvidia-smi > "$OUT/build.log" 2>&1
        models > "$OUT/models.log" 2>&1 &
        writer=$!
        build
        wait "$writer"; cat "$OUT/models.log"
    elif [ ! -f "$DEV/models/qwen3-1.7b-random-f16.gguf" ]; then
        models
    fi
    versions
    ls -la "$DEV/models"
    small=()
    [ "$SMALL" = 1 ] && small=(--small)
    left=$(( ${DEADLINE_S:-570} - ($(date +%s) - START) ))
    budget=$(( left - 30 ))
    stamp "session (budget $budget s)"
    SPARKNB_HOME=. timeout "$(( left - 15 ))" "$PY" docs/examples/h200-llamacpp/session.py runs-h200 \
        --budget-s "$budget" "${small[@]}" 2>&1 | tee "$OUT/session.log"
    [ "${GPU_TESTS:-0}" = 1 ] && gpu_tests
    stamp "tar"
    tar -czf "$OUT/runs.tgz" runs-h200
    ls -la "$OUT"
    ;;
*)
    echo "say build, session (or bench: the first call less the build)"; exit 2 ;;
esac
stamp done
