"""Measured results: each notebook records its before/after metrics here.

``artifacts/results/<notebook>.json`` holds::

    {"notebook": "01_pretrain", "seed": 1234, "seconds": 95.2, "peak_ram_mb": 1400,
     "profile": "cpu-tiny", "metrics": {"val_loss": {"before": 6.4, "after": 1.2}},
     "environment": {"packages": {...}, "cpu": ..., "cpu_capability": "AVX512", ...}}

``make course`` tabulates them into ``build/RESULTS.md`` (:mod:`course_tools.reports`).
"""
from __future__ import annotations

import json
import math
import resource
import sys
from pathlib import Path

from .environment import environment_record
from .paths import artifacts_root


def peak_ram_mb() -> float:
    """Peak resident memory of this process so far, in MiB (the kernel's, in a notebook)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def results_dir() -> Path:
    path = artifacts_root() / "results"
    path.mkdir(parents=True, exist_ok=True)
    return path


def record_results(notebook: str, metrics: dict, seed: int, seconds: float, profile: str = "cpu-tiny",
                   extra: dict | None = None, model: str | None = None, scale: str = "full") -> Path:
    """Write ``artifacts/results/<notebook>.json``; returns its path.

    ``metrics`` maps a name to ``{"before": x, "after": y}`` (finite numbers); ``model`` is the profile's base model
    (None: the course's own) and ``scale`` its ``Profile.scale``, so that a notebook reading another's results reads
    those of the same run.
    """
    clean = {}
    for name, pair in metrics.items():
        if not isinstance(pair, dict) or set(pair) != {"before", "after"}:
            raise ValueError(f"metric {name!r} must be {{'before': x, 'after': y}}, got {pair!r}")
        vals = {k: float(v) for k, v in pair.items()}
        if not all(math.isfinite(v) for v in vals.values()):
            raise ValueError(f"metric {name!r} has a non-finite value: {vals}")
        clean[name] = vals
    record = {"notebook": notebook, "seed": int(seed), "seconds": round(float(seconds), 1),
              "peak_ram_mb": round(peak_ram_mb(), 1), "profile": profile, "model": model, "scale": scale,
              "metrics": clean, "environment": environment_record()}   # Python's version is in the environment
    if extra:
        record["extra"] = extra
    path = results_dir() / f"{notebook}.json"
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load_results(folder: str | Path | None = None, *, profile=None) -> list[dict]:
    """Every results record in ``folder`` (default ``artifacts/results``), by notebook; with ``profile``, only those
    of the same run: its seed, profile name, base model and scale (a record of another seed, model or a smoke run is not
    this run's)."""
    folder = Path(folder) if folder is not None else results_dir()
    records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]
    if profile is None:
        return records
    return [r for r in records if r.get("seed") == profile.seed and r.get("profile") == profile.name
            and r.get("model") == profile.model_id and r.get("scale", "full") == profile.scale]


def record_value(record: dict | None, *keys):
    """``record[k1][k2]...`` of a results record, or None where any key is missing."""
    for key in keys:
        if not isinstance(record, dict) or key not in record:
            return None
        record = record[key]
    return record


def before_after(record: dict | None, metric: str) -> str:
    """A recorded metric as ``"35.3% → 61.3%"``, or ``"–"`` where the record lacks it."""
    pair = record_value(record, "metrics", metric)
    return "–" if pair is None else f"{pair['before']:.1%} → {pair['after']:.1%}"
