"""The bench's arithmetic and the budget report (the timing itself runs in ``make bench``)."""
import pytest
import torch

from course_tools import reports
from course_tools import bench


def test_forward_flops_counts_matrix_parameters_and_attention(tokenizer):
    from course_utils.modeling import build_model
    model = build_model(tokenizer, seed=0)
    cfg = model.config
    matrix = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n)
    matrix += cfg.vocab_size * cfg.hidden_size   # the tied output projection is a matmul too
    assert bench.forward_flops(cfg, 10, 0) == pytest.approx(2 * matrix * 10)
    extra = bench.forward_flops(cfg, 10, 8) - bench.forward_flops(cfg, 10, 0)
    assert extra == pytest.approx(10 * 4 * cfg.num_hidden_layers * 8 * cfg.num_attention_heads * cfg.head_dim)


def test_best_of_takes_the_fastest_and_matmul_rate_is_positive():
    calls = []
    assert bench.best_of(lambda: calls.append(1), repeats=3, warmup=2) >= 0 and len(calls) == 5
    assert bench.matmul_gflops(n=128, repeats=1) > 0


def test_machine_and_markdown():
    info = bench.machine()
    assert info["cores"] >= 1 and info["torch"] == torch.__version__
    rows = [{"phase": "x", "threads": 2, "seconds": 0.5, "roofline_seconds": 0.1, "ratio": 5.0}]
    assert "| x | 2 | 0.500 | 0.100 | 5.0x |" in bench.markdown(rows, info)


def test_budget_report_scales_by_the_matmul_rate_and_flags_slips():
    report = reports.budget_report({"05_ppo": 100.0, "01_pretrain": 400.0}, gflops=2 * reports.REFERENCE_GFLOPS)
    assert "| 05_ppo | 100 | 200 |" in report and "| 01_pretrain | 400 | 800 |" in report
    assert "over" in report.split("01_pretrain", 1)[1].splitlines()[0]          # 800 s > 5 min
    assert "| **total** | 500 | 1000 | 1800 | ok |" in report
    plain = reports.budget_report({"05_ppo": 10.0})
    assert "not normalised" in plain and "| 05_ppo | 10 | 10 |" in plain


def test_budget_report_says_where_an_over_budget_notebook_spends_its_time():
    slow = {"notebook": "07_grpo", "seconds": 500.0,
            "extra": {"runs": {"GRPO": {"seconds": 100.0, "accuracy": 0.5}, "GSPO": {"seconds": 50.0},
                               "sft_cold (start)": {"accuracy": 0.35}, "stale": {"seconds": 200.0}}}}
    assert reports.time_breakdown(slow, top=2) == "stale 200 s (40%), GRPO 100 s (20%)"
    assert reports.time_breakdown({"notebook": "04_rl_foundations", "seconds": 20.0}) == ""
    quick = {"notebook": "04_rl_foundations", "seconds": 20.0, "extra": {"runs": {"bandit": {"seconds": 10.0}}}}
    report = reports.budget_report({"07_grpo": 500.0, "04_rl_foundations": 20.0}, records=[slow, quick])
    where = report.split("longest timed blocks", 1)[1]
    assert "- 07_grpo (500 s of its own clock): stale 200 s (40%), GRPO 100 s (20%), GSPO 50 s (10%)" in where
    assert "04_rl_foundations" not in where          # within its budget: no line
    assert "longest timed blocks" not in reports.budget_report({"04_rl_foundations": 20.0}, records=[quick])
