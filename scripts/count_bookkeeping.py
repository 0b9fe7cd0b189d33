"""Count the notebook code lines that are bookkeeping rather than the lesson.

    python scripts/count_bookkeeping.py            # a table per notebook and the total
    python scripts/count_bookkeeping.py --json     # the same as JSON

A code line is *bookkeeping* when the statement it belongs to (read from the syntax tree, so a
call spread over five lines counts five) is one of:

* ``import`` — imports;
* ``print`` / ``display`` / ``show_markdown`` / ``Markdown`` calls — printing;
* a string built for display: an f-string or a string joined with ``|`` table cells — tables and text;
* ``Timer()`` and ``.seconds`` bookkeeping, ``record_results`` and the dicts handed to it — timing and recording;
* ``log_history`` filters — log digging;
* ``stage_exists`` / ``P == Params()`` / ``calibrated(`` tests — "may we assert here?" decisions.

Everything else (training calls, losses, the model, the checks' own ``assert``s, plots) is the lesson. The install
cell every notebook opens with (``course.install_cell()``: a hosted notebook service's install step, the same in every
notebook, checked so by ``tests/test_repo.py``) is neither and is not counted.
Foundation III (issue 26) asks that the bookkeeping drop by at least half; this script is the ruler
used before and after.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRINTING = {"print", "display", "show_markdown", "Markdown", "show", "pprint"}
RECORDING = {"record_results", "Timer"}
INSTALL_CELL_START = "# Opened on a hosted notebook service"
CATEGORIES = ("imports", "printing", "text and tables", "timing and recording", "log digging", "assert decisions")


def _names(node: ast.AST) -> set[str]:
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
    return out


def _called(node: ast.AST) -> set[str]:
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def _is_text(node: ast.AST) -> bool:
    """An f-string, or strings holding Markdown table cells."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.JoinedStr):
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "|" in sub.value:
            return True
    return False


def classify(stmt: ast.stmt) -> str | None:
    """The bookkeeping category of one simple statement, or None for the lesson."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return "imports"
    if isinstance(stmt, ast.Assert):
        return None
    called, names = _called(stmt), _names(stmt)
    if isinstance(stmt, ast.If) and ("stage_exists" in called or "calibrated" in called or "Params" in called):
        return "assert decisions"
    if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.FunctionDef, ast.ClassDef, ast.Try)):
        return None  # compound: its body is classified statement by statement
    if called & RECORDING or "seconds" in names and isinstance(stmt, (ast.Assign, ast.AugAssign)):
        return "timing and recording"
    if "log_history" in names:
        return "log digging"
    if isinstance(stmt, ast.Expr) and called & PRINTING:
        return "printing"
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)) and _is_text(stmt):
        return "text and tables"
    return None


def _walk(body: list[ast.stmt], counts: dict[str, int], lines: list[int]):
    for stmt in body:
        span = (stmt.end_lineno or stmt.lineno) - stmt.lineno + 1
        kind = classify(stmt)
        if kind == "assert decisions":      # the test itself; what it guards is classified line by line
            counts[kind] += 1 + (1 if stmt.orelse else 0)
            _walk(stmt.body, counts, lines)
            _walk(stmt.orelse, counts, lines)
            continue
        if kind is not None:
            counts[kind] += span
            continue
        children = [getattr(stmt, f, None) for f in ("body", "orelse", "finalbody", "handlers")]
        children = [c for c in children if c]
        if not children:
            lines[0] += span
            continue
        lines[0] += 1  # the header line of a compound statement
        for child in children:
            for sub in child:
                if isinstance(sub, ast.ExceptHandler):
                    _walk(sub.body, counts, lines)
            _walk([s for s in child if not isinstance(s, ast.ExceptHandler)], counts, lines)


def count_notebook(path: Path) -> dict:
    nb = json.loads(path.read_text(encoding="utf-8"))
    counts = dict.fromkeys(CATEGORIES, 0)
    lesson = [0]
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or "".join(cell["source"]).startswith(INSTALL_CELL_START):
            continue
        source = "\n".join(line for line in "".join(cell["source"]).splitlines()
                           if not line.lstrip().startswith(("%", "!")))
        body = [s for s in ast.parse(source).body]
        _walk(body, counts, lesson)
    book = sum(counts.values())
    return {"notebook": path.stem, "lesson": lesson[0], "bookkeeping": book, **counts,
            "share": book / max(1, book + lesson[0])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = [count_notebook(p) for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
    total = {k: sum(r[k] for r in rows) for k in ("lesson", "bookkeeping", *CATEGORIES)}
    total["share"] = total["bookkeeping"] / max(1, total["bookkeeping"] + total["lesson"])
    if args.json:
        print(json.dumps({"notebooks": rows, "total": total}, indent=1))
        return 0
    head = ["notebook", "lesson", "bookkeeping", "share", *CATEGORIES]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in [*rows, {"notebook": "**total**", **total}]:
        print(f"| {r['notebook']} | {r['lesson']} | {r['bookkeeping']} | {r['share']:.0%} | "
              + " | ".join(str(r[c]) for c in CATEGORIES) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
