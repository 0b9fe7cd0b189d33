#!/usr/bin/env bash
# Download the wheels a GPU machine without internet needs for a GPU check, where pip reaches PyPI; the folder
# (wheels/, git-ignored) travels with the check. Such a machine has torch, transformers, peft and accelerate; pyarrow,
# pandas, xxhash, requests, httpx, huggingface-hub and jinja2 are expected there already (pyarrow alone would be ~45 MB).
#     bash scripts/fetch_gpu_wheels.sh              # scripts/gpu_memory_check.sh: TRL and datasets (a few MB)
#     bash scripts/fetch_gpu_wheels.sh gpu_check    # scripts/gpu_check.sh: the same, plus unsloth (about 40 MiB)
# Memory check: TRL and datasets at requirements-lock.txt's versions, plus what they import that such a machine lacks
# (dill, multiprocess) and the fsspec that datasets pins (<= 2026.2.0).
# gpu_check adds unsloth and unsloth-zoo at the gpu extra's pins (pyproject.toml) and the small packages they import
# that may be missing, at the versions `pip install --dry-run ".[gpu]"` resolves over the course's pins. Not carried:
# vLLM (about 300 MiB) and bitsandbytes (about 40 MiB); the check runs without them and says so. The check's tree
# (the repository and wheels/) must stay under 64 MiB; the script says what it comes to.
# PYVER=3.12 (the GPU machine's Python), DEST=wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DEST=${DEST:-wheels}
PYVER=${PYVER:-3.12}
SET=${1:-memory}
PACKAGES=(trl datasets dill multiprocess fsspec)
EXTRA=()
case "$SET" in
  memory) ;;
  gpu_check)
    # in the lock: what unsloth's import may reach for beyond torch / transformers / peft / accelerate
    PACKAGES+=(rich markdown-it-py mdurl Pygments typer click pydantic pydantic_core annotated-types
               typing-inspection json5 pillow)
    for name in unsloth unsloth-zoo; do
      pin=$(grep -o "\"$name==[^\"]*\"" pyproject.toml | tr -d '"' | head -1)
      [ -n "$pin" ] || { echo "no pin for $name in pyproject.toml's gpu extra" >&2; exit 1; }
      EXTRA+=("$pin")
    done
    EXTRA+=(tyro==1.0.17 typeguard==4.6.1 docstring-parser==0.18.0 msgspec==0.23.0 cut-cross-entropy==25.1.1
            einops==0.8.2 sentencepiece==0.2.3 protobuf==7.36.2 nest-asyncio==1.6.0 structlog==26.1.0) ;;
  *) echo "unknown set $SET: memory or gpu_check" >&2; exit 1 ;;
esac

pins=()
for name in "${PACKAGES[@]}"; do
  pin=$(grep -i "^${name}==" requirements-lock.txt | head -1)
  [ -n "$pin" ] || { echo "no pin for $name in requirements-lock.txt" >&2; exit 1; }
  pins+=("$pin")
done
pins+=("${EXTRA[@]}")
mkdir -p "$DEST"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_27_x86_64 -d "$DEST" "${pins[@]}"
ls -l "$DEST"
wheels_kib=$(du -sk "$DEST" | cut -f1)
tree_kib=$(( $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) / 1024 ))
echo "total: $(( wheels_kib / 1024 )) MiB of wheels, $(( (wheels_kib + tree_kib) / 1024 )) MiB with the repository" \
  "(at most 64 MiB travel) (${pins[*]})"
if [ $(( wheels_kib + tree_kib )) -gt $(( 64 * 1024 )) ]; then
  echo "over 64 MiB: the check's tree would not travel" >&2; exit 1
fi
