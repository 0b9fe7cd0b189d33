import math

import numpy as np
import pytest

from course_utils import rl


def test_importance_sampling_is_exactly_unbiased_on_a_discrete_case():
    """E_q[p/q f] = E_p[f], computed exactly by enumerating the support."""
    p, q = np.array([0.1, 0.2, 0.7]), np.array([0.5, 0.3, 0.2])
    f = np.array([3.0, -1.0, 2.0])
    exact = sum(q[x] * rl.importance_sampling_estimate(f[[x]], np.log(p[[x]]), np.log(q[[x]])) for x in range(3))
    assert exact == pytest.approx(float(p @ f))
    unweighted = sum(q[x] * rl.importance_sampling_estimate(f[[x]], np.log(p[[x]]), np.log(q[[x]]), weighted=False)
                     for x in range(3))
    assert unweighted == pytest.approx(float(q @ f)) and unweighted != pytest.approx(float(p @ f))


def test_importance_sampling_gaussian_and_clip():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 200_000)
    lp, lq = rl.gaussian_logpdf(x, 0.5), rl.gaussian_logpdf(x, 0.0)
    assert rl.importance_sampling_estimate(x, lp, lq) == pytest.approx(0.5, abs=0.02)
    assert rl.importance_sampling_estimate(x, lp, lq, clip=1.0) < 0.45  # clipping biases toward q
    assert math.isclose(float(np.exp(rl.gaussian_logpdf(np.array([0.0]), 0.0))[0]), 1 / math.sqrt(2 * math.pi))


def test_mcts_finds_the_winning_nim_move():
    rng = np.random.default_rng(0)
    position = rl.Nim((1, 2, 4))  # nim-sum 7: the only winning move takes 1 from the heap of 4
    winning = [m for m in position.moves() if position.play(m).nim_sum() == 0]
    assert winning == [(2, 1)]
    assert sum(rl.mcts_move(position, 2000, rng) == (2, 1) for _ in range(10)) >= 9
    assert rl.mcts_move(rl.Nim((0, 0, 3)), 50, rng) == (2, 3)  # take everything and win


def test_mcts_beats_random_player():
    rng = np.random.default_rng(1)
    wins = sum(rl.play((3, 4, 5), rl.mcts_agent(200), rl.random_agent, rng) == 0 for _ in range(30))
    assert wins >= 26


def test_nim_rules():
    with pytest.raises(ValueError, match="illegal"):
        rl.Nim((1, 2)).play((0, 2))
    with pytest.raises(ValueError, match="over"):
        rl.mcts_move(rl.Nim((0, 0)), 10, np.random.default_rng(0))
    assert rl.uct_score(0, 0, 10, 1.4) == math.inf
    assert rl.uct_score(3, 4, 10, 0.0) == 0.75


def test_sarsa_is_safer_than_q_learning_on_the_cliff():
    env = rl.CliffWalk()
    sarsa, q_s = rl.td_control(env, np.random.default_rng(0), "sarsa", episodes=300)
    qlearn, q_q = rl.td_control(env, np.random.default_rng(0), "q_learning", episodes=300)
    assert np.mean(sarsa[-100:]) > np.mean(qlearn[-100:])
    assert len(rl.greedy_path(env, q_q)) == 14  # the shortest path, along the edge: 13 moves
    assert min(r for r, _ in rl.greedy_path(env, q_s)) < 2  # SARSA's path climbs away from the cliff
    with pytest.raises(ValueError):
        rl.td_control(env, np.random.default_rng(0), "expected_sarsa")


def test_policy_gradient_estimate_is_unbiased_and_baseline_reduces_variance():
    bandit = rl.BernoulliBandit([0.2, 0.5, 0.8])
    logits = np.array([0.1, -0.3, 0.2])
    exact = rl.policy_gradient_exact(logits, bandit.means)
    rng = np.random.default_rng(0)
    plain = rl.policy_gradient_estimates(bandit, logits, 8, 20_000, rng, baseline=False)
    based = rl.policy_gradient_estimates(bandit, logits, 8, 20_000, rng, baseline=True)
    for est in (plain, based):
        assert np.all(np.abs(est.mean(0) - exact) < 5 * np.sqrt(est.var(0) / len(est)))
    assert based.var(0).sum() < plain.var(0).sum()


def test_bandit_learning_on_and_off_policy():
    bandit = rl.BernoulliBandit([0.1, 0.9])
    _, returns = rl.reinforce_on_policy(bandit, np.random.default_rng(0), steps=100)
    assert returns[-1] > 0.8
    assert rl.off_policy_from_log(bandit, np.random.default_rng(0), 200) > 0.8
    with pytest.raises(ValueError):
        rl.BernoulliBandit([0.5, 1.5])


def test_monte_carlo_estimates():
    rng = np.random.default_rng(0)
    assert rl.mc_pi(200_000, rng) == pytest.approx(math.pi, abs=0.02)
    assert rl.mc_integral_hit_or_miss(lambda x: x ** 2, 0, 1, 1, 200_000, rng) == pytest.approx(1 / 3, abs=0.01)


def test_ucb_beats_greedy_exposure():
    ctrs = [0.02, 0.05, 0.08]
    ucb = np.mean([rl.simulate_ctr(ctrs, 5000, np.random.default_rng(s), c=0.2)["regret"] for s in range(10)])
    greedy = np.mean([rl.simulate_ctr(ctrs, 5000, np.random.default_rng(s), c=None)["regret"] for s in range(10)])
    assert ucb < greedy
