"""Where the course reads data and writes artifacts.

* ``data/`` ships with the repository (override: env ``COURSE_DATA``).
* ``artifacts/`` holds everything a run writes (override: env ``COURSE_ARTIFACTS``);
  each notebook writes only under ``artifacts/<notebook>/`` and its results file
  ``artifacts/results/<notebook>.json``. Deleting ``artifacts/`` is always safe.

A relative folder in either variable is taken from the repository root, wherever the process runs: a kernel runs in
``notebooks/``, so ``COURSE_ARTIFACTS=artifacts/seeds/s7`` taken from there would be a fresh, empty
``notebooks/artifacts/seeds/s7`` and every stage would be rebuilt into it.
"""
from __future__ import annotations

import os
from pathlib import Path


def repo_root() -> Path | None:
    """The course checkout this package lives in, or None when installed elsewhere."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "notebooks").is_dir() and (root / "data").is_dir() else None


def notebook_files(root: Path | None = None) -> list[Path]:
    """Every numbered notebook of ``notebooks/`` (``NN_name.ipynb``), in course order."""
    return sorted((root or repo_root()).joinpath("notebooks").glob("[0-9][0-9]_*.ipynb"))


def _folder(env_var: str, default: str) -> Path:
    """The folder env ``env_var`` names (a relative one from the repository root), else ``default`` there.

    Outside a course checkout "the repository root" is the current directory.
    """
    base = repo_root() or Path.cwd()
    value = os.environ.get(env_var)
    path = Path(value).expanduser() if value else Path(default)
    return path if path.is_absolute() else base / path


def data_dir(must_exist: bool = True) -> Path:
    """The folder holding the shipped ``*.jsonl`` files."""
    path = _folder("COURSE_DATA", "data")
    if must_exist and not path.is_dir():
        raise FileNotFoundError(
            f"course data folder {path} not found; set COURSE_DATA or run from a course checkout")
    return path


def artifacts_root() -> Path:
    """Root of everything the course writes (created on demand)."""
    path = _folder("COURSE_ARTIFACTS", "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def artifacts_dir(owner: str) -> Path:
    """``artifacts/<owner>/``, created on demand; ``owner`` is a notebook or stage name."""
    if not owner or "/" in owner or owner.startswith("."):
        raise ValueError(f"bad artifacts owner {owner!r}: use a plain name like '01_pretrain'")
    path = artifacts_root() / owner
    path.mkdir(parents=True, exist_ok=True)
    return path
