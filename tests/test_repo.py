"""Repository-level rules: notebooks ship without outputs, the README map is current, CI runs the tests."""
import json
import re
from pathlib import Path

import pytest

from course_utils.course import NOTEBOOKS, notebook_table

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_FILES = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.name)
def test_notebook_committed_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None, f"{path.name}: strip outputs"


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.name)
def test_notebook_frame(path):
    """Objectives first; summary and exercises with collapsed solutions last; no unsafe loading."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    first = "".join(nb["cells"][0]["source"])
    assert "What you will learn" in first and "Runtime" in first
    assert "## Summary" in text and "## Exercises" in text and "<details>" in text
    assert "trust_remote_code=True" not in text and "torch.load(" not in text


def test_notebook_list_matches_files():
    assert [nb.filename for nb in NOTEBOOKS] == [p.name for p in NOTEBOOK_FILES]


def test_readme_map_is_current():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert notebook_table() in readme, "README notebook map is stale: paste course.notebook_table()"


def test_readme_quick_start_has_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(make \w+)$", quick, flags=re.M)
    assert commands == ["make course", "make test"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test$", ci, flags=re.M)
