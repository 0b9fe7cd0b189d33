"""What every experiment does around its training call: measure, log, tabulate, record, and decide whether to assert.

* :func:`evaluate` measures a model on the held-out problems and returns one :class:`Eval`; the test
  size and the generation budget come from the profile only.
* :class:`Runs` is a notebook's log of runs: ``with runs.timed(name)``, ``runs.add(name, ev, **extra)``,
  ``runs.table(columns)`` (Markdown), ``runs.record(notebook, profile, metrics)``.
* :func:`calibrated` is the one rule for "may this check assert?"; :class:`Checks` prints each condition of a check cell
  with its before, after and threshold and asserts them together; :func:`errors_removed` measures a gain near
  the ceiling.
* :func:`failure_rates` turns an Eval's failure kinds into run-log columns; :func:`course_utils.show.markdown_table`
  tabulates what is not a run (a group of completions, loss weights); :func:`logged` reads a curve from a trainer's log.


**When a check asserts.** A check cell's thresholds were measured on the CPU profile (the course's tiny model) with the
parameters cell's defaults, at several seeds. So a check asserts exactly when the run is such a
run, *whatever its seed*: ``COURSE_SEED=7`` and ``Params(seed=7)`` are the same run, and both
assert. Any other change (a recipe override, another data set, a GPU) turns the asserts into a
printed ``NOT CHECKED`` line that says what differs::

    if experiment.calibrated(P, Params, profile):
        assert gain >= 0.15, gain
    else:
        print(experiment.not_checked(P, Params, profile))
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, is_dataclass

from . import evaluation, results
from .show import markdown_table, show_markdown

# the parameters a check's thresholds hold for at any value: the seed (checked at several), and how the
# profile was named ("auto" resolves to "cpu-tiny" without a GPU; the profile itself is checked below)
ANY_VALUE = ("seed", "profile")


def _comparable(value):
    """Lists and tuples compare equal when their items do (``kl_sweep=[0.01, 0.3]`` is the default tuple)."""
    if isinstance(value, (list, tuple)):
        return tuple(_comparable(v) for v in value)
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    return value


def changed_parameters(P, Params) -> list[str]:
    """The fields of the parameters ``P`` that differ from ``Params()``'s defaults (the seed aside)."""
    if not is_dataclass(P):
        raise TypeError(f"P must be the notebook's Params dataclass instance, got {type(P).__name__}")
    default = Params()
    return [f.name for f in fields(P) if f.name not in ANY_VALUE
            and _comparable(getattr(P, f.name)) != _comparable(getattr(default, f.name))]


def calibrated(P, Params, profile) -> bool:
    """True where the check cell's thresholds were measured: the CPU profile with the course's own model and the
    parameters cell's defaults, at any seed."""
    return (profile.is_cpu and profile.model_id is None and profile.scale == "full"
            and not changed_parameters(P, Params))


def not_checked(P, Params, profile) -> str:
    """The line a check cell prints instead of asserting: what makes this run differ from the calibrated ones."""
    reasons = [] if profile.is_cpu else [f"the {profile.name} profile"]
    if profile.model_id is not None:
        reasons.append(f"the model {profile.model_id} (the thresholds are the course's tiny model's)")
    if profile.scale != "full":
        reasons.append(f"the {profile.scale} scale (steps and sizes cut: this run shows the code runs, no more)")
    changed = changed_parameters(P, Params)
    if changed:
        reasons.append("parameters changed from the defaults: " + ", ".join(changed))
    why = "; ".join(reasons) or "nothing (this run is calibrated)"
    return (f"NOT CHECKED: the thresholds are calibrated for the CPU profile with the parameters cell's defaults "
            f"(any seed); here: {why}. The figures are recorded above.")


class Checks:
    """A check cell's conditions, each printed with its before, after and threshold, asserted together at the end.

    ``checks = Checks(P, Params, profile)``; then one call per condition, e.g.
    ``checks.at_least("GRPO's gain in accuracy", after - before, 0.15, before=before, after=after)``; then
    ``checks.done()``, which asserts every condition where :func:`calibrated` is true and otherwise prints
    :func:`not_checked`'s line. Every condition prints a line either way, so no check passes in silence, and a
    learner sees the margin by which this run cleared (or missed) each threshold.
    """

    def __init__(self, P=None, Params=None, profile=None, *, always: bool = False):
        """``always=True``: a check that holds on any profile and parameters (04's NumPy experiments, 01's
        pretraining of the course's own model) asserts everywhere and needs no ``P``, ``Params`` or ``profile``."""
        self.asserting = always or calibrated(P, Params, profile)
        self.why_not = None if self.asserting else not_checked(P, Params, profile)
        self.failed: list[str] = []
        self.count = 0

    def _report(self, name: str, value, threshold, ok: bool, relation: str, before, after, fmt: str) -> bool:
        self.count += 1
        pair = "" if before is None else f"{fmt.format(before)} → {fmt.format(after)}; "
        line = f"{'✓' if ok else '✗'} {name}: {pair}{fmt.format(value)} {relation} {fmt.format(threshold)}"
        print(line + ("" if ok else "  (missed)"))
        if not ok:
            self.failed.append(line)
        return ok

    def at_least(self, name: str, value, threshold, *, before=None, after=None, fmt: str = "{:.3g}") -> bool:
        """``value >= threshold``, printed as ``✓ name: before → after; value ≥ threshold``."""
        return self._report(name, value, threshold, value >= threshold, "≥", before, after, fmt)

    def at_most(self, name: str, value, threshold, *, before=None, after=None, fmt: str = "{:.3g}") -> bool:
        """``value <= threshold``, printed like :meth:`at_least`."""
        return self._report(name, value, threshold, value <= threshold, "≤", before, after, fmt)

    def holds(self, name: str, ok: bool, detail: str = "") -> bool:
        """A condition that is not a comparison of two numbers (``detail`` says what was seen)."""
        self.count += 1
        print(f"{'✓' if ok else '✗'} {name}" + (f": {detail}" if detail else "") + ("" if ok else "  (missed)"))
        if not ok:
            self.failed.append(name)
        return bool(ok)

    def done(self) -> None:
        """Assert every condition (calibrated runs), or print why this run's thresholds do not apply."""
        if not self.count:
            raise ValueError("a check cell with no condition checks nothing")
        if self.asserting:
            assert not self.failed, "check failed:\n" + "\n".join(self.failed)
            print(f"all {self.count} conditions hold")
        else:
            print(self.why_not)


def errors_removed(before: float, after: float) -> float:
    """The share of the errors at ``before`` (an accuracy) that are gone at ``after``: ``(after - before) / (1 -
    before)``. Near the ceiling this is how a gain is measured: from 94% a step to 97% removes half the errors, as a
    step from 40% to 70% does. Negative when accuracy fell; 0 where ``before`` is already 1."""
    return 0.0 if before >= 1 else (after - before) / (1 - before)


# --------------------------------------------------------------------------- measuring a model
@dataclass(frozen=True)
class Eval:
    """A model measured on ``n`` held-out problems (fractions in [0, 1]).

    ``accuracy`` / ``format_rate``: greedy; ``pass_at_1`` / ``pass_at_k``: sampled (None if not asked);
    ``score``: the mean of a scorer (e.g. a reward model) over the greedy answers (None if none given), and
    ``scores`` its value per problem (to compare two runs problem by problem);
    ``mean_tokens``: the greedy answers' mean length in tokens; ``right_off_working_rate``: the share of greedy
    answers that are right although their think section concludes another number (``evaluation.right_off_working``:
    what an answer-only verifier cannot see); ``correct``: per problem, whether the greedy
    answer was right (to compare two runs problem by problem); ``samples``: the greedy answers, one dict per
    problem (question, completion, answer, correct), kept only if asked.
    """

    accuracy: float
    format_rate: float
    n: int
    stderr: float
    failures: Mapping[str, float]
    mean_tokens: float
    pass_at_1: float | None = None
    pass_at_k: float | None = None
    k: int | None = None
    temperature: float | None = None
    score: float | None = None
    right_off_working_rate: float | None = None
    correct: tuple = ()
    samples: tuple = ()
    scores: tuple = ()

    def summary(self) -> dict:
        """The figures without the per-problem lists: what a results file or a table keeps."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("correct", "samples", "scores")}


def evaluate(model, tokenizer, profile, *, k: int | None = None, temperature: float = 1.0,
             scorer: Callable[[list[str], list[str]], list[float]] | None = None, keep_samples: bool = False,
             split: str = "test", batch_size: int | None = None) -> Eval:
    """Greedy accuracy and format on ``profile.eval_size`` held-out problems, with ``profile.max_new_tokens`` new
    tokens per answer; with ``k``, also pass@1 and pass@k from ``k`` samples per problem at ``temperature``.

    ``scorer(questions, completions) -> scores`` (e.g. a reward model's) is averaged over the greedy answers.
    ``batch_size``: problems per generation batch (default: the evaluation functions' own).
    """
    n, budget = profile.eval_size, profile.max_new_tokens
    sizes = {} if batch_size is None else {"batch_size": batch_size}
    greedy = evaluation.evaluate_arithmetic(model, tokenizer, split, n=n, max_new_tokens=budget, return_samples=True,
                                            **sizes)
    samples = greedy["samples"]
    lengths = [len(tokenizer(s["completion"], add_special_tokens=False)["input_ids"]) for s in samples]
    extra = {}
    if k is not None:
        sampled = evaluation.pass_at_k(model, tokenizer, k=k, temperature=temperature, n=n, max_new_tokens=budget,
                                       split=split, greedy=False, **sizes)
        extra.update(pass_at_1=sampled["pass@1"], pass_at_k=sampled["pass@k"], k=k, temperature=temperature)
    if scorer is not None:
        scores = scorer([s["question"] for s in samples], [s["completion"] for s in samples])
        extra.update(score=float(sum(scores) / len(scores)), scores=tuple(float(x) for x in scores))
    return Eval(accuracy=greedy["accuracy"], format_rate=greedy["format_rate"], n=greedy["n"],
                stderr=greedy["stderr"], failures=greedy["failures"], mean_tokens=sum(lengths) / len(lengths),
                right_off_working_rate=greedy["right_off_working_rate"],
                correct=tuple(s["correct"] for s in samples), samples=tuple(samples) if keep_samples else (), **extra)


# --------------------------------------------------------------------------- the log of a notebook's runs
class Runs(dict):
    """A notebook's runs by name: each a dict of figures (an :class:`Eval`'s summary plus what the notebook adds).

    It is a dict, so ``runs["sft"]["accuracy"]`` reads a figure; the methods do the bookkeeping::

        runs = Runs()
        with runs.timed("(a) hard"):
            trainer.train()
        runs.add("(a) hard", evaluate(model, tokenizer, profile, k=1), steps=100)
        display(Markdown(runs.table({"accuracy": "greedy", "pass_at_1": "pass@1", "seconds": "seconds"})))
    """

    def __init__(self):
        super().__init__()
        self.started = time.perf_counter()   # the notebook's own clock: record() reports the time since
        self._seconds: dict[str, float] = {}
        self.evals: dict[str, Eval] = {}   # the full Eval of each run that has one (per-problem results included)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Time the block; the seconds go to run ``name`` (added now or later with :meth:`add`)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._seconds[name] = self._seconds.get(name, 0.0) + time.perf_counter() - start
            if name in self:
                self[name]["seconds"] = self._seconds[name]

    def add(self, name: str, ev: Eval | None = None, *, show: bool = True, **extra) -> dict:
        """Record run ``name``: the figures of ``ev`` (if any), its timed seconds (if any), and ``extra``; print
        its line (:meth:`line`) unless ``show`` is False."""
        row = {} if ev is None else ev.summary()
        if ev is not None:
            self.evals[name] = ev
        if name in self._seconds:
            row["seconds"] = self._seconds[name]
        row.update(extra)
        self[name] = row
        if show:
            print(self.line(name))
        return row

    def line(self, name: str) -> str:
        """One line of a run's main figures: greedy accuracy and format, pass@1 / pass@k, score, seconds."""
        row = self[name]
        parts = [f"greedy {_cell('accuracy', row.get('accuracy'))}"]
        if row.get("format_rate") is not None:
            parts[-1] += f" (well-formed {_cell('format_rate', row['format_rate'])})"
        if row.get("pass_at_1") is not None:
            parts.append(f"pass@1 {_cell('pass_at_1', row['pass_at_1'])}")
        if row.get("k") not in (None, 1):
            parts.append(f"pass@{row['k']} {_cell('pass_at_k', row['pass_at_k'])}")
        if row.get("score") is not None:
            parts.append(f"score {row['score']:.3f}")
        if row.get("seconds") is not None:
            parts.append(f"{row['seconds']:.0f} s")
        return f"{name}: " + ", ".join(parts)

    def table(self, columns: Mapping[str, str], names: list[str] | None = None) -> str:
        """A Markdown table of the runs (all, or ``names``) with ``columns`` ``{key: header}``.

        Fractions (accuracy, pass@k, rates) print as percentages, seconds as whole numbers, a missing or NaN
        figure as a dash.
        """
        names = list(self) if names is None else names
        cells = {header: [_cell(key, self[name].get(key)) for name in names] for key, header in columns.items()}
        return markdown_table(cells, index=names, index_header="run")

    def show(self, columns: Mapping[str, str], names: list[str] | None = None) -> None:
        """Display :meth:`table` as rendered Markdown (in a notebook; plain text elsewhere)."""
        show_markdown(self.table(columns, names))

    def record(self, notebook: str, profile, metrics: dict, seconds: float | None = None, extra: dict | None = None):
        """Write the notebook's results file (``results.record_results``) with every run's figures in ``extra``;
        ``seconds`` defaults to the time since this log was created (the notebook's set-up cell)."""
        runs = {name: {k: _finite(v) for k, v in row.items() if _jsonable(v)} for name, row in self.items()}
        seconds = time.perf_counter() - self.started if seconds is None else seconds
        return results.record_results(notebook, metrics, seed=profile.seed, seconds=seconds, profile=profile.name,
                                      extra={**(extra or {}), "runs": runs}, model=profile.model_id,
                                      scale=profile.scale)


def timed_run(runs: Runs, name: str, make_trainer: Callable, model, tokenizer, profile, steps: int, *,
              every: int | None = None, batch_size: int | None = None, **extra) -> list[tuple[float, int, float]]:
    """Train ``model`` with ``make_trainer(model, steps)`` and measure it against the seconds it trains.

    Greedy held-out accuracy (``profile.eval_size`` test problems) is measured at the start, every ``every`` steps
    (default: a quarter of the run) and at the end by a ``training.TimedCurveCallback``, whose clock leaves the
    measurements out. The final model's :func:`evaluate` (pass@1 from one sample) becomes run ``name`` of ``runs``,
    with ``steps``, the training ``seconds`` and ``extra``. Returns the curve, ``(seconds, step, accuracy)`` points.
    """
    from .training import TimedCurveCallback

    def accuracy(m) -> float:
        return evaluation.evaluate_arithmetic(m, tokenizer, "test", n=profile.eval_size,
                                              max_new_tokens=profile.max_new_tokens,
                                              **({} if batch_size is None else {"batch_size": batch_size}))["accuracy"]
    trainer = make_trainer(model, steps)
    curve = TimedCurveCallback(every or max(1, steps // 4), accuracy)
    trainer.add_callback(curve)
    trainer.train()
    runs.add(name, evaluate(model, tokenizer, profile, k=1, batch_size=batch_size), steps=steps,
             seconds=curve.seconds_trained, **extra)
    return curve.curve


def seconds_to_reach(curve: Sequence[tuple[float, int, float]], target: float) -> float | None:
    """The seconds of the first point of a :func:`timed_run` curve whose value is at least ``target`` (None: never).
    Points are measured every few steps, so the target was reached at or before that time."""
    return next((seconds for seconds, _, value in curve if value >= target), None)


def logged_rows(log_history: list[dict], key: str) -> list[dict]:
    """The entries of a trainer's ``state.log_history`` that log ``key``: with ``key="reward"``, GRPO's training
    steps, without the summary entry a trainer appends when it ends."""
    return [row for row in log_history if key in row]


def logged(log_history: list[dict], key: str, *, finite: bool = False) -> tuple[list[int], list[float]]:
    """The steps and values of ``key`` in a trainer's ``state.log_history`` (the entries that have it), for a
    curve: ``steps, kl = logged(trainer.state.log_history, "kl")``. ``finite=True`` also drops entries whose value
    is None, NaN or infinite."""
    rows = logged_rows(log_history, key)
    if finite:
        rows = [row for row in rows if row[key] is not None and math.isfinite(float(row[key]))]
    return [row.get("step", i) for i, row in enumerate(rows)], [float(row[key]) for row in rows]


def failure_rates(ev: Eval) -> dict[str, float]:
    """An evaluation's failure kinds (``Eval.failures``, see ``evaluation.FAILURE_KINDS``) as columns of the run log:
    ``{"wrong_sum_rate": 0.41, "format_error_rate": 0.0, ...}``, for ``runs.add(name, ev, **failure_rates(ev))``
    (:meth:`Runs.table` prints a key ending in ``_rate`` as a percentage)."""
    return {kind.replace(" ", "_") + "_rate": float(share) for kind, share in ev.failures.items()}


FRACTIONS = ("accuracy", "format_rate", "pass_at_1", "pass_at_k")


def _cell(key: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if key in FRACTIONS or key.endswith(("_accuracy", "_rate")):
        return f"{value:.1%}"
    if key == "seconds":
        return f"{value:.0f}"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _finite(value):
    """NaN (a figure not measured) as None, which JSON can hold."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _jsonable(value) -> bool:
    return value is None or isinstance(value, (int, float, str, bool)) or (
        isinstance(value, Mapping) and all(isinstance(v, (int, float, str)) for v in value.values()))
