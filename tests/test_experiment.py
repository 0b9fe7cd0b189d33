"""One rule for "these are the calibrated defaults, so assert": any seed, the CPU profile, no other change."""
from dataclasses import dataclass, field

import pytest
import torch

from course_utils import experiment, show
from course_utils.run_config import get_profile


@dataclass
class Params:
    profile: str = "auto"
    seed: int | None = None
    steps: int = 60
    kl_sweep: tuple = (0.01, 0.3)
    recipe: dict = field(default_factory=dict)


CPU = get_profile("cpu-tiny", seed=1234)


def test_any_seed_is_calibrated_however_it_is_given(monkeypatch):
    assert experiment.calibrated(Params(), Params, CPU)
    assert experiment.calibrated(Params(seed=7), Params, get_profile("cpu-tiny", seed=7))   # Params(seed=7)
    monkeypatch.setenv("COURSE_SEED", "7")
    assert experiment.calibrated(Params(), Params, get_profile("cpu-tiny"))                 # COURSE_SEED=7
    assert experiment.calibrated(Params(profile="cpu-tiny"), Params, CPU)


def test_any_other_change_is_not_calibrated_and_says_what_changed():
    for P in (Params(steps=61), Params(recipe={"steps": 5}), Params(kl_sweep=(0.01,))):
        assert not experiment.calibrated(P, Params, CPU)
    assert experiment.calibrated(Params(kl_sweep=[0.01, 0.3]), Params, CPU)   # a list equal to the default tuple
    line = experiment.not_checked(Params(steps=61, recipe={"lr": 1}), Params, CPU)
    assert line.startswith("NOT CHECKED") and "steps, recipe" in line


def test_a_gpu_profile_is_not_calibrated():
    from dataclasses import replace
    gpu = replace(CPU, name="gpu", device="cuda", model_id="Qwen/Qwen3-0.6B")
    assert not experiment.calibrated(Params(), Params, gpu)
    assert "the gpu profile; the model Qwen/Qwen3-0.6B" in experiment.not_checked(Params(), Params, gpu)


def test_params_must_be_the_dataclass():
    with pytest.raises(TypeError, match="Params dataclass"):
        experiment.calibrated({"steps": 1}, Params, CPU)


def test_every_check_cell_uses_the_one_rule():
    """Every notebook but 00 has one check cell, built on ``experiment.Checks``: 02, 03 and 05-12 assert thresholds
    measured at the defaults (``Checks(P, Params, profile)``); 01 and 04 assert only what holds for any parameters
    (pretraining beats the unigram baseline; the toy RL facts), so they assert everywhere (``always=True``). No cell
    decides by hand when to assert, and every condition prints."""
    import json
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    for path in sorted((root / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                         if c["cell_type"] == "code")
        assert "experiment.calibrated" not in code and "experiment.not_checked" not in code, path.name
        assert "P == Params()" not in code and "NOT CHECKED: " not in code, path.name
        if path.stem[:2] == "00":
            assert "experiment.Checks(" not in code, path.name
            continue
        rule = "experiment.Checks(always=True)" if path.stem[:2] in ("01", "04") else "experiment.Checks(P, Params, profile)"
        assert code.count("experiment.Checks(") == code.count(rule) == 1, path.name
        assert code.count("checks.done()") == 1, path.name


# --------------------------------------------------------------------------- evaluate and Runs
def test_evaluate_takes_size_and_budget_from_the_profile_only(monkeypatch, tokenizer):
    """Every generation call of an evaluation uses the profile's test size and budget (here 200 and 37)."""
    from dataclasses import replace

    from course_utils import evaluation
    from course_utils.generation import Completions
    calls = []

    def fake_generate(model, tok, prompts, max_new_tokens, **kw):
        calls.append(("greedy", len(prompts), max_new_tokens))
        return ["<think>1 + 1 = 2</think><answer>2</answer>"] * len(prompts)

    def fake_sample(model, tok, prompts, num_samples, temperature, max_new_tokens, **kw):
        calls.append(("sample", len(prompts), max_new_tokens))
        return Completions(["<answer>0</answer>"] * (len(prompts) * num_samples), None, None, None, None, None,
                           num_samples)

    monkeypatch.setattr(evaluation, "generate", fake_generate)
    monkeypatch.setattr(evaluation, "sample_completions", fake_sample)
    profile = replace(CPU, eval_size=200, max_new_tokens=37)
    ev = experiment.evaluate(None, tokenizer, profile, k=4, scorer=lambda q, c: [1.0] * len(c), keep_samples=True)
    assert calls == [("greedy", 200, 37), ("sample", 200, 37)]
    assert ev.n == 200 and ev.k == 4 and ev.pass_at_1 == 0.0 and ev.score == 1.0 and len(ev.samples) == 200
    assert ev.mean_tokens > 5 and not {"samples", "correct", "scores"} & set(ev.summary())
    assert ev.scores == (1.0,) * 200   # the scorer's value per problem, in the problems' order
    assert ev.correct == (False,) * 200 and ev.accuracy == 0.0   # "2" is not the answer of any held-out sum
    assert experiment.evaluate(None, tokenizer, profile).pass_at_1 is None and calls[-1][0] == "greedy"


def test_runs_time_add_tabulate_and_record(tmp_path, monkeypatch):
    import json
    monkeypatch.setenv("COURSE_ARTIFACTS", str(tmp_path))
    runs = experiment.Runs()
    with runs.timed("a"):
        sum(range(10_000))
    ev = experiment.Eval(accuracy=0.5, format_rate=1.0, n=300, stderr=0.03, failures={"correct": 0.5},
                         mean_tokens=30.0, pass_at_1=float("nan"))
    row = runs.add("a", ev, steps=100, correct=[True, False])
    assert runs.evals["a"] is ev and runs.line("a").startswith("a: greedy 50.0% (well-formed 100.0%), pass@1 –, ")
    assert row["seconds"] > 0 and row["steps"] == 100 and runs["a"]["accuracy"] == 0.5
    runs.add("b", None, accuracy=0.25)
    table = runs.table({"accuracy": "greedy", "pass_at_1": "pass@1", "steps": "steps", "seconds": "s"})
    assert table.splitlines()[2].startswith("| a | 50.0% | – | 100 | ")
    assert table.splitlines()[3] == "| b | 25.0% | – | – | – |"
    path = runs.record("99_test", CPU, {"accuracy": {"before": 0.25, "after": 0.5}}, seconds=1.0)
    rec = json.loads(path.read_text(encoding="utf-8"))
    assert rec["extra"]["runs"]["a"]["steps"] == 100 and "correct" not in rec["extra"]["runs"]["a"]
    assert rec["extra"]["runs"]["a"]["pass_at_1"] is None   # NaN (not measured) is written as null


def test_runs_record_defaults_to_the_time_since_setup_and_show_renders(tmp_path, monkeypatch, capsys):
    import json
    import time
    monkeypatch.setenv("COURSE_ARTIFACTS", str(tmp_path))
    runs = experiment.Runs()
    time.sleep(0.05)
    runs.add("a", None, accuracy=0.5, show=False)
    rec = json.loads(runs.record("99_test", CPU, {"accuracy": {"before": 0.25, "after": 0.5}}).read_text(encoding="utf-8"))
    assert 0.05 <= rec["seconds"] < 5
    runs.show({"accuracy": "greedy"})
    assert "| a | 50.0% |" in capsys.readouterr().out


def test_logged_keeps_only_the_entries_with_the_key():
    history = [{"loss": 2.0, "step": 10}, {"kl": 0.1, "step": 10}, {"loss": 1.0, "step": 20}, {"train_runtime": 3.0}]
    assert experiment.logged(history, "loss") == ([10, 20], [2.0, 1.0])
    assert experiment.logged(history, "reward") == ([], [])
    assert experiment.logged_rows(history, "loss") == [history[0], history[2]]
    gaps = [{"kl": 0.1, "step": 1}, {"kl": None, "step": 2}, {"kl": float("nan"), "step": 3}, {"kl": 0.3, "step": 4}]
    assert experiment.logged(gaps, "kl", finite=True) == ([1, 4], [0.1, 0.3])


def test_failure_rates_are_run_log_columns_printed_as_percentages():
    from course_utils.evaluation import FAILURE_KINDS
    failures = {"correct": 0.5, "format error": 0.0, "answer contradicts think": 0.125, "wrong sum": 0.375}
    assert set(failures) == set(FAILURE_KINDS)
    ev = experiment.Eval(accuracy=0.5, format_rate=1.0, n=8, stderr=0.18, failures=failures, mean_tokens=20.0)
    rates = experiment.failure_rates(ev)
    assert rates == {"correct_rate": 0.5, "format_error_rate": 0.0, "answer_contradicts_think_rate": 0.125,
                     "wrong_sum_rate": 0.375}
    runs = experiment.Runs()
    runs.add("a", ev, show=False, **rates)
    table = runs.table({"wrong_sum_rate": "wrong sum", "answer_contradicts_think_rate": "contradicts"})
    assert table.splitlines()[2] == "| a | 37.5% | 12.5% |"


def test_markdown_table_formats_numbers_and_escapes_text():
    table = show.markdown_table({"completion": ["<think>1 | 2</think>", "x\ny"], "reward": [2.0, torch.tensor(0.5)],
                                 "weight": [2.4414e-4, float("nan")]}, index=[0, 1], index_header="#")
    assert table.splitlines() == ["| # | completion | reward | weight |", "|---|---|---|---|",
                                  "| 0 | &lt;think>1 \\| 2&lt;/think> | 2 | 0.000244 |",
                                  "| 1 | x y | 0.5 | – |"]
    assert show.markdown_table({"a": [True]}).splitlines()[-1] == "| True |"
    with pytest.raises(ValueError, match="different lengths"):
        show.markdown_table({"a": [1, 2], "b": [1]})


def test_markdown_rows_is_markdown_table_by_rows():
    assert show.markdown_rows(("a", "b"), [("x|y", 1), ("", "1")]) == show.markdown_table({"a": ["x|y", ""], "b": [1, "1"]})
    assert show.markdown_rows(("a", "b"), []) == "| a | b |\n|---|---|"       # no rows: the header alone
    with pytest.raises(ValueError, match="2 headers"):
        show.markdown_rows(("a", "b"), [("x",)])
    with pytest.raises(ValueError, match="repeated"):
        show.markdown_rows(("a", "a"), [("x", "y")])


def test_timed_run_measures_the_start_every_few_steps_and_the_end_then_records_the_run(tokenizer):
    from types import SimpleNamespace

    from course_utils.modeling import build_model
    calls = []

    class FakeTrainer:                     # what timed_run needs of a trainer: callbacks and train()
        def __init__(self, model, steps):
            self.model, self.steps, self.callbacks = model, steps, []

        def add_callback(self, callback):
            self.callbacks.append(callback)

        def train(self):
            state = SimpleNamespace(global_step=0)
            for cb in self.callbacks:
                cb.on_train_begin(None, state, None, model=self.model)
            for step in range(1, self.steps + 1):
                calls.append(step)
                state.global_step = step
                for cb in self.callbacks:
                    cb.on_step_end(None, state, None, model=self.model)
            for cb in self.callbacks:
                cb.on_train_end(None, state, None, model=self.model)

    profile = SimpleNamespace(eval_size=200, max_new_tokens=4)   # the smallest size evaluations accept
    runs = experiment.Runs()
    curve = experiment.timed_run(runs, "fake", FakeTrainer, build_model(tokenizer, seed=0), tokenizer, profile,
                                 steps=3, every=2, note="x")
    assert calls == [1, 2, 3] and [step for _, step, _ in curve] == [0, 2, 3]
    assert all(0.0 <= acc <= 1.0 for _, _, acc in curve)
    seconds = [t for t, _, _ in curve]
    assert seconds == sorted(seconds) and seconds[-1] < 0.5      # three measurements took seconds; training none
    assert runs["fake"]["steps"] == 3 and runs["fake"]["note"] == "x" and runs["fake"]["seconds"] == curve[-1][0]
    assert runs["fake"]["pass_at_1"] is not None                       # the final evaluation samples once
    assert experiment.seconds_to_reach([(0.0, 0, 0.2), (3.0, 2, 0.5), (6.0, 4, 0.7)], 0.5) == 3.0
    assert experiment.seconds_to_reach([(0.0, 0, 0.2)], 0.5) is None


def test_checks_print_every_condition_and_assert_them_together(capsys):
    from dataclasses import dataclass

    @dataclass
    class Params:
        lr: float = 1.0

    profile = get_profile("cpu-tiny")
    checks = experiment.Checks(Params(), Params, profile)
    assert checks.at_least("gain", 0.2, 0.15, before=0.5, after=0.7, fmt="{:.0%}")
    assert not checks.at_most("KL", 0.4, 0.3)
    out = capsys.readouterr().out
    assert "✓ gain: 50% → 70%; 20% ≥ 15%" in out and "✗ KL: 0.4 ≤ 0.3  (missed)" in out
    with pytest.raises(AssertionError, match="KL"):
        checks.done()
    relaxed = experiment.Checks(Params(lr=2.0), Params, profile)    # not calibrated: prints, never asserts
    relaxed.holds("format", False, "0 of 3")
    relaxed.done()
    assert "NOT CHECKED" in capsys.readouterr().out
    with pytest.raises(ValueError):
        experiment.Checks(Params(), Params, profile).done()
    anywhere = experiment.Checks(always=True)
    anywhere.holds("a NumPy fact", False)
    with pytest.raises(AssertionError, match="a NumPy fact"):
        anywhere.done()


def test_errors_removed_measures_a_gain_near_the_ceiling():
    assert experiment.errors_removed(0.94, 0.97) == pytest.approx(0.5)
    assert experiment.errors_removed(0.4, 0.7) == pytest.approx(0.5)
    assert experiment.errors_removed(0.5, 0.4) < 0 and experiment.errors_removed(1.0, 1.0) == 0.0
