"""The notebooks' Markdown states claims that hold at every seed on every machine; this run's figures are printed by
code beside it (claims in prose, numbers in outputs).

A sentence of Markdown fails here when it names a CPU or a machine, gives a date, cites a seed by number, quotes a
range of percentages (another run's figures), or types a decimal figure that is neither a constant of the course's
design nor a cited paper's number. Those two kinds are allowlisted, each with its source, in
``tests/data/prose_allowlist/<notebook>.json`` (``_course.json``: every notebook's), ``{"0.2": "GRPO's clip ε,
GRPORecipe.epsilon (TRL's default)"}``; the course holds at most :data:`MAX_DECIMAL_PERCENTAGES` typed decimal
percentages in all. Fenced code and LaTeX math are not prose and are not read.
"""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ALLOWLIST = {p.stem: json.loads(p.read_text(encoding="utf-8"))
             for p in sorted((ROOT / "tests" / "data" / "prose_allowlist").glob("*.json"))}
MAX_DECIMAL_PERCENTAGES = 20

MACHINE = re.compile(r"\b(EPYC|Xeon|Ryzen|Threadripper|Intel|AMD|AVX-?2|AVX-?512\w*|GFLOP/?s?|\d+-core|KVM)\b", re.I)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b(January|February|March|April|May|June|July|August|September|October|"
                  r"November|December) 20\d\d\b")
SEED = re.compile(r"\bseeds? (?:\d|=)|\bat seeds?\b \d|\bseeds? [\d, /and]+\d")
PERCENT_RANGE = re.compile(r"\d+(?:\.\d+)?\s*[–-]\s*\d+(?:\.\d+)?\s*%")
DECIMAL = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?:e-?\d+)?%?(?![\w.])")


def prose(markdown: str) -> str:
    """Markdown without fenced code, LaTeX math, HTML comments and link targets: the sentences a reader reads."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"(?<!\\)\$[^$\n]+?(?<!\\)\$", " ", text)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    return re.sub(r"\]\([^)]*\)", "]", text)


def findings(name: str, text: str, allowed: dict) -> list[str]:
    """Every figure or name in ``text`` (one notebook's prose) that the rules above reject."""
    found = [f"machine: {m.group(0)!r}" for m in MACHINE.finditer(text)]
    found += [f"date: {m.group(0)!r}" for m in DATE.finditer(text)]
    found += [f"seed cited: {m.group(0)!r}" for m in SEED.finditer(text)]
    found += [f"range of percentages: {m.group(0)!r}" for m in PERCENT_RANGE.finditer(text)]
    found += [f"decimal figure: {m.group(0)!r}" for m in DECIMAL.finditer(text) if m.group(0) not in allowed]
    return [f"{name}: {f}" for f in found]


def markdown_of(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_the_rules_can_fail():
    assert findings("x", prose("on a 2-core AVX-512 EPYC at seed 1234, 2026-12-05: 35.3% → 61.3%, 34–54%"), {})
    assert len(findings("x", "ε = 0.2 clips the ratio", {})) == 1
    assert not findings("x", "ε = 0.2 clips the ratio", {"0.2": "design"})
    assert not findings("x", prose("accuracy rises; $\\epsilon = 0.2$ and\n```\nx = 3.5\n```"), {})
    assert not findings("x", "GRPO samples G = 8 completions per prompt; `Params(seed=7)` is another run", {})


def test_every_allowlisted_figure_has_a_source():
    for name, figures in ALLOWLIST.items():
        for figure, source in figures.items():
            assert isinstance(source, str) and len(source) > 10, f"{name}: {figure!r} needs its source"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_markdown_names_no_machine_date_seed_or_run_figure(path):
    allowed = {**ALLOWLIST.get("_course", {}), **ALLOWLIST.get(path.stem, {})}
    found = findings(path.stem, prose(markdown_of(path)), allowed)
    assert not found, "claims in prose, numbers in outputs:\n" + "\n".join(found)


def test_at_most_twenty_typed_decimal_percentages():
    typed = [m.group(0) for p in NOTEBOOKS for m in re.finditer(r"\d+\.\d+%", prose(markdown_of(p)))]
    assert len(typed) <= MAX_DECIMAL_PERCENTAGES, typed
