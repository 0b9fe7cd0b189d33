# The course's two commands: `make course` (run every notebook, write build/) and
# `make test` (the test-suite; CI runs exactly this). Both install first if needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU wheel by default; on a GPU machine: make install TORCH_SPEC="torch==2.13.0" GPU=1
TORCH_SPEC ?= torch==2.13.0
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1

.PHONY: install course test lab data clean
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
	$(OFFLINE) $(PY) -m pytest

lab: install
	$(VENV)/bin/jupyter lab notebooks/

data: install
	$(PY) -m course_utils.data

clean:
	rm -rf artifacts build
