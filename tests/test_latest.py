"""``make latest``'s report logic (course_tools/latest.py), on a junit file written here: no environment is built."""
import json
from pathlib import Path

from course_tools import latest

ROOT = Path(__file__).resolve().parents[1]

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="4">
<testcase classname="tests.test_losses" file="tests/test_losses.py" name="test_selective_log_softmax_matches_trl[float32]"
  time="0.1"/>
<testcase classname="tests.test_grpo" file="tests/test_grpo.py" name="test_trl_grpo_parity_on_its_own_batch" time="2">
  <failure message="AssertionError: Tensor-likes are not close!&#10;&#10;Mismatched elements: 3 / 8">long trace</failure>
</testcase>
<testcase classname="tests.test_dpo" file="tests/test_dpo.py" name="test_simpo_matches_trl_cpo_loss" time="0">
  <error message="">tests/test_dpo.py:61: in test_simpo_matches_trl_cpo_loss
    from trl.experimental.cpo import CPOTrainer
E   ImportError: cannot import name 'CPOTrainer'
more</error>
</testcase>
<testcase classname="tests.test_gpu_drift" name="test_vllm" time="0">
  <skipped type="pytest.skip" message="needs the gpu extra (unsloth, vllm): run `make drift`">skip</skipped>
</testcase>
</testsuite></testsuites>
"""


def _run(tmp_path, versions, xml=JUNIT, rest="newest", pins=()):
    path = tmp_path / "run.xml"
    path.write_text(xml, encoding="utf-8")
    cases = latest.parse_junit(path)
    return {"versions": versions, "rest": rest, "pins": list(pins), "counts": latest.counts(cases), "tests": cases}


def test_parse_junit_reads_each_outcome_and_the_first_line_of_its_cause(tmp_path):
    cases = {c["test"]: c for c in _run(tmp_path, {})["tests"]}
    assert cases["tests/test_losses.py::test_selective_log_softmax_matches_trl[float32]"] == {
        "test": "tests/test_losses.py::test_selective_log_softmax_matches_trl[float32]", "outcome": "passed",
        "cause": ""}
    assert cases["tests/test_grpo.py::test_trl_grpo_parity_on_its_own_batch"]["cause"] == \
        "AssertionError: Tensor-likes are not close!"
    error = cases["tests/test_dpo.py::test_simpo_matches_trl_cpo_loss"]
    assert error["outcome"] == "error" and error["cause"] == "ImportError: cannot import name 'CPOTrainer'"
    skipped = cases["tests/test_gpu_drift.py::test_vllm"]       # no file attribute: the path from the class name
    assert skipped["outcome"] == "skipped" and skipped["cause"].startswith("needs the gpu extra")
    assert latest.counts(list(cases.values())) == {"passed": 1, "failed": 1, "error": 1, "skipped": 1}


def test_the_report_sets_runs_side_by_side_and_names_what_differs(tmp_path):
    old = _run(tmp_path, {"trl": "1.15.0", "transformers": "5.17.0"}, JUNIT.replace(
        '<failure message="AssertionError: Tensor-likes are not close!&#10;&#10;Mismatched elements: 3 / 8">'
        'long trace</failure>', ""), rest="lock")
    new = _run(tmp_path, {"trl": "1.16.0", "transformers": "5.25.0"}, pins=["trl==1.16.0"])
    folder = tmp_path / "latest"
    folder.mkdir()
    for name, run in (("b", new), ("a", old)):
        (folder / f"{name}.json").write_text(json.dumps(run), encoding="utf-8")
    runs = latest.load_runs(folder)
    assert [r["versions"]["trl"] for r in runs] == ["1.15.0", "1.16.0"]      # ordered by version, not file name
    md = latest.report_markdown(runs)
    assert "1 = TRL 1.15.0 (transformers 5.17.0, the rest at the lock); 2 = TRL 1.16.0" in md
    assert "`make latest REST=lock`" in md and "`make latest TRL=1.16.0`" in md
    assert "| `tests/test_grpo.py::test_trl_grpo_parity_on_its_own_batch` | passed | failed |" in md
    assert "| `tests/test_grpo.py` | 1/1 | 0/1 |" in md
    assert ("- `tests/test_grpo.py::test_trl_grpo_parity_on_its_own_batch` (failed): AssertionError: Tensor-likes are "
            "not close!") in md
    assert "| 2 | 0 | 1 | 1 | 2/3 |" in md            # run 1's counts and its TRL checks (the skip is not one)


def test_the_lanes_requirements_free_its_libraries_and_keep_the_rest():
    reqs = latest.requirements(ROOT / "pyproject.toml", ["trl==1.15.0"])
    assert "trl==1.15.0" in reqs and "transformers" in reqs and "peft" in reqs
    assert not any(latest.requirement_name(r) == "torch" for r in reqs)           # installed first, pinned
    assert "nbval==0.11.0" in reqs                                                 # the dev extra, as pinned
    held = latest.lock_constraints(ROOT / "requirements-lock.txt", ["trl==1.16.0"])
    names = {latest.requirement_name(line) for line in held.splitlines()}
    assert "trl" not in names and "torch" not in names and {"transformers", "peft", "huggingface-hub"} <= names
    assert latest.make_command(["trl==1.16.0", "transformers==5.17.0"], True) == \
        'make latest TRL=1.16.0 PINS="transformers==5.17.0" REST=lock'
