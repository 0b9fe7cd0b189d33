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


@pytest.fixture(scope="session")
def tokenizer():
    from course_utils.modeling import train_tokenizer
    return train_tokenizer()


@pytest.fixture
def tmp_artifacts(tmp_path, monkeypatch):
    """Point COURSE_ARTIFACTS at a fresh folder for one test."""
    monkeypatch.setenv("COURSE_ARTIFACTS", str(tmp_path / "artifacts"))
    return tmp_path / "artifacts"


class _NotebookBudgets:
    """Sums each notebook's nbval item durations and prints the budget report at the end.

    Registered as a plugin of its own (not as this conftest's hooks): a conftest's
    per-item hooks see only the items below its folder, and the notebooks are not.
    """

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report):
        path = report.nodeid.split("::")[0]
        if path.endswith(".ipynb"):   # nbval: one item per cell; setup, call and teardown all count
            self.seconds[Path(path).stem] += report.duration

    def pytest_terminal_summary(self, terminalreporter):
        if not self.seconds:
            return
        from course_utils.bench import matmul_gflops
        from course_utils.results import budget_report
        terminalreporter.write_sep("=", "notebook budgets (a report, not a test)")
        terminalreporter.write(budget_report(dict(self.seconds), matmul_gflops()))


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("notebook-budgets"):
        config.pluginmanager.register(_NotebookBudgets(), "notebook-budgets")
