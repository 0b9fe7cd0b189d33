"""Shared fixtures. Tests run offline (the Makefile sets HF_HUB_OFFLINE=1).

At the end of a run that executed notebooks, the terminal summary prints each notebook's
seconds against its budget (``results.budget_report``): a report, never a failure.
"""
import os
from collections import defaultdict
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

_NOTEBOOK_SECONDS: dict[str, float] = defaultdict(float)


@pytest.fixture(scope="session")
def tokenizer():
    from course_utils.modeling import train_tokenizer
    return train_tokenizer()


@pytest.fixture
def tmp_artifacts(tmp_path, monkeypatch):
    """Point COURSE_ARTIFACTS at a fresh folder for one test."""
    monkeypatch.setenv("COURSE_ARTIFACTS", str(tmp_path / "artifacts"))
    return tmp_path / "artifacts"


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):   # nbval: one item per cell; setup, call and teardown all count
        _NOTEBOOK_SECONDS[Path(path).stem] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _NOTEBOOK_SECONDS:
        return
    from course_utils.bench import matmul_gflops
    from course_utils.results import budget_report
    terminalreporter.write_sep("=", "notebook budgets (a report, not a test)")
    terminalreporter.write(budget_report(dict(_NOTEBOOK_SECONDS), matmul_gflops()))
