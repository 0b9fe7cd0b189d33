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
def test_every_cell_has_its_own_id(path):
    """nbformat 4.5 wants an id on every cell (nbval warns that a missing one will become an error)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    ids = [cell.get("id") for cell in nb["cells"]]
    assert (nb["nbformat"], nb["nbformat_minor"]) >= (4, 5) and None not in ids and len(set(ids)) == len(ids), path.name


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.name)
def test_notebook_frame(path):
    """Objectives first; summary and exercises with collapsed solutions last; no unsafe loading."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    first = "".join(nb["cells"][0]["source"])
    assert "What you will learn" in first and "Runtime" in first
    assert "## Summary" in text and "## Exercises" in text and "<details>" in text
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert not unsafe_calls(code), f"{path.name}: {unsafe_calls(code)}"


def unsafe_calls(source: str) -> list[str]:
    """Calls that run a model's remote code or unpickle: ``trust_remote_code`` set to anything but a literal False,
    ``torch.load``, ``pickle.load(s)``, however they are spaced or wrapped (read from the syntax tree, not the text)."""
    import ast
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]  # notebook magics
    found = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name in ("torch.load", "pickle.load", "pickle.loads"):
            found.append(name)
        for kw in node.keywords:
            if kw.arg == "trust_remote_code" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                found.append(f"trust_remote_code={ast.unparse(kw.value)}")
    return found


def test_the_unsafe_check_can_fail():
    for bad in ("f(x, trust_remote_code = True)", "f(trust_remote_code=\n  True)", "f(trust_remote_code=flag)",
                "torch.load (f)", "pickle.load(fh)"):
        assert unsafe_calls(bad), bad
    assert not unsafe_calls("f(trust_remote_code=False); print('trust_remote_code=True is refused')")


def test_no_unsafe_loading_in_the_package_or_scripts():
    for path in [*ROOT.glob("course_utils/*.py"), *ROOT.glob("scripts/**/*.py")]:
        found = unsafe_calls(path.read_text(encoding="utf-8"))
        assert not found, f"{path.relative_to(ROOT)}: {found}"


def test_built_notebooks_match_the_files():
    """NOTEBOOKS lists every notebook, built or planned; the built ones are exactly the files."""
    assert [nb.filename for nb in NOTEBOOKS if nb.built] == [p.name for p in NOTEBOOK_FILES]
    assert [nb.number for nb in NOTEBOOKS] == [f"{i:02d}" for i in range(len(NOTEBOOKS))]
    assert len({nb.slug for nb in NOTEBOOKS}) == len(NOTEBOOKS)
    assert all(re.fullmatch(r"[a-z0-9_]+", nb.slug) and nb.short for nb in NOTEBOOKS)
    assert all(nb.cpu_minutes is None or nb.cpu_minutes > 0 for nb in NOTEBOOKS)
    assert all(nb.cpu_minutes is not None for nb in NOTEBOOKS if nb.built)


def test_readme_map_is_current():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Notebook map\n", 1)[1].strip("\n")
    table = "\n".join(section.split("\n\n", 1)[0].splitlines())
    assert table == notebook_table(), "README notebook map is stale: paste course.notebook_table()"


@pytest.mark.parametrize("prefix, base", [("notebooks/", ROOT), ("", ROOT / "notebooks")])
def test_notebook_table_links_resolve(prefix, base):
    table = notebook_table(link_prefix=prefix)
    links = re.findall(r"\]\(([^)]+)\)", table)
    assert links == [prefix + nb.filename for nb in NOTEBOOKS if nb.built]
    assert all((base / link).is_file() for link in links)
    planned = [nb for nb in NOTEBOOKS if not nb.built]
    assert all(f"| {nb.number} | {nb.title} *(coming)* |" in table for nb in planned)
    assert "coming" not in notebook_table(planned=False)


def test_notebook_00_links_from_its_own_folder():
    nb = json.loads((ROOT / "notebooks" / "00_setup_and_map.ipynb").read_text(encoding="utf-8"))
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert 'notebook_table(link_prefix="")' in code


def test_readme_quick_start_has_two_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(make \w+)$", quick, flags=re.M)
    assert commands == ["make course", "make test"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test$", ci, flags=re.M)
