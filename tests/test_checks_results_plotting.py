import json

import matplotlib.pyplot as plt
import pytest
import torch

from course_utils import course, plotting, results
from course_utils.checks import compare


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
    table = results.results_markdown(results.load_results())
    assert "| 01_pretrain | val_loss | 6.4 | 1.1 |" in table


@pytest.mark.parametrize("bad", [{"acc": 0.5}, {"acc": {"before": 1}}, {"acc": {"before": 1, "after": float("nan")}}])
def test_record_rejects_bad_metrics(tmp_artifacts, bad):
    with pytest.raises(ValueError):
        results.record_results("x", bad, seed=1, seconds=1)


def test_plots_return_fig_and_ax():
    for fig, ax in [
        plotting.plot_curves({"a": ([0, 1, 2], [3.0, 2.0, 1.0])}, baselines={"b": 1.5}, window=2),
        plotting.plot_before_after({"acc": {"before": 0.1, "after": 0.9}}),
        plotting.plot_histograms({"chosen": [1, 2, 3], "rejected": [0, 1, 1]}),
        plotting.plot_token_mask(["a", "b", "\n"], [0, 1, 1]),
        plotting.plot_pipeline(),
    ]:
        assert isinstance(fig, plt.Figure) and ax.figure is fig
        plt.close(fig)


def test_history_series_and_smooth():
    hist = [{"step": 1, "loss": 2.0}, {"step": 2, "eval_loss": 1.5}, {"step": 3, "loss": 1.0}]
    assert plotting.history_series(hist, "loss") == ([1, 3], [2.0, 1.0])
    assert list(plotting.smooth([1, 3, 5], 2)) == [1.0, 2.0, 4.0]


def test_glossary_has_the_seed_terms():
    zh = {v[0] for v in course.GLOSSARY.values()}
    for term in ("奖励模型", "优势函数", "重要性采样", "同策略", "异策略", "蒙特卡洛树搜索", "蒸馏", "过程奖励模型"):
        assert any(term in z for z in zh), term
    with pytest.raises(KeyError):
        course.glossary_table(["no such term"])
