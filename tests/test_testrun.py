"""make test's plan (course_tools.testrun): every notebook once, and each after what it reads."""
import json
import re

import pytest

from course_tools import testrun
from course_utils.paths import notebook_files, repo_root
from course_utils.stages import STAGES

ROOT_DIR = repo_root()


def _number(path: str) -> str:
    return path.split("/")[-1][:2]


def test_the_plan_runs_every_notebook_once_and_the_unit_tests():
    phase_1, stream_a, stream_b = testrun.plan()
    planned = [_number(p) for p in phase_1 + stream_a + stream_b if p.startswith("notebooks/")]
    assert sorted(planned) == [p.name[:2] for p in notebook_files()]
    assert len(planned) == len(set(planned))
    assert stream_b[0] == "tests" and "tests" not in phase_1 + stream_a
    for serial in testrun.SERIAL_TESTS:        # multi-process tests: in phase 1, alone, and not again in stream B
        assert (ROOT_DIR / serial).is_file() and serial in phase_1 and f"--ignore={serial}" in stream_b
    for last in testrun.LAST_TESTS:            # they read the notebooks' executed copies: phase 3, not stream B
        assert (ROOT_DIR / last).is_file() and f"--ignore={last}" in stream_b and last not in phase_1 + stream_a


def test_every_stage_a_notebook_loads_is_made_in_phase_1():
    """Side by side, a notebook that found a stage missing would build it while another reads it."""
    phase_1 = [_number(p) for p in testrun.plan()[0]]
    for stage in STAGES.values():
        assert stage.notebook in phase_1, stage
    for path in notebook_files():
        text = "".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"])
        for name in re.findall(r'load_stage\("(\w+)"', text):
            assert STAGES[name].notebook in phase_1 or STAGES[name].notebook == path.name[:2], (path.name, name)


def test_a_notebook_reading_an_earlier_result_runs_after_it_in_its_stream():
    """08 prints 07's recorded run: both in stream A, 07 first, in make test's plan and make course's. (06 and 07
    print 05's and 06's if present: 05 comes first in both stream A's.)"""
    stream_a = [_number(p) for p in testrun.plan()[1]]
    assert stream_a.index("07") < stream_a.index("08")
    course_a = [p.name[:2] for p in testrun.split(notebook_files(), testrun.COURSE_STREAM_A)[1]]
    assert course_a.index("05") < course_a.index("07") < course_a.index("08")
    assert testrun.split(notebook_files(), testrun.COURSE_STREAM_A)[0] == testrun.split(notebook_files())[0]


def test_a_plan_naming_a_missing_notebook_is_refused(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01_x.ipynb").write_text("{}")
    try:
        testrun.plan(tmp_path)
    except FileNotFoundError as e:
        assert "02" in str(e)
    else:
        raise AssertionError("a plan naming missing notebooks was accepted")


def test_the_makefile_runs_the_driver():
    assert "-m course_tools.testrun" in (repo_root() / "Makefile").read_text(encoding="utf-8")


def _fake_runner(monkeypatch, tmp_path):
    """course_tools.runner with each notebook's run replaced by a record of (name, threads, start, end)."""
    import time

    from course_tools import runner
    calls = []

    def run_one(nb, out_dir, timeout, env, say):
        start = time.time()
        time.sleep(0.2)
        calls.append((nb.name[:2], None if env is None else env["COURSE_THREADS"], start, time.time()))
        return {"seconds": 0.2, "peak_ram_mb": 1.0}

    monkeypatch.setattr(runner, "_run_one", run_one)
    monkeypatch.setattr(runner, "load_results", lambda: [])
    monkeypatch.setattr("course_tools.bench.matmul_gflops", lambda: 70.0)
    return runner, calls


def test_make_course_runs_phase_1_first_then_two_streams_at_one_thread(monkeypatch, tmp_path):
    runner, calls = _fake_runner(monkeypatch, tmp_path)
    notebooks = notebook_files()
    assert runner.run_course(notebooks, tmp_path / "build", timeout=10, streams=2) == 0
    phase_1 = [c for c in calls if c[0] in testrun.PHASE_1]
    later = [c for c in calls if c[0] not in testrun.PHASE_1]
    assert [c[0] for c in phase_1] == list(testrun.PHASE_1) and all(c[1] is None for c in phase_1)
    assert sorted(c[0] for c in calls) == [p.name[:2] for p in notebooks]          # every notebook once
    assert min(c[2] for c in later) >= max(c[3] for c in phase_1)                 # phase 2 after phase 1
    assert all(c[1] == "1" for c in later)                                         # at one thread each
    a = [c for c in later if c[0] in testrun.COURSE_STREAM_A]
    b = [c for c in later if c[0] not in testrun.COURSE_STREAM_A]
    assert [c[0] for c in a] == list(testrun.COURSE_STREAM_A)                       # in order: 08 after 07
    assert a[0][2] < b[0][3] and b[0][2] < a[0][3]                                  # side by side
    assert "two at a time" in (tmp_path / "build" / "RESULTS.md").read_text(encoding="utf-8")


def test_make_course_with_one_stream_or_one_notebook_runs_them_in_turn(monkeypatch, tmp_path):
    runner, calls = _fake_runner(monkeypatch, tmp_path)
    notebooks = notebook_files()
    runner.run_course(notebooks, tmp_path / "serial", timeout=10, streams=1)
    assert [c[0] for c in calls] == [p.name[:2] for p in notebooks] and {c[1] for c in calls} == {None}
    calls.clear()
    runner.run_course([n for n in notebooks if n.name.startswith("06")], tmp_path / "one", timeout=10, streams=2)
    assert [(c[0], c[1]) for c in calls] == [("06", None)]                       # alone: the profile's threads


def test_two_streams_by_default_on_a_cpu_one_with_a_gpu_or_when_told(monkeypatch):
    import torch
    monkeypatch.delenv("COURSE_STREAMS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert testrun.default_streams("COURSE_STREAMS") == 2
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert testrun.default_streams("COURSE_STREAMS") == 1
    monkeypatch.setenv("COURSE_STREAMS", "2")
    assert testrun.default_streams("COURSE_STREAMS") == 2
    monkeypatch.setenv("COURSE_STREAMS", "3")
    with pytest.raises(ValueError, match="COURSE_STREAMS"):
        testrun.default_streams("COURSE_STREAMS")
