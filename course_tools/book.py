"""``make book``: the course as a static site, built from the notebooks a run has executed.

The notebooks are committed without outputs; ``make course`` writes executed copies to ``build/notebooks/``. This
module turns those copies into a book with **Sphinx + MyST-NB + sphinx-book-theme**, the Executable Books stack that
Jupyter Book 1 is built on (``docs/book.md`` says why this one):

1. :func:`prepare` writes a Sphinx source tree (``build/book-src/``): ``book/``'s committed files (``conf.py``, the
   style sheet, the page on expected messages), a front page (the pipeline figure, the course map, the run's results
   table with the environment it was measured in), the glossary as a page, and one chapter per executed notebook,
   each cleaned for reading by :func:`clean_notebook` and opened by a "Run it yourself" box (:func:`run_box`).
2. :func:`build` runs ``sphinx-build`` on it (no notebook is executed: ``nb_execution_mode = "off"``) and writes
   ``build/book/``, a site that works opened from disk and served by ``python -m http.server``: MathJax is a local
   copy (``sphinx-mathjax-offline``), so nothing is fetched from the network.

``python -m course_tools.book [--from build/notebooks] [--out build/book] [--notebooks 00 04]``.
"""
from __future__ import annotations

import argparse
import copy
import html
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from course_utils import course
from course_utils.course import (COURSE_REPO_ENV, NOTEBOOKS, NotebookInfo, course_repo, glossary_table, hosted_url,
                                 install_extra, needs_gpu, notebook_table)
from course_utils.paths import repo_root

BOOK_FILES = "book"
"""the committed part of the book's source, relative to the repository root"""
PIPELINE_FIGURE = "book/_static/pipeline.png"
"""00's pipeline figure, drawn once (:func:`draw_pipeline_figure`): the book's cover and the README's picture"""
EXECUTED_BY_TESTS = "build/test-notebooks"
"""where ``make test`` leaves the notebooks nbval executed (the top-level ``conftest.py`` writes them)"""
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# --- reading an executed notebook ------------------------------------------------------------------------------

def collapse_carriage_returns(text: str) -> str:
    """What a terminal shows of ``text``: on each line only what follows its last carriage return (a text progress
    bar redraws itself so), lines left empty by a bar that erased itself dropped."""
    lines = []
    for line in text.split("\n"):
        parts = line.split("\r")
        kept = next((p for p in reversed(parts) if p.strip()), "") if len(parts) > 1 else line
        if len(parts) > 1 and not kept.strip():
            continue
        lines.append(kept)
    return "\n".join(lines)


def widget_text(model_id: str, state: dict) -> str | None:
    """The final state of a tqdm widget bar as a text bar (``"PPO: 100%|██████████| 50/50 [...]"``), from a
    notebook's saved widget state; None if the widget is not in it (a bar closed with ``leave=False``) or is not a
    bar."""
    box = state.get(model_id)
    if box is None or box.get("model_name") != "HBoxModel":
        return None
    children = [state.get(c.removeprefix("IPY_MODEL_"), {}) for c in box["state"].get("children", [])]
    bars = [c for c in children if c.get("model_name") == "FloatProgressModel"]
    if len(children) != 3 or len(bars) != 1:
        return None
    left, bar, right = (c.get("state", {}) for c in children)
    filled = int(round(10 * bar.get("value", 0) / bar["max"])) if bar.get("max") else 0
    words = lambda s: html.unescape(s.get("value", "")).replace("\u2007", " ").strip()
    return f"{words(left)}|{'█' * filled}{' ' * (10 - filled)}| {words(right)}"


def clean_notebook(nb: dict) -> dict:
    """A copy of executed notebook ``nb`` fit to read as a page.

    - a widget output (a tqdm bar) becomes the text of its saved final state (:func:`widget_text`); a bar that closed
      itself is dropped; without a saved state its text fallback is kept, as plain text;
    - consecutive stream outputs of one cell are merged, terminal colour codes stripped and carriage returns applied,
      so a text bar shows its last state and nothing else;
    - error tracebacks lose their colour codes;
    - the saved widget state is removed (a page would load the widgets' JavaScript from the network to show them).
    """
    nb = copy.deepcopy(nb)
    state = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        outputs = []
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data:
                text = widget_text(data[WIDGET_VIEW].get("model_id", ""), state) if state else None
                if text is None and state:
                    continue   # closed by its loop (leave=False): nothing to show
                text = text if text is not None else "".join(data.get("text/plain", ""))
                out = {"output_type": "stream", "name": "stdout", "text": text + "\n"}
            if out.get("output_type") == "stream":
                text = _ANSI.sub("", "".join(out["text"]) if isinstance(out["text"], list) else out["text"])
                if outputs and outputs[-1].get("output_type") == "stream" and outputs[-1]["name"] == out["name"]:
                    outputs[-1]["text"] += text
                    continue
                out = dict(out, text=text)
            elif out.get("output_type") == "error":
                out = dict(out, traceback=[_ANSI.sub("", line) for line in out.get("traceback", [])])
            outputs.append(out)
        for out in outputs:
            if out.get("output_type") == "stream":
                out["text"] = collapse_carriage_returns(out["text"])
        cell["outputs"] = [o for o in outputs if o.get("output_type") != "stream" or o["text"].strip()]
    return nb


def link_chapters(text: str, chapters: list[NotebookInfo]) -> str:
    """``text`` (Markdown) with its links to course notebooks that are no chapter of this book (``[SFT](02_sft.ipynb)``
    in 00's course map, in a two-chapter book) turned into plain text; a link to a chapter stays, and MyST resolves
    it to the chapter's page."""
    in_book = {nb.filename for nb in chapters}
    course = {nb.filename for nb in NOTEBOOKS}

    def relink(match: re.Match) -> str:
        title, target = match.group(1), match.group(2)
        return title if target in course and target not in in_book else match.group(0)

    return re.sub(r"\[([^\]]*)\]\(([0-9]{2}_[a-z0-9_]+\.ipynb)\)", relink, text)


# --- the pages ---------------------------------------------------------------------------------------------------

def hosted_runtime(nb: NotebookInfo) -> str:
    """Which free hosted runtime suits ``nb``: the GPU capstone wants a GPU; every other chapter runs on a CPU one."""
    if needs_gpu(nb):
        return ("a GPU runtime for unsloth + vLLM (on a CPU runtime it runs the tiny model's path with TRL + PEFT, "
                "which proves the recipe and not the speed)")
    return "a free CPU runtime is enough (the course's tiny model; the stages it needs are built first if missing)"


def run_box(nb: NotebookInfo, repo: str | None = None) -> str:
    """The "Run it yourself" box a chapter opens with: locally, in JupyterLab, and on a hosted notebook service."""
    url = hosted_url(nb, repo)
    hosted = (f"[open `{nb.filename}` on a hosted notebook service]({url}); its first cell installs the course" if url
              else f"upload `notebooks/{nb.filename}` to a hosted notebook service and set `COURSE_REPO` in its first "
                   f"cell to the git URL you cloned the course from: that cell then installs the course (a book built "
                   f"with `{COURSE_REPO_ENV}=owner/name` links the notebook here)")
    return "\n".join([
        ":::{admonition} Run it yourself", ":class: tip",
        f"- **Locally:** `git clone` the course, then `make course` runs every chapter headless, or "
        f"`python -m course_tools.runner notebooks/{nb.filename}` this one.",
        f"- **JupyterLab:** `make lab` and open `notebooks/{nb.filename}`.",
        f"- **Hosted:** {hosted}. Runtime: {hosted_runtime(nb)}.",
        f"- What you see below is one run's output (the front page says where it ran); your figures will differ a "
        f"little, and the prose says what held on every seed tried.", ":::", ""])


def results_section(executed_dir: Path) -> str:
    """The run's results table and the environment it was measured in: ``RESULTS.md`` beside the executed
    notebooks (``make course`` writes it), or a sentence saying there is none."""
    results = executed_dir.parent / "RESULTS.md"
    if not results.is_file():
        return "*No `RESULTS.md` beside these notebooks: the run that executed them wrote no results table.*\n"
    text = results.read_text(encoding="utf-8")
    return re.sub(r"^#+ ", "### ", text, flags=re.M)   # its headings sit under the front page's own


def front_page(chapters: list[NotebookInfo], executed_dir: Path) -> str:
    """The book's front page: the cover figure, the course map (chapters linked), the results, the table of
    contents."""
    course_map = link_chapters(notebook_table(link_prefix="", planned=True), chapters)
    toc = "\n".join(["```{toctree}", ":maxdepth: 1", ":caption: Chapters", "",
                     *[nb.name for nb in chapters], "```", "",
                     "```{toctree}", ":maxdepth: 1", ":caption: Reference", "", "glossary", "messages", "```"])
    return "\n".join([
        "# LLM post-training, from scratch and for real", "",
        "Pretrain → SFT → reward model → RL basics → PPO → DPO → GRPO → the R1 pipeline → distillation → "
        "inference-time scaling → Qwen3 GRPO on a GPU → agentic RL. Every loss is shown as a formula, written from "
        "scratch, checked against TRL on the same tensors, and trained for real on a tiny Qwen3 on a CPU. "
        "Each chapter below is the notebook as it ran, outputs and figures included.", "",
        "```{image} _static/pipeline.png", ":alt: The course pipeline: which chapter trains which stage from which",
        ":width: 100%", "```", "",
        "## The chapters", "", course_map, "",
        "## This run's results", "",
        "What every chapter measured in the run that executed these pages, and the machine and packages it ran on. "
        "The ranges over several seeds are in the repository's docs/results.md.", "",
        results_section(executed_dir), "", toc, ""])


def glossary_page() -> str:
    """The glossary as a page: every term, English and Chinese (中文), with its meaning."""
    return "\n".join(["# Glossary (术语表)", "",
                      "The course's terms in English and Chinese, as the chapters use them.", "",
                      glossary_table(), ""])


# --- building ----------------------------------------------------------------------------------------------------

def chapters_in(executed_dir: Path, numbers: list[str] | None = None) -> list[NotebookInfo]:
    """The course's notebooks that have an executed copy in ``executed_dir`` (those of ``numbers`` only, if given)."""
    chosen = [nb for nb in NOTEBOOKS if nb.built and (executed_dir / nb.filename).is_file()
              and (numbers is None or nb.number in numbers)]
    if not chosen:
        raise FileNotFoundError(f"no executed notebook of the course in {executed_dir}"
                                + (f" among {numbers}" if numbers else "")
                                + ": run `make course` first (it writes build/notebooks/)")
    return chosen


def prepare(executed_dir: Path, src_dir: Path, numbers: list[str] | None = None) -> list[NotebookInfo]:
    """Write the book's Sphinx source tree to ``src_dir`` (emptied first); return its chapters."""
    chapters = chapters_in(executed_dir, numbers)
    if src_dir.exists():
        shutil.rmtree(src_dir)
    shutil.copytree(repo_root() / BOOK_FILES, src_dir)
    repo = course_repo()
    for nb in chapters:
        notebook = clean_notebook(json.loads((executed_dir / nb.filename).read_text(encoding="utf-8")))
        for cell in notebook["cells"]:
            for out in cell.get("outputs", []):
                if "text/markdown" in out.get("data", {}):
                    markdown = out["data"]["text/markdown"]
                    out["data"]["text/markdown"] = link_chapters("".join(markdown) if isinstance(markdown, list)
                                                                 else markdown, chapters)
        box = {"cell_type": "markdown", "id": "run-it-yourself", "metadata": {}, "source": run_box(nb, repo)}
        notebook["cells"].insert(1, box)   # after the title and objectives cell
        (src_dir / nb.filename).write_text(json.dumps(notebook, ensure_ascii=False), encoding="utf-8")
    (src_dir / "index.md").write_text(front_page(chapters, executed_dir), encoding="utf-8")
    (src_dir / "glossary.md").write_text(glossary_page(), encoding="utf-8")
    return chapters


def draw_pipeline_figure(path: Path | None = None) -> Path:
    """Draw 00's pipeline figure (``plotting.plot_pipeline``) to ``path`` (default: :data:`PIPELINE_FIGURE`, the
    committed picture the README shows and the book's cover); ``--figure`` redraws it after ``course.NOTEBOOKS``
    changes, and a test checks that the committed one is what this draws."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from course_utils.plotting import plot_pipeline

    path = path or repo_root() / PIPELINE_FIGURE
    fig, _ = plot_pipeline()
    fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path


def build(executed_dir: Path, out_dir: Path, numbers: list[str] | None = None,
          src_dir: Path | None = None) -> Path:
    """Build the site from the executed notebooks in ``executed_dir`` into ``out_dir`` (emptied first); return the
    path of its front page. Sphinx's warnings are printed; a failed build raises ``RuntimeError``."""
    src_dir = src_dir or out_dir.parent / f"{out_dir.name}-src"
    chapters = prepare(executed_dir, src_dir, numbers)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E",
                           "-d", str(src_dir / "_doctrees"), str(src_dir), str(out_dir)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"sphinx-build failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    if proc.stderr.strip():
        print(proc.stderr.strip())
    print(f"book: {len(chapters)} chapters ({', '.join(nb.number for nb in chapters)}) in {time.time() - t0:.0f} s, "
          f"{site_megabytes(out_dir):.1f} MB: {out_dir / 'index.html'}")
    return out_dir / "index.html"


def install_cell(extra: str = "") -> str:
    """The source of a notebook's first code cell: on a hosted notebook service, where ``course_utils`` is missing, it
    clones the course (env ``COURSE_REPO``, else :data:`course_utils.course.COURSE_REPO`) and installs it with pip (``extra``: an
    optional dependency group, ``"gpu"`` for notebook 11); anywhere the course is installed it does nothing. It
    cannot import the course, so it is plain code, the same in every notebook (``tests/test_repo.py``)."""
    target = f"course[{extra}]" if extra else "course"
    url = f"https://github.com/{course.COURSE_REPO}" if course.COURSE_REPO else ""
    return "\n".join([
        "# Opened on a hosted notebook service without the course? This installs it first (a clone of its repository:",
        "# set COURSE_REPO to its git URL if the line below has none). Where the course is installed it does nothing.",
        "import importlib.util",
        "import os",
        "import subprocess",
        "import sys",
        "",
        'if importlib.util.find_spec("course_utils") is None:',
        f'    COURSE_REPO = os.environ.get("{COURSE_REPO_ENV}", "{url}")',
        "    if not COURSE_REPO:",
        '        raise RuntimeError("course_utils is missing: set COURSE_REPO (env var or this cell) to the course\'s git URL")',
        '    subprocess.run(["git", "clone", "--depth", "1", COURSE_REPO, "course"], check=True)',
        f'    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", "{target}"], check=True)',
        '    sys.path.insert(0, os.path.abspath("course"))',
        '    os.chdir("course/notebooks")   # artifacts/ and data/ are found from the repository',
    ])


INSTALL_CELL_ID = "install-course"
INSTALL_CELL_METADATA = {"jupyter": {"source_hidden": True}, "tags": ["remove-cell"]}
"""the install cell is collapsed in JupyterLab and left out of the book: the first code a learner reads is the lesson's"""
_INSTALL_CELL_STARTS = ("# Opened on a hosted notebook service", "# A fresh hosted GPU notebook")


def _has_install_metadata(cell) -> bool:
    return all(cell.get("metadata", {}).get(key) == value for key, value in INSTALL_CELL_METADATA.items())


def sync_install_cells(root: Path | None = None) -> list[str]:
    """Make every notebook's first code cell :func:`install_cell` with :data:`INSTALL_CELL_METADATA` (inserted
    after the title cell where it is missing, rewritten where it differs); return the notebooks changed."""
    import nbformat
    changed = []
    for nb_info in NOTEBOOKS:
        path = (root or repo_root()) / "notebooks" / nb_info.filename
        if not nb_info.built or not path.is_file():
            continue
        nb = nbformat.read(path, as_version=4)
        source = install_cell(install_extra(nb_info.number))
        code = [c for c in nb.cells if c.cell_type == "code"]
        if code and code[0].source.startswith(_INSTALL_CELL_STARTS):
            if code[0].source == source and _has_install_metadata(code[0]):
                continue
            code[0].source = source
            code[0].metadata.update(INSTALL_CELL_METADATA)
        else:
            cell = nbformat.v4.new_code_cell(source, metadata=dict(INSTALL_CELL_METADATA))
            cell.id = INSTALL_CELL_ID
            nb.cells.insert(1, cell)
        nbformat.write(nb, path)
        changed.append(nb_info.filename)
    return changed


def site_megabytes(out_dir: Path) -> float:
    """The size of the built site in MB."""
    return sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file()) / 1e6


def main(argv: list[str] | None = None) -> int:
    root = repo_root()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="executed", default=str(root / "build" / "notebooks"),
                        help="the executed notebooks (default: make course's build/notebooks)")
    parser.add_argument("--out", default=str(root / "build" / "book"))
    parser.add_argument("--notebooks", nargs="*", help="only these chapters, by number (default: every executed one)")
    parser.add_argument("--screenshots", help="also save PNGs of the front page and of 07 to this folder")
    parser.add_argument("--figure", action="store_true", help=f"redraw {PIPELINE_FIGURE} (the cover and the README's)")
    parser.add_argument("--sync-install-cells", action="store_true",
                        help="write install_cell() into every notebook (after changing course.COURSE_REPO)")
    args = parser.parse_args(argv)
    if args.figure:
        print("drew", draw_pipeline_figure())
        return 0
    if args.sync_install_cells:
        print("install cells written:", sync_install_cells(root) or "none changed")
        return 0
    try:
        index = build(Path(args.executed), Path(args.out), args.notebooks)
    except FileNotFoundError as err:
        print(f"make book: {err}", file=sys.stderr)
        return 1
    if args.screenshots:
        from .browser import Browser
        with Browser(height=1000) as browser:
            for page in ("index.html", "07_grpo.html"):
                if (index.parent / page).is_file():
                    browser.visit((index.parent / page).as_uri())
                    print("screenshot:", browser.screenshot(Path(args.screenshots) / page.replace(".html", ".png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
