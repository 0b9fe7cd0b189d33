"""The test matrix: every notebook on models of other families, at the smoke scale, offline.

A learner's own model reaches the course through one switch (env ``COURSE_MODEL``, or
``Params(model_id=...)``) and :mod:`course_utils.adapt`. This module proves that path runs: it
builds tiny models of two other families from configs, with tokenizers of their own trained here
on the course's texts (no download),

* ``llama``: a Llama-style model with a byte-level BPE tokenizer, ``<s>`` / ``</s>``, no pad token and
  no chat template;
* ``gpt2``: a GPT-2-style model whose single ``<|endoftext|>`` is BOS and EOS, no pad token, no
  template, learned positions;

saves each as a local folder (safetensors), and runs notebooks under ``COURSE_MODEL=<folder>`` and
``COURSE_SCALE=smoke`` (every recipe's steps and sizes cut: :data:`recipes` ``SMOKE``), each family in its
own artifacts folder. A notebook passes when it executes, records its results for that model and prints
``NOT CHECKED`` where the course's thresholds would assert (04 loads no language model: its checks assert). The models are random: nothing they measure
is a result, only that every branch of the hub path runs.

``python -m course_tools.matrix`` (what ``make matrix`` calls) runs all of it and writes
``build/MATRIX.md``; ``make test`` runs the part ``tests/test_matrix.py`` picks.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from course_utils.modeling import FAMILIES, save_family_model
from course_utils.paths import artifacts_root, notebook_files, repo_root
from course_utils.show import markdown_rows

MATRIX_NOTEBOOKS = ("02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13")
MODEL_FREE = ("04",)   # its bandits and grid worlds load no language model: its checks assert on any model


@dataclass(frozen=True)
class Cell:
    """One notebook on one family: did it run, record its results and decline to assert."""

    family: str
    notebook: str
    ok: bool
    seconds: float
    why: str = ""


def notebook_path(number: str) -> Path:
    matches = [p for p in notebook_files() if p.name.startswith(f"{number}_")]
    if not matches:
        raise FileNotFoundError(f"no notebook numbered {number} in notebooks/")
    return matches[0]


def outputs_text(executed: Path) -> str:
    """All text an executed notebook printed (streams and plain-text results)."""
    nb = json.loads(executed.read_text(encoding="utf-8"))
    parts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain") or ""
            parts.append(text if isinstance(text, str) else "".join(text))
    return "\n".join(parts)


def run_cell(family: str, number: str, root: Path, timeout: int = 900) -> Cell:
    """Run notebook ``number`` on ``family``'s model at the smoke scale under ``root`` and judge it."""
    model_dir = save_family_model(family, root / "models" / family)
    artifacts, out = root / family / "artifacts", root / family / "build"
    notebook = notebook_path(number)
    env = dict(os.environ, COURSE_MODEL=str(model_dir), COURSE_SCALE="smoke", COURSE_ARTIFACTS=str(artifacts),
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "course_tools.runner", "--one", str(notebook), "--out", str(out),
                           "--timeout", str(timeout)], env=env, capture_output=True, text=True)
    seconds = time.time() - t0
    if proc.returncode != 0:
        return Cell(family, notebook.stem, False, seconds, (proc.stderr or proc.stdout)[-3000:])
    record_file = artifacts / "results" / f"{notebook.stem}.json"
    if not record_file.is_file():
        return Cell(family, notebook.stem, False, seconds, f"no results file {record_file}")
    record = json.loads(record_file.read_text(encoding="utf-8"))
    if record.get("model") != str(model_dir):
        return Cell(family, notebook.stem, False, seconds, f"results recorded for model {record.get('model')!r}")
    text = outputs_text(out / "notebooks" / notebook.name)
    if number not in MODEL_FREE and "NOT CHECKED" not in text:
        return Cell(family, notebook.stem, False, seconds, "its check cell did not print NOT CHECKED")
    return Cell(family, notebook.stem, True, seconds)


def matrix_markdown(cells: list[Cell]) -> str:
    """The matrix as Markdown: one row per notebook, one column per family (ok / FAILED and seconds)."""
    families = sorted({c.family for c in cells}, key=FAMILIES.index)
    rows = []
    for nb in sorted({c.notebook for c in cells}):
        by = {c.family: c for c in cells if c.notebook == nb}
        rows.append((nb, *((f"ok, {by[f].seconds:.0f} s" if by[f].ok else f"FAILED, {by[f].seconds:.0f} s")
                           if f in by else "" for f in families)))
    return markdown_rows(("notebook", *families), rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--notebooks", nargs="+", default=list(MATRIX_NOTEBOOKS), help="notebook numbers")
    parser.add_argument("--root", type=Path, default=artifacts_root() / "matrix",
                        help="models, artifacts and executed notebooks of the matrix (default: <artifacts>/matrix)")
    parser.add_argument("--out", type=Path, default=repo_root() / "build" / "MATRIX.md")
    args = parser.parse_args(argv)
    cells = []
    for family in args.families:
        for number in args.notebooks:
            cell = run_cell(family, number, args.root)
            cells.append(cell)
            print(f"{family:6s} {cell.notebook}: {'ok' if cell.ok else 'FAILED'} in {cell.seconds:.0f} s", flush=True)
            if not cell.ok:
                print(cell.why, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from course_utils.environment import environment_record
    env = environment_record()
    args.out.write_text("# The model matrix (smoke scale)\n\nMade by `make matrix` on "
                        f"{env['cpu']} ({env['cpu_capability']}, {env['torch_threads']} threads), commit {env['commit']}.\n\n" + matrix_markdown(cells),
                        encoding="utf-8")
    print(matrix_markdown(cells))
    return 0 if all(c.ok for c in cells) else 1


if __name__ == "__main__":
    sys.exit(main())
