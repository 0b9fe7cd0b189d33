"""What a run was measured in: package versions, the CPU, threads and the commit.

Float results of a tiny model trained for thousands of steps move with the machine (AVX2-only
and AVX-512 CPUs round differently) and with the packages; every results file and
``build/RESULTS.md`` / ``build/SEEDS.md`` carry this record so a learner can tell which of
their numbers should match::

    >>> rec = environment_record()            # doctest: +SKIP
    >>> rec["cpu_capability"], rec["torch_threads"]
    ('AVX512', 2)
"""
from __future__ import annotations

import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path

import torch

# the packages whose versions change the course's numbers
PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "tokenizers", "numpy", "accelerate")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


RECORDS_PATHS = ("docs/seeds", "docs/results.md")
"""what ``make seeds`` itself writes into the checkout: changes there do not make a run's code ``-dirty`` (the
second seed of ``make seeds SEEDS="1234 7"`` runs beside the first one's fresh records)"""


@lru_cache(maxsize=4)
def git_commit(root: Path | None = None) -> str:
    """The course checkout's commit (``root``: the checkout, by default this package's), with ``-dirty`` if it has
    uncommitted changes outside :data:`RECORDS_PATHS`; ``unknown`` outside git."""
    root = root or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude){p}" for p in RECORDS_PATHS)], cwd=root,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("-dirty" if dirty else "")


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def environment_record() -> dict:
    """A JSON-able record of the environment this process runs in (cheap: no benchmark)."""
    return {
        "python": platform.python_version(),
        "packages": {name: package_version(name) for name in PACKAGES},
        "cpu": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "platform": platform.platform(terse=True),
        "commit": git_commit(),
        "impl": os.environ.get("COURSE_IMPL") or "reference",   # "student": a class's functions (assignments)
    }


def machine(record: dict) -> str:
    """The record's device in words: the GPU, or the CPU with its instruction set, torch threads and cores."""
    return record.get("cuda") or (f"{record.get('cpu')} ({record.get('cpu_capability')}, "
                                  f"{record.get('torch_threads')} torch threads of {record.get('cpu_count')} cores)")


def packages(record: dict) -> str:
    """The record's package versions as ``"torch 2.13.0, transformers 5.17.0, ..."``."""
    return ", ".join(f"{name} {version}" for name, version in record.get("packages", {}).items())


def environment_markdown(record: dict) -> str:
    """The record as a short Markdown list (for RESULTS.md and SEEDS.md)."""
    return (f"- machine: {machine(record)}, {record.get('platform')}\n"
            f"- Python {record.get('python')}; {packages(record)}\n"
            f"- commit: {record.get('commit')}"
            + (" · **student mode** (`COURSE_IMPL=student`: a class's functions)" if record.get("impl") == "student"
               else "") + "\n")


def environment_report(profile, record: dict | None = None) -> str:
    """What notebook 00's Step 1 prints: the machine, the package versions, the profile and the folders.

    The machine and the versions are :func:`environment_record`'s, the record every
    results file carries, so the lines a learner sees here are the ones to compare with another machine's results.

    Args:
        profile: a resolved :class:`course_utils.run_config.Profile`.
        record: an environment record (default: this process's, measured now).

    Returns five lines: the machine (CPU or GPU, instruction set, torch threads, cores, RAM), Python and the
    package versions, the commit, the profile (name, device, dtype, seed, base model), and where data,
    artifacts and this profile's stage folders are.
    """
    from .paths import artifacts_root, data_dir

    record = environment_record() if record is None else record
    ram = _ram_gib()
    model = profile.model_id or "the course tiny Qwen3 (built in 01)"
    return "\n".join([
        f"machine: {machine(record)}" + (f", {ram:.0f} GiB RAM" if ram else "") + f"; {record.get('platform')}",
        f"python {record.get('python')}; {packages(record)}",
        f"commit: {record.get('commit')}",
        f"profile: {profile.name} | device: {profile.device} | dtype: {profile.dtype} | seed: {profile.seed} | "
        f"model: {model}",
        f"data: {data_dir()} | artifacts: {artifacts_root()} | stage folders: <notebook>/{profile.slug}/<stage>",
    ])


def _ram_gib() -> float | None:
    """Total memory in GiB, or None where psutil is missing."""
    try:
        import psutil
    except ImportError:
        return None
    return psutil.virtual_memory().total / 2**30
