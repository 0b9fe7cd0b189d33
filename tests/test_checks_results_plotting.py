import json
import re
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import torch

from course_utils import course, plotting, results
from course_tools import reports
from course_utils.show import compare


def test_compare_passes_and_fails(capsys):
    assert compare("same", torch.ones(3), torch.ones(3)) == 0.0
    assert "exact: True" in capsys.readouterr().out
    compare("close", torch.tensor([1.0]), torch.tensor([1.0 + 1e-9], dtype=torch.float64))
    with pytest.raises(AssertionError, match="max abs diff"):
        compare("far", torch.tensor([1.0]), torch.tensor([1.1]))
    with pytest.raises(AssertionError, match="shapes differ"):
        compare("shape", torch.ones(2), torch.ones(3))
    with pytest.raises(AssertionError, match="NaN"):
        compare("nan", torch.tensor([float("nan")]), torch.tensor([1.0]))


def test_record_and_report(tmp_artifacts):
    path = results.record_results("01_pretrain", {"val_loss": {"before": 6.4, "after": 1.1}}, seed=7, seconds=3.2)
    rec = json.loads(path.read_text())
    assert rec["notebook"] == "01_pretrain" and rec["seed"] == 7 and rec["metrics"]["val_loss"]["after"] == 1.1
    assert rec["peak_ram_mb"] > 0
    table = reports.results_markdown(results.load_results())
    assert "| 01_pretrain | val_loss | 6.4 | 1.1 |" in table


@pytest.mark.parametrize("bad", [{"acc": 0.5}, {"acc": {"before": 1}}, {"acc": {"before": 1, "after": float("nan")}}])
def test_record_rejects_bad_metrics(tmp_artifacts, bad):
    with pytest.raises(ValueError):
        results.record_results("x", bad, seed=1, seconds=1)


def test_plots_draw_what_they_are_given():
    """Each plot holds the data it was handed (the curve smoothed, the bars' heights, the counts, the mask)."""
    import matplotlib.colors as mcolors
    fig, ax = plotting.plot_curves({"a": ([0, 1, 2], [3.0, 2.0, 1.0])}, baselines={"b": 1.5}, window=2)
    curve, baseline = ax.lines
    assert list(curve.get_xdata()) == [0, 1, 2] and list(curve.get_ydata()) == [3.0, 2.5, 1.5]
    assert list(baseline.get_ydata()) == [1.5, 1.5] and [t.get_text() for t in ax.get_legend().texts] == ["a"]
    plt.close(fig)
    fig, ax = plotting.plot_before_after({"acc": {"before": 0.1, "after": 0.9}, "fmt": {"before": 0.5, "after": 1}})
    assert [round(b.get_height(), 6) for b in ax.patches] == [0.1, 0.5, 0.9, 1.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["acc", "fmt"]
    plt.close(fig)
    fig, ax = plotting.plot_histograms({"chosen": [1, 2, 3], "rejected": [0, 1, 1]}, bins=3)
    heights = [b.get_height() for b in ax.patches]
    assert heights == [1, 1, 1, 3, 0, 0], heights  # shared edges 0, 1, 2, 3 (+1e-9): 1 | 2 | 3 and 0, 1, 1 | - | -
    plt.close(fig)
    fig, ax = plotting.plot_token_mask(["a", "b", "\n"], [0, 1, 1])
    colours = [mcolors.to_hex(p.get_facecolor()) for p in ax.patches]
    assert colours == ["#dddddd", "#1f77b4", "#1f77b4"] and [t.get_text() for t in ax.texts] == ["a", "b", "\\n"]
    plt.close(fig)
    fig, ax = plotting.plot_pipeline()
    assert isinstance(fig, plt.Figure) and ax.figure is fig
    plt.close(fig)


def test_smooth():
    assert list(plotting.smooth([1, 3, 5], 2)) == [1.0, 2.0, 4.0]


def test_glossary_has_the_seed_terms():
    zh = [t.zh for t in course.GLOSSARY.values()]
    for term in ("奖励模型", "优势函数", "重要性采样", "同策略", "异策略", "蒙特卡洛树搜索", "蒸馏", "过程奖励模型"):
        assert any(term in z for z in zh), term
    with pytest.raises(KeyError, match="looked up by id"):
        course.glossary_table(["supervised fine-tuning (SFT)"])   # an English term, not its id


def test_the_glossary_file_is_checked(tmp_path):
    bad = tmp_path / "g.json"
    bad.write_text('{"terms": [{"id": "a b", "en": "x", "zh": "y", "meaning": "z"}]}', encoding="utf-8")
    with pytest.raises(ValueError, match="slugs"):
        course.load_glossary(bad)
    bad.write_text('{"terms": [{"id": "a", "en": "x", "zh": "y", "meaning": "z"}, '
                   '{"id": "a", "en": "x2", "zh": "y2", "meaning": "z2"}]}', encoding="utf-8")
    with pytest.raises(ValueError, match="repeated"):
        course.load_glossary(bad)


def test_inline_chinese_terms_come_from_the_glossary():
    """A Chinese term written beside an English one in a notebook's prose, "(监督微调, SFT)", is the glossary's."""
    import json
    zh = " ".join(t.zh for t in course.GLOSSARY.values())
    root = Path(__file__).resolve().parents[1]
    missing = []
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for line in "".join(cell["source"]).splitlines():
                if line.lstrip().startswith("#"):        # a heading's translation is not a term
                    continue
                for group in re.findall(r"[（(]([^()（）]*[\u4e00-\u9fff][^()（）]*)[)）]", line):
                    for run in re.findall(r"[\u4e00-\u9fffε\-]+", group):
                        if re.search(r"[\u4e00-\u9fff]", run) and run not in zh:
                            missing.append(f"{path.stem}: {run}")
    assert not missing, missing


def _cells(row: str) -> list[str]:
    """The cells of a Markdown table row; ``\\|`` is a literal bar, not a cell border."""
    return re.split(r"(?<!\\)\|", row.strip())[1:-1]


@pytest.mark.parametrize("table", [course.glossary_table(), course.notebook_table(), course.notebook_table("")],
                         ids=["glossary", "map", "map-from-notebooks"])
def test_markdown_tables_keep_their_columns(table):
    header, *rows = table.splitlines()
    assert rows and all(len(_cells(row)) == len(_cells(header)) for row in rows), \
        [row for row in rows if len(_cells(row)) != len(_cells(header))]


def test_glossary_escapes_bars_and_has_the_new_terms():
    assert r"π(a\|s)" in course.glossary_table(["policy-gradient"])
    english = {t.en for t in course.GLOSSARY.values()}
    for term in ("TRL vs verl", "Ray", "OpenRLHF", "vLLM", "pass@k", "cold-start SFT", "R1-Zero",
                 "outcome reward / process reward", "KL penalty", "policy gradient"):
        assert term in english, term
    assert course.GLOSSARY["cold-start-sft"].zh.startswith("冷启动")


def test_plot_pipeline_labels_come_from_the_notebook_list():
    fig, ax = plotting.plot_pipeline()
    boxes = {t.get_text().split("\n")[0]: t for t in ax.texts if t.get_bbox_patch() is not None}
    plt.close(fig)
    expected = {f"{nb.number} {nb.short}": nb for nb in course.NOTEBOOKS if nb.number != "00"}
    assert set(boxes) == set(expected)
    for label, nb in expected.items():
        assert (boxes[label].get_bbox_patch().get_linestyle() == "-") == nb.built, label


def test_plot_pipeline_says_which_notebooks_start_from_sft_cold():
    fig, ax = plotting.plot_pipeline()
    texts = " ".join(t.get_text() for t in ax.texts)
    plt.close(fig)
    assert "05–07 start from" in texts and "sft_cold" in texts  # notebook 00's Step 2 says the same


def test_load_results_of_this_run_skips_other_seeds_models_and_scales(tmp_path, monkeypatch):
    from dataclasses import replace

    from course_utils.run_config import get_profile
    monkeypatch.setenv("COURSE_ARTIFACTS", str(tmp_path))
    profile = get_profile("cpu-tiny", seed=1234)
    pair = {"accuracy": {"before": 0.1, "after": 0.2}}
    results.record_results("05_ppo", pair, seed=1234, seconds=1.0)
    results.record_results("06_dpo", pair, seed=7, seconds=1.0)
    results.record_results("07_grpo", pair, seed=1234, seconds=1.0, model="/models/mine")
    assert [r["notebook"] for r in results.load_results(profile=profile)] == ["05_ppo"]
    assert [r["notebook"] for r in results.load_results(profile=replace(profile, model_id="/models/mine"))] == ["07_grpo"]
    results.record_results("08_r1_pipeline", pair, seed=1234, seconds=1.0, scale="smoke")   # a smoke run, same folder
    assert [r["notebook"] for r in results.load_results(profile=profile)] == ["05_ppo"]
    assert [r["notebook"] for r in results.load_results(profile=replace(profile, scale="smoke"))] == ["08_r1_pipeline"]
    assert len(results.load_results()) == 4


def test_plot_timed_curves_puts_each_point_at_its_seconds_with_its_wilson_interval():
    from course_utils.evaluation import wilson_interval
    curves = {"a": [(0.0, 0, 0.5), (10.0, 100, 0.9)], "b": [(0.0, 0, 0.5), (25.0, 20, 0.7)],
              "c": [(0.0, 0, 0.0), (5.0, 10, 1.0)]}                 # 0% and 100%: intervals touching the value
    fig, ax = plotting.plot_timed_curves(curves, n_problems=300, baselines={"teacher": 1.0})
    bars = {c.get_label(): c for c in ax.containers}            # one errorbar container per run
    assert [list(bars[n].lines[0].get_xdata()) for n in curves] == [[0.0, 10.0], [0.0, 25.0], [0.0, 5.0]]
    assert [list(bars[n].lines[0].get_ydata()) for n in curves] == [[0.5, 0.9], [0.5, 0.7], [0.0, 1.0]]
    low, high = wilson_interval(0.9 * 300, 300)
    segment = bars["a"].lines[2][0].get_segments()[1]            # the second point's interval
    assert segment[0][1] == pytest.approx(low) and segment[1][1] == pytest.approx(high)
    plt.close(fig)
