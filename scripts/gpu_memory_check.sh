#!/usr/bin/env bash
# The GPU memory check, on a machine with torch, transformers, peft and accelerate but no internet, TRL or datasets:
# installs TRL and datasets from wheels/ (scripts/fetch_gpu_wheels.sh, run beforehand where pip reaches PyPI) into a
# throw-away folder, then runs scripts/gpu_memory_check.py (05's PPO, 06's DPO, 07's GRPO on a random-initialised
# Qwen3-0.6B) under a 570 s limit. Writes results/gpu/memory_check.json (step time, tokens/s, peak VRAM and the
# estimate of course_utils.memory per notebook); extra arguments go to the Python script (e.g. --out FILE).
#     bash scripts/fetch_gpu_wheels.sh       # here, once
#     bash scripts/gpu_memory_check.sh       # there (PY=python3 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
WHEELS=${WHEELS:-wheels}
SITE=${SITE:-/tmp/course-gpu-check-site}

if ! "$PY" -c "import trl, datasets" >/dev/null 2>&1; then
  compgen -G "$WHEELS/*.whl" >/dev/null || {
    echo "TRL or datasets is missing and $WHEELS/ holds no wheels: run scripts/fetch_gpu_wheels.sh first" >&2; exit 1; }
  "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$WHEELS"/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" - <<'PYEOF'
import importlib.metadata as md, torch
print("versions:", {n: md.version(n) for n in ("torch", "transformers", "peft", "accelerate", "trl", "datasets")})
print("GPU:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
PYEOF
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
start=$(date +%s)
timeout "${LIMIT_S:-570}" "$PY" scripts/gpu_memory_check.py "$@"
echo "gpu_memory_check: $(( $(date +%s) - start )) s wall"
