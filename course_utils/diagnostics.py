"""Reading an RL run's log history and naming what went wrong (notebooks 05, 07, 08, 11).

:func:`rl_health` takes ``trainer.state.log_history`` of TRL's ``GRPOTrainer`` (keys
``reward``, ``frac_reward_zero_std``, ``completions/clipped_ratio``, ``rewards/<fn>/mean``,
``entropy``, ``kl`` …) or the list of step dicts of the course's PPO (``score``, ``kl``
summed over a completion's tokens, ``length``, ``entropy``), and reports every known
failure sign it sees together with its usual fix. It reads only numbers that are there:
a key a run does not log is a check it skips (and says so).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from .experiment import logged


@dataclass(frozen=True)
class Finding:
    """One failure sign: what it is, the evidence in the numbers, and what usually fixes it."""

    kind: str
    evidence: str
    fix: str

    def __str__(self) -> str:
        return f"⚠ {self.kind}: {self.evidence}\n    fix: {self.fix}"


@dataclass(frozen=True)
class Thresholds:
    """When a sign counts as a failure (each is compared with the mean of the run's last third)."""

    zero_std: float = 0.5
    """share of groups whose completions all got the same reward (no policy-gradient signal from them)"""
    truncated: float = 0.1
    """share of completions cut at max_completion_length"""
    flat_reward: float = 0.02
    """reward gain (last third minus first third) below this, in units of the reward's spread, counts as flat"""
    entropy_drop: float = 0.2
    """entropy at the end below this fraction of the start counts as a collapse"""
    kl_per_token: float = 0.5
    """per-token KL to the reference above this counts as running away"""


def _series(history: Iterable[Mapping], key: str) -> list[float]:
    return logged(list(history), key, finite=True)[1]


def _thirds(values: list[float]) -> tuple[float, float]:
    k = max(1, len(values) // 3)
    return sum(values[:k]) / k, sum(values[-k:]) / k


def late_mean(log_history: Iterable[Mapping], key: str, fraction: float = 0.5) -> float:
    """Mean of ``key`` over the last ``fraction`` of the entries that log it (at least one).

    A logged metric is noisy from one logging window to the next; the mean over the
    late part of a run says where it ended without hanging on one window. Entries
    without ``key`` (the final summary, another phase's log) are skipped; a key no
    entry logs raises ``KeyError``.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    values = _series(log_history, key)
    if not values:
        raise KeyError(f"no entry of the log has {key!r}")
    tail = values[len(values) - max(1, round(fraction * len(values))):]
    return sum(tail) / len(tail)


def _end_above(history, key: str, limit: float, skipped: list, check: str) -> float | None:
    """The last third's mean of ``key`` when it exceeds ``limit``; None otherwise (``check`` noted as skipped if unlogged)."""
    values = _series(history, key)
    if not values:
        skipped.append(check)
        return None
    _, end = _thirds(values)
    return end if end > limit else None


def rl_health(log_history: list[Mapping], thresholds: Thresholds = Thresholds(), verbose: bool = True
              ) -> list[Finding]:
    """The failure signs in a run's log history, each with its usual fix (printed when ``verbose``).

    Checks, on the mean of the last third of the logged steps against the first third:

    * **zero-std groups** (GRPO): most groups' rewards all equal — advantage 0, no learning
      signal from them;
    * **truncated completions**: many completions hit ``max_completion_length``;
    * **reward stuck flat**: the reward did not rise;
    * **a reward function that never varies** (never fires, or always does): it has the same
      value on every completion of the run (std 0 throughout), so it gives no signal;
    * **entropy collapse**: the policy became nearly deterministic;
    * **KL running away**: the policy drifted far from the reference.
    """
    history = [h for h in log_history if isinstance(h, Mapping)]
    findings, skipped = [], []
    is_trl = any("reward" in h for h in history)
    reward = _series(history, "reward" if is_trl else "score")

    end = _end_above(history, "frac_reward_zero_std", thresholds.zero_std, skipped, "zero-std groups")
    if end is not None:
        findings.append(Finding(
            "zero-std groups",
            f"{end:.0%} of groups had all-equal rewards at the end (advantage 0, no policy-gradient signal)",
            "make the task's difficulty match the model (prompts it sometimes solves), sample more generations per "
            "prompt, add a partial-credit reward, or drop such groups (DAPO's dynamic sampling)"))

    end = _end_above(history, "completions/clipped_ratio", thresholds.truncated, skipped, "truncated completions")
    if end is not None:
        findings.append(Finding(
            "truncated completions", f"{end:.0%} of completions were cut at max_completion_length",
            "raise max_completion_length, or mask_truncated_completions=True so cut answers do not train, or "
            "penalise length softly (DAPO's overlong penalty)"))

    if len(reward) >= 3:
        start, end = _thirds(reward)
        spread = max(reward) - min(reward)
        if end - start <= thresholds.flat_reward * max(spread, 1e-8) or spread < 1e-8:
            findings.append(Finding(
                "reward stuck flat", f"reward {start:.3g} in the first third, {end:.3g} in the last",
                "check that every reward function fires and sees its columns (remove_unused_columns=False), "
                "that groups are not all-equal, and the learning rate (too small: nothing; too large: collapse)"))
    else:
        skipped.append("reward stuck flat")

    funcs = sorted({k[len("rewards/"):-len("/mean")] for h in history for k in h
                    if k.startswith("rewards/") and k.endswith("/mean")})
    for name in funcs:
        means, stds = _series(history, f"rewards/{name}/mean"), _series(history, f"rewards/{name}/std")
        if means and stds and max(stds) < 1e-8 and max(means) - min(means) < 1e-8:
            findings.append(Finding(
                f"reward function {name} never varies",
                f"it returned {means[0]:.3g} for every completion of the run (std 0): it gives no signal",
                "print its inputs on a few completions: a column the trainer dropped, a tag the tokenizer strips "
                "(skip_special_tokens), a parser that never matches, a task the model never solves — or one it "
                "always passes (then it can go)"))

    entropy = _series(history, "entropy")
    if len(entropy) >= 2:
        start, end = _thirds(entropy)
        if start > 0 and end < thresholds.entropy_drop * start:
            findings.append(Finding(
                "entropy collapse", f"mean token entropy fell from {start:.3g} to {end:.3g}",
                "lower the learning rate, raise beta or the sampling temperature, or clip higher (epsilon_high)"))
    else:
        skipped.append("entropy collapse")

    kl = _series(history, "kl")
    if kl:
        lengths = _series(history, "length")
        if not is_trl and len(lengths) == len(kl):      # the course's PPO logs KL summed over a completion
            kl = [k / max(n, 1.0) for k, n in zip(kl, lengths)]
        _, end = _thirds(kl)
        if end > thresholds.kl_per_token:
            findings.append(Finding(
                "KL running away", f"per-token KL to the reference is {end:.3g} at the end",
                "raise beta, lower the learning rate, or stop earlier; check the reward is not being hacked"))
    else:
        skipped.append("KL running away")

    if verbose:
        for f in findings:
            print(f)
        if not findings:
            print("✓ no known failure sign in this run")
        if skipped:
            print(f"(not logged, not checked: {', '.join(skipped)})")
    return findings
