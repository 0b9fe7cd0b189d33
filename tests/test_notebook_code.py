"""What the notebooks' code may hold: the lesson, not the plumbing around it.

* no function that measures a model defined in a notebook (they live in ``course_utils``, documented and tested);
* no interpretation assembled from ``if``/``else`` branches of printed text: prose is Markdown.
"""
import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
# calls that measure a model: a notebook calls them, it does not wrap them in its own helper
MEASURING = {"evaluate", "evaluate_arithmetic", "pass_at_k", "kl_to_reference", "greedy_accuracy", "score_texts",
             "evaluate_tool_use", "batch_logps", "logp_by_source"}
PRINTING = {"print", "display", "Markdown", "show_markdown"}


def _code(path: Path) -> list[tuple[int, ast.Module]]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            lines = [line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!"))]
            out.append((i, ast.parse("\n".join(lines))))
    return out


def _calls(node: ast.AST) -> set[str]:
    return {(n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", ""))
            for n in ast.walk(node) if isinstance(n, ast.Call)}


def measuring_helpers(tree: ast.AST) -> list[str]:
    """Functions defined in the code that call a measuring function."""
    return [node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _calls(node) & MEASURING]


def prose_branches(tree: ast.AST) -> list[int]:
    """Lines of ``if`` statements whose branches only print text, and of printed f-strings with a conditional."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.orelse and not (_calls(node.test) & {"calibrated", "stage_exists"}):
            branches = [node.body, node.orelse]
            if all(stmts and all(isinstance(s, ast.Expr) and _calls(s) & PRINTING for s in stmts)
                   for stmts in branches):
                found.append(node.lineno)
        if isinstance(node, ast.Call) and _calls(node) & PRINTING and any(
                isinstance(sub, ast.IfExp) for arg in node.args for sub in ast.walk(arg)
                if any(isinstance(j, ast.JoinedStr) for j in ast.walk(arg))):
            found.append(node.lineno)
    return sorted(set(found))


def test_the_rules_can_fail():
    helper = ast.parse("def measure(m):\n    return evaluation.evaluate_arithmetic(m, tok, n=3, max_new_tokens=4)\n")
    assert measuring_helpers(helper) == ["measure"]
    assert not measuring_helpers(ast.parse("ev = experiment.evaluate(m, tok, profile)"))
    prose = ast.parse("if gain > 0.1:\n    print(f'it helped by {gain}')\nelse:\n    print('it did not help')\n")
    assert prose_branches(prose) == [1]
    assert prose_branches(ast.parse("print(f\"{'more' if a > b else 'less'} than before\")")) == [1]
    check = ("if experiment.calibrated(P, Params, profile):\n    assert gain > 0.1\n"
             "else:\n    print(experiment.not_checked(P, Params, profile))\n")
    assert not prose_branches(ast.parse(check))
    assert not prose_branches(ast.parse("print(f'{x:.1%}')"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_measuring_helper_or_prose_branch_in_a_notebook(path):
    helpers = {i: measuring_helpers(tree) for i, tree in _code(path) if measuring_helpers(tree)}
    branches = {i: prose_branches(tree) for i, tree in _code(path) if prose_branches(tree)}
    assert not helpers, f"measuring helpers defined in cells {helpers}: use experiment.evaluate or course_utils"
    assert not branches, f"prose assembled from branches in cells (lines) {branches}: write it as Markdown"
