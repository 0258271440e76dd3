#!/usr/bin/env bash
# Make ready what bench/agent_replay_gpu.sh carries besides .device and .whl (bench/step_split_prepare.sh): the
# sealed live agent run to replay (RUN_FOLDER), the public key that signed it (this box's own, so that the GPU
# machine can be told to trust it by name with `sparknb trust`), and Debian's openssh-client package (the GPU machine
# has no ssh-keygen: without it every run there is sealed UNSIGNED, and a reader refuses those).
set -euo pipefail
run=${1:?usage: bench/agent_replay_prepare.sh RUN_FOLDER (a sealed live agent run)}
PY=${PY:-.venv/bin/python}
rm -rf .device/agent && mkdir -p .device/agent/outputs/agent
cp -a "$run" .device/agent/outputs/agent/
"$PY" -c 'from sparknb.runs import signing; print(signing._public(signing.key()))' > .device/agent/signer.pub
(cd .device && rm -f openssh-client_*.deb && apt-get download openssh-client >/dev/null)
du -sh .device/agent .device/openssh-client_*.deb
