#!/usr/bin/env bash
# The GPU session behind docs/examples/h200/, run from the repository root on the lent H200 machine. Its
# Python has torch and transformers but not openai, pydantic, papermill, fastapi, uvicorn and the rest:
# those travel as wheels in .whl/ (pip download ... --python-version 3.12, see the README here).
# Builds the random-weight model, runs the GPU tests, then the decode and prefill notebooks against
# `transformers serve` (GPU_TESTS=0 leaves the tests out); everything it makes goes to $OUT (run folders as a tarball).
set -uo pipefail
OUT=${OUT:-/tmp/h200-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 SPARKNB_GPU_HARDWARE=h200
stamp() { echo "== $(date -u +%T) $*"; }
stamp wheels
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD JUPYTER_PATH=/tmp/site/share/jupyter  # nbconvert's templates came with the wheels
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
stamp model
timeout 150 python3 docs/examples/h200/make_model.py 2>&1 | grep -v "Writing model shards" || exit 1
stamp notebooks  # relative paths (SPARKNB_HOME=., outputs runs-h200), so no machine path enters a run folder
SPARKNB_HOME=. timeout 270 python3 docs/examples/h200/session.py runs-h200 2>&1 | tee "$OUT/session.log"
stamp gpu tests
[ "${GPU_TESTS:-1}" = 1 ] && timeout 150 python3 -m pytest -q -m gpu -rA -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$OUT/gpu-tests.log"
stamp done
tar -czf "$OUT/runs.tgz" runs-h200
