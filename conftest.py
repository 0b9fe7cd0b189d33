"""pytest's top-level conftest: the notebooks' budget report, for every pytest run of this repository.

At the end of a run that executed notebooks (nbval), the terminal summary prints each notebook's
seconds against its budget (``course_tools.reports.budget_report``): a report, never a failure. Under
``course_tools.testrun`` (``make test``, which runs the notebooks in several pytest processes) it
writes them to the file ``COURSE_TEST_SECONDS`` names instead, and the driver prints one report over
every part. It lives here, not in ``tests/conftest.py``, because a run given only notebooks does not
load the conftest of ``tests/``.
"""
import json
import os
from collections import defaultdict
from pathlib import Path


class _NotebookBudgets:
    """Sums each notebook's nbval item durations and prints the budget report at the end.

    Registered once per run as the plugin "notebook-budgets".
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
        if os.environ.get("COURSE_TEST_SECONDS"):   # part of course_tools.testrun: it reports over all parts
            Path(os.environ["COURSE_TEST_SECONDS"]).write_text(json.dumps(dict(self.seconds)), encoding="utf-8")
            return
        from course_tools.bench import matmul_gflops
        from course_tools.reports import budget_report
        terminalreporter.write_sep("=", "notebook budgets (a report, not a test)")
        terminalreporter.write(budget_report(dict(self.seconds), matmul_gflops()))


# nbval waits at most 5 s between two output messages of a cell that has finished (``IPyNbCell.output_timeout``,
# fixed in nbval 0.11): on a slow machine running two notebooks side by side, a long cell can miss that window
# although its code has run. It bounds message delivery, not the cell's own run time (``--nbval-cell-timeout``), so
# a longer wait hides no failure of the course.
NBVAL_OUTPUT_TIMEOUT_S = 120


def pytest_collection_modifyitems(items):
    # the tests that read what the notebooks of the same run left (testrun.LAST_TESTS: the book test) go last; make
    # test runs them in a phase of their own, after every notebook
    from course_tools.testrun import LAST_TESTS

    for item in items:
        if hasattr(item, "output_timeout"):   # nbval's notebook cells
            item.output_timeout = NBVAL_OUTPUT_TIMEOUT_S
    last = [item for item in items if item.nodeid.split("::")[0] in LAST_TESTS]
    items[:] = [item for item in items if item not in last] + last


class _ExecutedCopies:
    """Writes each notebook as nbval executed it, outputs included, to ``build/test-notebooks/`` (after every cell,
    so a notebook that failed is there up to its failing cell): the executed copies a test run leaves, read by the
    book test (``tests/test_book.py``) and by whoever reads a failed CI. nbval keeps a cell's display and stream
    outputs but not the later updates of a display (a trainer's table shows its first state)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.counts: dict[str, int] = defaultdict(int)

    def pytest_runtest_teardown(self, item):
        outputs, cell = getattr(item, "test_outputs", None), getattr(item, "cell", None)
        if outputs is None or cell is None or not hasattr(item.parent, "nb"):
            return
        import nbformat
        cell.outputs = [nbformat.from_dict(dict(o)) for o in outputs]
        name = Path(str(item.parent.fspath)).name
        self.counts[name] += 1
        cell.execution_count = self.counts[name]
        self.folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(item.parent.nb, self.folder / name)


def pytest_configure(config):
    if not config.pluginmanager.has_plugin("notebook-budgets"):
        config.pluginmanager.register(_NotebookBudgets(), "notebook-budgets")
    if not config.pluginmanager.has_plugin("executed-copies"):
        folder = Path(config.rootpath) / "build" / "test-notebooks"
        config.pluginmanager.register(_ExecutedCopies(folder), "executed-copies")
