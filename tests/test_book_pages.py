"""The book's pages without a browser: cleaning an executed notebook, the front page, the run box, the install cells,
and the progress bars and quiet blocks that keep the executed copies readable (tests/test_book.py reads the site)."""
import json
from pathlib import Path

import pytest

from course_utils import course, progress
from course_tools import book
from course_utils.course import NOTEBOOKS

ROOT = Path(__file__).resolve().parents[1]
GRPO = next(nb for nb in NOTEBOOKS if nb.number == "07")


def _bar_state(model_id="box", value=50, maximum=50, left="PPO: 100%", right="\u200750/50\u2007[00:10&lt;00:00]"):
    return {
        model_id: {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_l", "IPY_MODEL_b", "IPY_MODEL_r"]}},
        "l": {"model_name": "HTMLModel", "state": {"value": left}},
        "b": {"model_name": "FloatProgressModel", "state": {"value": value, "max": maximum}},
        "r": {"model_name": "HTMLModel", "state": {"value": right}},
    }


def _widget_output(model_id="box", fallback="PPO:   0%|          | 0/50 [00:00<?, ?it/s]"):
    return {"output_type": "display_data", "metadata": {},
            "data": {book.WIDGET_VIEW: {"model_id": model_id, "version_major": 2, "version_minor": 0},
                     "text/plain": fallback}}


def _notebook(outputs, state=None):
    nb = {"cells": [{"cell_type": "code", "source": "x", "metadata": {}, "outputs": outputs, "execution_count": 1}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    if state is not None:
        nb["metadata"]["widgets"] = {book.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    return nb


def test_carriage_returns_leave_what_a_terminal_shows():
    assert book.collapse_carriage_returns("\rPPO:  10%\rPPO: 100%|█| 50/50\nnext") == "PPO: 100%|█| 50/50\nnext"
    assert book.collapse_carriage_returns("a\n\rgenerate 3/9\r            \rb") == "a\nb"   # a bar that erased itself
    assert book.collapse_carriage_returns("plain\ntext\n") == "plain\ntext\n"


def test_a_widget_bar_shows_its_final_state():
    text = book.widget_text("box", _bar_state())
    assert text == "PPO: 100%|██████████| 50/50 [00:10<00:00]"
    assert book.widget_text("box", _bar_state(value=25)).startswith("PPO: 100%|█████     |")
    assert book.widget_text("gone", _bar_state()) is None


def test_clean_notebook_replaces_bars_merges_streams_and_drops_the_widget_state():
    outputs = [_widget_output(), _widget_output("closed"),
               {"output_type": "stream", "name": "stdout", "text": "\x1b[1mbold\x1b[0m "},
               {"output_type": "stream", "name": "stdout", "text": ["done\n"]},
               {"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["\x1b[31mred\x1b[0m"]}]
    nb = _notebook(outputs, _bar_state())
    cleaned = book.clean_notebook(nb)
    outs = cleaned["cells"][0]["outputs"]
    assert outs[0] == {"output_type": "stream", "name": "stdout",
                       "text": "PPO: 100%|██████████| 50/50 [00:10<00:00]\nbold done\n"}
    assert outs[1]["traceback"] == ["red"] and len(outs) == 2        # the closed bar is gone
    assert "widgets" not in cleaned["metadata"] and "widgets" in nb["metadata"]   # a copy: the input is untouched


def test_clean_notebook_keeps_a_bars_text_where_no_state_was_saved():
    outs = book.clean_notebook(_notebook([_widget_output()]))["cells"][0]["outputs"]
    assert outs[0]["output_type"] == "stream" and outs[0]["text"].startswith("PPO:   0%")
    assert book.WIDGET_VIEW not in json.dumps(outs)


def test_links_to_notebooks_outside_the_book_become_text():
    chapters = [nb for nb in NOTEBOOKS if nb.number in ("00", "07")]
    text = "| [Setup](00_setup_and_map.ipynb) | [SFT](02_sft.ipynb) | [site](https://x.org/a.ipynb) |"
    assert book.link_chapters(text, chapters) == "| [Setup](00_setup_and_map.ipynb) | SFT | [site](https://x.org/a.ipynb) |"


def test_hosted_links_follow_the_course_repo_setting(monkeypatch):
    monkeypatch.setattr(course, "COURSE_REPO", "")
    monkeypatch.delenv("COURSE_REPO", raising=False)
    assert book.course_repo() == "" and book.hosted_url(GRPO) is None
    assert "upload `notebooks/07_grpo.ipynb`" in book.run_box(GRPO)
    monkeypatch.setenv("COURSE_REPO", "https://github.com/someone/course.git")
    assert book.course_repo() == "someone/course"
    url = book.hosted_url(GRPO)
    assert url.endswith("github/someone/course/blob/main/notebooks/07_grpo.ipynb")
    box = book.run_box(GRPO)
    assert f"]({url})" in box and "make lab" in box and "free CPU runtime" in box
    capstone = next(nb for nb in NOTEBOOKS if nb.number == "11")
    assert "GPU runtime" in book.hosted_runtime(capstone)
    table = course.notebook_table()
    assert f"| [CPU]({url}) |" in table and "| [GPU](" in table   # the map links every chapter too


def test_front_page_has_the_cover_the_map_the_results_and_the_contents(tmp_path):
    executed = tmp_path / "notebooks"
    executed.mkdir()
    chapters = [nb for nb in NOTEBOOKS if nb.number in ("00", "07")]
    page = book.front_page(chapters, executed)
    assert "_static/pipeline.png" in page and "No `RESULTS.md`" in page
    assert "[GRPO: group relative policy optimisation](07_grpo.ipynb)" in page
    assert "[Supervised fine-tuning](02_sft.ipynb)" not in page and "| 02 | Supervised fine-tuning |" in page
    assert "00_setup_and_map\n07_grpo\n```" in page and "glossary\nmessages" in page
    (tmp_path / "RESULTS.md").write_text("# Results\n\n| notebook | before | after |\n", encoding="utf-8")
    assert "### Results\n\n| notebook | before | after |" in book.front_page(chapters, executed)


def test_glossary_page_has_every_term_in_both_languages():
    page = book.glossary_page()
    assert all(term.zh in page and term.en.replace("|", r"\|") in page for term in course.GLOSSARY.values())


def test_prepare_writes_the_source_tree(tmp_path):
    executed = tmp_path / "run" / "notebooks"
    executed.mkdir(parents=True)
    nb = json.loads((ROOT / "notebooks" / "04_rl_foundations.ipynb").read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    code[1]["outputs"] = [_widget_output()]
    (executed / "04_rl_foundations.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="make course"):
        book.prepare(executed, tmp_path / "src", ["07"])
    chapters = book.prepare(executed, tmp_path / "src")
    assert [c.number for c in chapters] == ["04"]
    src = tmp_path / "src"
    for name in ("conf.py", "index.md", "glossary.md", "messages.md", "_static/course.css", "_static/pipeline.png"):
        assert (src / name).is_file(), name
    page = json.loads((src / "04_rl_foundations.ipynb").read_text(encoding="utf-8"))
    assert page["cells"][1]["id"] == "run-it-yourself" and "Run it yourself" in page["cells"][1]["source"]
    assert book.WIDGET_VIEW not in json.dumps(page)


def test_sync_install_cells_inserts_once_and_keeps_the_rest(tmp_path):
    (tmp_path / "notebooks").mkdir()
    original = ROOT / "notebooks" / "04_rl_foundations.ipynb"
    nb = json.loads(original.read_text(encoding="utf-8"))
    nb["cells"] = [c for c in nb["cells"] if c.get("id") != book.INSTALL_CELL_ID]   # as before the cell existed
    (tmp_path / "notebooks" / original.name).write_text(json.dumps(nb), encoding="utf-8")
    assert book.sync_install_cells(tmp_path) == [original.name]
    synced = json.loads((tmp_path / "notebooks" / original.name).read_text(encoding="utf-8"))
    assert len(synced["cells"]) == len(nb["cells"]) + 1 and synced["cells"][1]["id"] == book.INSTALL_CELL_ID
    assert "".join(synced["cells"][1]["source"]) == book.install_cell()
    assert synced["cells"][1]["metadata"] == book.INSTALL_CELL_METADATA
    assert book.sync_install_cells(tmp_path) == []    # already in place: nothing changes
    synced["cells"][1]["metadata"] = {}                 # a cell that lost its metadata gets it back
    (tmp_path / "notebooks" / original.name).write_text(json.dumps(synced), encoding="utf-8")
    assert book.sync_install_cells(tmp_path) == [original.name]


def test_text_progress_bars_write_plain_text_to_stdout(monkeypatch, capsys):
    monkeypatch.setenv(progress.TEXT_PROGRESS_ENV, "1")
    assert progress.text_mode()
    for _ in progress.trange(3, desc="steps", mininterval=0):
        pass
    out = capsys.readouterr().out
    assert "steps: 100%" in book.collapse_carriage_returns(out) and "3/3" in out
    monkeypatch.setenv(progress.TEXT_PROGRESS_ENV, "0")
    assert not progress.text_mode()


def test_transformers_errors_only_restores_the_verbosity():
    from transformers.utils import logging as hf_logging
    from course_utils.modeling import transformers_errors_only
    before = hf_logging.get_verbosity()
    with transformers_errors_only():
        assert hf_logging.get_verbosity() == hf_logging.ERROR
    assert hf_logging.get_verbosity() == before
    with pytest.raises(ValueError), transformers_errors_only():
        raise ValueError
    assert hf_logging.get_verbosity() == before


def test_the_readme_shows_the_pipeline_figure_the_book_draws():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"]({book.PIPELINE_FIGURE})" in readme and (ROOT / book.PIPELINE_FIGURE).is_file()
    assert "make book" in readme


def test_the_committed_pipeline_figure_is_what_plot_pipeline_draws_now(tmp_path):
    """Redraw after changing course.NOTEBOOKS: python -m course_tools.book --figure."""
    import matplotlib.image as mpimg
    import numpy as np
    fresh = mpimg.imread(book.draw_pipeline_figure(tmp_path / "pipeline.png"))
    committed = mpimg.imread(ROOT / book.PIPELINE_FIGURE)
    assert fresh.shape == committed.shape, "redraw it: python -m course_tools.book --figure"
    assert float(np.abs(fresh - committed).mean()) < 0.01, "redraw it: python -m course_tools.book --figure"


def test_a_backbone_under_a_new_head_loads_quietly_and_a_real_gap_is_still_reported(tmp_path, capsys):
    """transformers' LOAD REPORT of a head put on a language model is the course's intent and is silenced; the same
    class loaded from a checkpoint saved under it is not a head swap, so a report there would still show."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
    from course_utils.modeling import build_model, save_checkpoint, train_tokenizer
    from course_utils.stages import _is_head_swap, load_checkpoint
    tokenizer = train_tokenizer()
    path = save_checkpoint(build_model(tokenizer, seed=0, layers=1), tokenizer, tmp_path / "lm")
    assert _is_head_swap(path, AutoModelForSequenceClassification)
    assert not _is_head_swap(path, AutoModelForCausalLM)
    assert _is_head_swap(None, AutoModelForSequenceClassification) and not _is_head_swap(None, AutoModelForCausalLM)
    model, _ = load_checkpoint(path, AutoModelForSequenceClassification, num_labels=1)
    assert "LOAD REPORT" not in capsys.readouterr().err
    head_path = save_checkpoint(model, tokenizer, tmp_path / "rm")
    assert not _is_head_swap(head_path, AutoModelForSequenceClassification)


def test_the_calculator_tool_never_warns(recwarn):
    from course_utils.agentic import calc
    assert calc("3a") == "error" and calc("2+3") == "5"
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]
