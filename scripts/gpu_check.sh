#!/usr/bin/env bash
# The GPU check of notebook 11, two ways.
#
#     bash scripts/gpu_check.sh [ARGS]         # offline, one shot (the default)
#     bash scripts/gpu_check.sh notebook       # the notebook itself
#
# Offline: for a GPU machine with torch (a CUDA build), transformers, peft and accelerate but no internet. TRL, datasets,
# unsloth and the small packages they import that such a machine lacks come as wheels in wheels/ (run
# `bash scripts/fetch_gpu_wheels.sh gpu_check` beforehand where pip reaches PyPI: about 40 MiB, under the 64 MiB a
# carried tree may take with the repository); they are installed into a throw-away folder that Python searches after
# its own packages. scripts/gpu_check.py then builds a random-initialised Qwen3-0.6B from its config and runs 11's
# unsloth path as far as the packages allow: the load with LoRA, the priming SFT, (with vLLM) the measurement through
# fast_generate, and a few GRPO steps, printing step time and peak memory per step and writing
# results/gpu/gpu_check.json. vLLM (about 300 MiB) and bitsandbytes (about 40 MiB) do not fit the carried tree: without
# them the script runs without fast_inference and with adamw_torch, and says so. Extra ARGS go to the Python script
# (--plain: TRL + PEFT without unsloth; --grpo-steps N; --out FILE). LIMIT_S (default 540) bounds the run.
#
# notebook: runs notebooks/11 on profile `gpu` (Qwen3-0.6B-Base, GSM8K; needs internet for the model and the data set
# and the gpu extra: `make install GPU=1`), keeps its results file (before/after accuracy on 300 held-out problems,
# format rate, tokens, peak VRAM, seconds) and copies it to results/gpu/ for committing.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=offline
if [ "${1:-}" = notebook ]; then MODE=notebook; shift; fi

if [ "$MODE" = notebook ]; then
  PY=${PY:-.venv/bin/python}
  OUT=${OUT:-build/gpu_check}
  "$PY" -c "import sys, torch; sys.path.insert(0, '.'); from course_utils.run_config import no_cuda_reason; \
sys.exit(0 if torch.cuda.is_available() else 'no CUDA device, the GPU check needs one: ' + no_cuda_reason())"
  "$PY" -c "import unsloth, vllm" >/dev/null 2>&1 || { echo "the gpu extra is missing: pip install -e '.[dev,gpu]'"; exit 1; }
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader || true
  start=$(date +%s)
  timeout "${LIMIT_S:-900}" "$PY" -m course_tools.runner notebooks/11_qwen3_grpo_unsloth_vllm.ipynb --out "$OUT"
  echo "notebook 11 on the GPU: $(( $(date +%s) - start )) s wall"
  results=${COURSE_ARTIFACTS:-artifacts}/results/11_qwen3_grpo_unsloth_vllm.json
  "$PY" - "$results" <<'EOF'
import json, sys
record = json.load(open(sys.argv[1]))
assert record["profile"] == "gpu", f"ran on profile {record['profile']!r}, not gpu"
m, x = record["metrics"], record["extra"]
print(f"accuracy {m['accuracy']['before']:.1%} -> {m['accuracy']['after']:.1%} on {x['eval_problems']} held-out "
      f"problems; peak VRAM {x['peak_vram_gib']:.1f} GiB on {x['gpu']}; {record['seconds']:.0f} s")
EOF
  mkdir -p results/gpu
  cp "$results" results/gpu/
  echo "copied to results/gpu/ — commit it"
  exit 0
fi

PY=${PY:-python3}
WHEELS=${WHEELS:-wheels}
SITE=${SITE:-/tmp/course-gpu-check-site}
nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader || true
site_args=()
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$WHEELS"/*.whl
  site_args=(--site "$SITE")
elif ! "$PY" -c "import trl, datasets" >/dev/null 2>&1; then
  echo "TRL or datasets is missing and $WHEELS/ holds no wheels: run scripts/fetch_gpu_wheels.sh gpu_check first" >&2
  exit 1
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 UNSLOTH_DISABLE_STATISTICS=1 PYTHONUNBUFFERED=1
start=$(date +%s)
timeout "${LIMIT_S:-540}" "$PY" scripts/gpu_check.py ${site_args[@]+"${site_args[@]}"} "$@"
echo "gpu_check: $(( $(date +%s) - start )) s wall"
