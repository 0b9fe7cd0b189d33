"""make test's plan (course_utils.testrun): every notebook once, and each after what it reads."""
import json
import re

from course_utils import testrun
from course_utils.paths import notebook_files, repo_root
from course_utils.stages import STAGES


def _number(path: str) -> str:
    return path.split("/")[-1][:2]


def test_the_plan_runs_every_notebook_once_and_the_unit_tests():
    phase_1, stream_a, stream_b = testrun.plan()
    planned = [_number(p) for p in phase_1 + stream_a + stream_b if p.startswith("notebooks/")]
    assert sorted(planned) == [p.name[:2] for p in notebook_files()]
    assert len(planned) == len(set(planned))
    assert stream_b[0] == "tests" and "tests" not in phase_1 + stream_a


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
    """08 prints 07's recorded run: both in stream A, 07 first. (06 and 07 print 05's and 06's if present.)"""
    stream_a = [_number(p) for p in testrun.plan()[1]]
    assert stream_a.index("07") < stream_a.index("08")


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
    assert "-m course_utils.testrun" in (repo_root() / "Makefile").read_text(encoding="utf-8")
