#!/usr/bin/env bash
# Make ready, where the network is, what bench/step_split_gpu.sh reads on a GPU machine that reaches nothing.
# Run from the repository root with the project's virtualenv (PY, default .venv/bin/python):
#
#   bash bench/step_split_prepare.sh
#
# It writes, all ignored by git (.whl/ by .gitignore, .device/ and .device-build/ added to .git/info/exclude):
# - .device/llama.cpp-src.tar.xz: the pinned llama-cpp-python sdist (sparknb.serving.llama_server.SOURCE, its
#   sha256 checked; $SPARKNB_LLAMA_CPP_SDIST where it is already on disk, else pip download, 77 MB) cut to the
#   vendored llama.cpp less docs, models, media, tests, examples, pocs, gguf-py and benches;
# - .device/xdg/sparknb/testbed/tiny-dense-*/: the test bed's tokenizer (config and tokenizer files, no weights),
#   which make_model.py writes into every GGUF, so nothing is built from a recipe there;
# - .whl/: the wheels the GPU machine's Python 3.12 lacks for sparknb's runtime and the notebooks (openai,
#   pydantic, papermill, nbconvert, ipykernel, pyzmq, tornado, gguf, PyYAML and what they need), each at the
#   version this virtualenv runs, less what that machine has (torch, transformers, pandas, numpy, ...).
# It prints the total, which must stay under the 60 MiB the call carries (about 35 MiB when made).
set -euo pipefail
PY=${PY:-.venv/bin/python}
rm -rf .whl && mkdir -p .device .whl
exclude=$(git rev-parse --git-common-dir)/info/exclude
mkdir -p "$(dirname "$exclude")" && touch "$exclude"
for p in /.device/ /.device-build/ /.whl/; do grep -qxF "$p" "$exclude" || echo "$p" >> "$exclude"; done

# 1. The llama.cpp source, repacked from the pinned sdist.
"$PY" - <<'EOF'
import os, subprocess, sys, tarfile, tempfile
from pathlib import Path
from sparknb.serving import llama_server as ls

name = f"{ls.SOURCE['package'].replace('-', '_')}-{ls.SOURCE['version']}.tar.gz"
out = Path(".device/llama.cpp-src.tar.xz")
if out.exists():
    sys.exit(print(f"{out} is there"))
with tempfile.TemporaryDirectory() as tmp:
    sdist = Path(os.environ[ls.SDIST_ENV_VAR]) if os.environ.get(ls.SDIST_ENV_VAR) else Path(tmp) / name
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", tmp,
                        f"{ls.SOURCE['package']}=={ls.SOURCE['version']}"], check=True)
    ls.pinned(sdist, ls.SOURCE["sha256"], "the pinned source", "download it again")
    top = f"{name.removesuffix('.tar.gz')}/{ls.SOURCE['subdir']}/"
    left_out = ("docs/", "models/", "media/", "tests/", "pocs/", "gguf-py/", "benches/", "tools/server/tests/",
                "examples/", ".devops/", ".github/")
    with tarfile.open(sdist) as src, tarfile.open(out, "w:xz") as dst:
        for m in src.getmembers():
            if m.name.startswith(top) and not m.name[len(top):].startswith(left_out):
                m.name = "llama.cpp/" + m.name[len(top):]
                m.pax_headers.pop("path", None)  # a long name's pax header would win over the new name
                dst.addfile(m, src.extractfile(m) if m.isfile() else None)
print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB")
EOF

# 2. The test bed's tokenizer, without its weights.
"$PY" - <<'EOF'
import shutil
from pathlib import Path
from sparknb.serving import tiny_models

source = tiny_models.checkpoint("tiny-dense")
target = Path(".device/xdg/sparknb/testbed") / source.name
target.mkdir(parents=True, exist_ok=True)
for f in source.iterdir():
    if f.is_file() and not f.name.endswith(".safetensors"):
        shutil.copy2(f, target / f.name)
print(f"{target}: {sorted(p.name for p in target.iterdir())}")
EOF

# 3. The wheels: what sparknb and the notebooks need, at this virtualenv's versions, less what the machine has.
"$PY" - <<'EOF' > .device/wheels.txt
import re
from importlib import metadata

ROOTS = ["sparknb", "papermill", "nbconvert", "ipykernel", "gguf", "httpx", "tinycss2"]  # httpx: sparknb imports it; tinycss2: nbconvert needs bleach[css] (an extra, which the walk below skips)
HAS = {"torch", "transformers", "pandas", "statsmodels", "matplotlib", "pyarrow", "prometheus-client",
       "nvidia-ml-py", "numpy", "scipy", "pillow", "tokenizers", "safetensors", "huggingface-hub", "requests",
       "urllib3", "certifi", "idna", "charset-normalizer", "tqdm", "filelock", "fsspec", "packaging", "jinja2",
       "markupsafe", "sympy", "mpmath", "networkx", "typing-extensions", "setuptools", "triton", "regex",
       "python-dateutil", "six", "pytz", "tzdata", "patsy", "kiwisolver", "fonttools", "cycler", "contourpy",
       "pyparsing", "hf-xet", "sentencepiece", "psutil"}
SKIP = {"jupyterlab", "widgetsnbextension", "jupyterlab-widgets"}  # the lab (and its server), not a headless run
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731
seen, todo = {}, list(ROOTS)
while todo:
    name = norm(todo.pop())
    if name in seen or name in HAS or name in SKIP:
        continue
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        continue
    seen[name] = dist.version
    for req in dist.requires or []:
        if "extra ==" in req:
            continue
        todo.append(re.split(r"[\s;<>=!~\[(]", req, maxsplit=1)[0])
seen.pop("sparknb", None)
print("\n".join(f"{n}=={v}" for n, v in sorted(seen.items())))
EOF
echo "$(wc -l < .device/wheels.txt) wheels: $(tr '\n' ' ' < .device/wheels.txt)"
platforms=()
for n in 2_28 2_27 2_24 2_17 2_5; do platforms+=(--platform "manylinux_${n}_x86_64"); done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
    -d .whl -r .device/wheels.txt
du -sh .device .whl
du -cm .device .whl | tail -1 | awk '{ if ($1 > 60) { print "TOO BIG: " $1 " MiB (carry limit 60)"; exit 1 } }'
echo "ready: carry .device and .whl, run bench/step_split_gpu.sh (see its head)"
