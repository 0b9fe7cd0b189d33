#!/usr/bin/env bash
# Download the wheels scripts/gpu_memory_check.sh installs on a GPU machine that has torch, transformers, peft and
# accelerate but no internet, TRL or datasets: TRL and datasets at requirements-lock.txt's versions, plus what they
# import that such a machine lacks (dill, multiprocess) and the fsspec that datasets pins (<= 2026.2.0). pyarrow,
# pandas, xxhash, requests, httpx, huggingface-hub and jinja2 are expected there already (a few MB in all here; pyarrow
# alone would be ~45 MB). Run it where pip reaches PyPI; the folder (wheels/, git-ignored) travels with the check.
#     bash scripts/fetch_gpu_wheels.sh            # PYVER=3.12 (the GPU machine's Python), DEST=wheels
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DEST=${DEST:-wheels}
PYVER=${PYVER:-3.12}
PACKAGES=(trl datasets dill multiprocess fsspec)

pins=()
for name in "${PACKAGES[@]}"; do
  pin=$(grep -i "^${name}==" requirements-lock.txt | head -1)
  [ -n "$pin" ] || { echo "no pin for $name in requirements-lock.txt" >&2; exit 1; }
  pins+=("$pin")
done
mkdir -p "$DEST"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$DEST" "${pins[@]}"
ls -l "$DEST"
echo "total: $(du -sh "$DEST" | cut -f1) (${pins[*]})"
