"""diagnostics.rl_health on synthetic log histories: each failure is found, a healthy run passes."""
import pytest

from course_utils.diagnostics import Thresholds, late_mean, rl_health


def trl_history(n=30, **overrides):
    """A healthy GRPO log: rising reward, mixed groups, nothing truncated, steady entropy, small KL."""
    rows = []
    for i in range(n):
        h = {"step": i + 1, "reward": 0.3 + 0.5 * i / n, "frac_reward_zero_std": 0.2, "completions/clipped_ratio": 0.0,
             "rewards/accuracy_reward/mean": 0.3 + 0.5 * i / n, "rewards/accuracy_reward/std": 0.4,
             "rewards/format_reward/mean": 0.9, "rewards/format_reward/std": 0.2, "entropy": 0.3, "kl": 0.01 * i / n}
        for key, fn in overrides.items():
            h[key] = fn(i, n)
        rows.append(h)
    rows.append({"train_runtime": 10.0, "train_loss": 0.0, "step": n})     # TRL's final record has no metrics
    return rows


def kinds(history, **kw):
    return [f.kind for f in rl_health(history, verbose=False, **kw)]


def test_healthy_run_has_no_findings(capsys):
    assert rl_health(trl_history()) == []
    assert "no known failure sign" in capsys.readouterr().out


@pytest.mark.parametrize("overrides, kind", [
    ({"frac_reward_zero_std": lambda i, n: 0.9}, "zero-std groups"),
    ({"completions/clipped_ratio": lambda i, n: 0.4}, "truncated completions"),
    ({"reward": lambda i, n: 0.5}, "reward stuck flat"),
    ({"reward": lambda i, n: 0.8 - 0.5 * i / n}, "reward stuck flat"),          # falling counts too
    ({"rewards/format_reward/mean": lambda i, n: 0.0, "rewards/format_reward/std": lambda i, n: 0.0},
     "reward function format_reward never varies"),
    ({"entropy": lambda i, n: 0.3 * (1 - i / n) ** 3}, "entropy collapse"),
    ({"kl": lambda i, n: 2.0 * i / n}, "KL running away"),
])
def test_each_failure_is_named_with_a_fix(overrides, kind, capsys):
    found = rl_health(trl_history(**overrides))
    assert [f.kind for f in found] == [kind]
    out = capsys.readouterr().out
    assert kind in out and "fix:" in out


def test_the_course_ppo_history_is_read_too():
    healthy = [{"step": i, "score": 0.2 + 0.02 * i, "kl": 0.5, "length": 30.0, "entropy": 0.4} for i in range(30)]
    assert kinds(healthy) == []
    runaway = [dict(h, kl=30.0 * h["step"] / 30) for h in healthy]         # 30 nats per 30-token completion
    assert kinds(runaway) == ["KL running away"]


def test_missing_keys_are_skipped_and_said(capsys):
    rl_health([{"step": 1, "loss": 0.1}])
    out = capsys.readouterr().out
    assert "not logged, not checked" in out and "zero-std groups" in out


def test_thresholds_are_adjustable():
    history = trl_history(frac_reward_zero_std=lambda i, n: 0.6)
    assert kinds(history) == ["zero-std groups"]
    assert kinds(history, thresholds=Thresholds(zero_std=0.7)) == []


def test_late_mean_averages_the_last_part_of_the_entries_that_log_the_key():
    log = [{"m": 1.0}, {"m": 2.0}, {"other": 9.0}, {"m": 3.0}, {"m": 5.0}, {"train_runtime": 1.0}]
    assert late_mean(log, "m") == 4.0                    # the last half of 1, 2, 3, 5
    assert late_mean(log, "m", fraction=1.0) == 2.75
    assert late_mean(log, "m", fraction=0.1) == 5.0      # at least one entry
    with pytest.raises(KeyError):
        late_mean(log, "missing")
    with pytest.raises(ValueError):
        late_mean(log, "m", fraction=0)
