#!/usr/bin/env bash
# The GPU check of notebook 11: run it on the `gpu` profile (unsloth + vLLM, Qwen3-0.6B-Base, GSM8K) and keep its
# results file. Sized for a few minutes on one data-centre GPU; needs CUDA, internet (model and data set) and the gpu extra:
#     make install GPU=1 TORCH_SPEC="torch==2.13.0"     # or any environment with `pip install -e ".[dev,gpu]"`
#     bash scripts/gpu_check.sh
# Writes artifacts/results/11_qwen3_grpo_unsloth_vllm.json (before/after accuracy on 300 held-out GSM8K problems,
# format rate, tokens, peak VRAM, seconds) and copies it to results/gpu/ for committing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-build/gpu_check}

"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: the GPU check needs one')"
"$PY" -c "import unsloth, vllm" >/dev/null 2>&1 || { echo "the gpu extra is missing: pip install -e '.[dev,gpu]'"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

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
