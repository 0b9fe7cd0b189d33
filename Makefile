# The course's two commands: `make course` (run every notebook, write build/) and
# `make test` (the test-suite; CI runs exactly this). Both install first if needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU wheel by default; on a GPU machine: make install TORCH_SPEC="torch==2.13.0" GPU=1
TORCH_SPEC ?= torch==2.13.0
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1

.PHONY: install course test lab data clean drift bench
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: an unpinned torch would pull a multi-GB CUDA build
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev$(if $(GPU),$(comma)gpu)]"
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)" >/dev/null
	touch $@

comma := ,

course: install
	$(OFFLINE) $(PY) -m course_utils.runner

test: install
	@start=$$(date +%s); $(OFFLINE) $(PY) -m pytest; rc=$$?; echo "make test took $$(( $$(date +%s) - start )) s"; exit $$rc

# Where the time goes: each phase of the engine against this machine's matmul roofline (about 2 min)
bench: install
	$(OFFLINE) $(PY) -m course_utils.bench --out build/bench.json

lab: install
	$(VENV)/bin/jupyter lab notebooks/

data: install
	$(PY) -m course_utils.data

# The API-drift test of notebook 11's GPU path, on a CPU machine (not part of `make test`: the environment is
# 6.7 GB). PyPI's torchvision / torchaudio / torchcodec, pulled in by unsloth and vllm, are built against CUDA torch
# and do not load against the CPU wheel (`operator torchvision::nms does not exist`), which breaks even
# `from trl import GRPOConfig`; they are removed here (a GPU machine keeps them).
DRIFT_VENV ?= .venv-gpu
DPY := $(DRIFT_VENV)/bin/python

$(DRIFT_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(DRIFT_VENV)
	$(DPY) -m pip install --quiet --upgrade pip
	$(DPY) -m pip install --quiet "$(TORCH_SPEC)"
	$(DPY) -m pip install --quiet -e ".[dev,gpu]"
	$(DPY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@

drift: install $(DRIFT_VENV)/.installed
	# the gpu extra must resolve over the course environment without moving a core pin (torch included)
	$(PY) -m pip install --dry-run --quiet ".[gpu]"
	$(OFFLINE) $(DPY) -m pytest -p no:nbval -o addopts="" -rs tests/test_gpu_drift.py tests/test_capstone.py

clean:
	rm -rf artifacts build
