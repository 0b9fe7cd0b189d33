"""Tests of course_utils.rl_basics, the toy RL experiments of notebook 04."""
import math

import numpy as np
import pytest

from course_utils import rl_basics


def test_importance_sampling_is_exactly_unbiased_on_a_discrete_case():
    """E_q[p/q f] = E_p[f], computed exactly by enumerating the support."""
    p, q = np.array([0.1, 0.2, 0.7]), np.array([0.5, 0.3, 0.2])
    f = np.array([3.0, -1.0, 2.0])
    exact = sum(q[x] * rl_basics.importance_sampling_estimate(f[[x]], np.log(p[[x]]), np.log(q[[x]])) for x in range(3))
    assert exact == pytest.approx(float(p @ f))
    unweighted = sum(q[x] * rl_basics.importance_sampling_estimate(f[[x]], np.log(p[[x]]), np.log(q[[x]]), weighted=False)
                     for x in range(3))
    assert unweighted == pytest.approx(float(q @ f)) and unweighted != pytest.approx(float(p @ f))


def test_importance_sampling_gaussian_and_clip():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 200_000)
    lp, lq = rl_basics.gaussian_logpdf(x, 0.5), rl_basics.gaussian_logpdf(x, 0.0)
    assert rl_basics.importance_sampling_estimate(x, lp, lq) == pytest.approx(0.5, abs=0.02)
    assert rl_basics.importance_sampling_estimate(x, lp, lq, clip=1.0) < 0.45  # clipping biases toward q
    assert math.isclose(float(np.exp(rl_basics.gaussian_logpdf(np.array([0.0]), 0.0))[0]), 1 / math.sqrt(2 * math.pi))


def test_clip_truncates_each_weight_at_the_cap():
    f = np.array([1.0, 1.0, 2.0])
    log_w = np.log(np.array([3.0, 0.5, 1.5]))  # weights p/q = 3, 0.5, 1.5
    zeros = np.zeros(3)
    assert rl_basics.importance_sampling_estimate(f, log_w, zeros) == pytest.approx((3 + 0.5 + 3) / 3)
    assert rl_basics.importance_sampling_estimate(f, log_w, zeros, clip=2.0) == pytest.approx((2 + 0.5 + 3) / 3)


def test_mcts_finds_the_winning_nim_move():
    rng = np.random.default_rng(0)
    position = rl_basics.Nim((1, 2, 4))  # nim-sum 7: the only winning move takes 1 from the heap of 4
    winning = [m for m in position.moves() if position.play(m).nim_sum() == 0]
    assert winning == [(2, 1)]
    assert sum(rl_basics.mcts_move(position, 2000, rng) == (2, 1) for _ in range(10)) >= 9
    assert rl_basics.mcts_move(rl_basics.Nim((0, 0, 3)), 50, rng) == (2, 3)  # take everything and win


def test_random_rollout_scores_the_player_who_moved_into_the_state():
    rng = np.random.default_rng(0)
    assert rl_basics.random_rollout(rl_basics.Nim((0, 0)), rng) == 1.0  # they took the last object
    assert rl_basics.random_rollout(rl_basics.Nim((0, 3)), rng) == 0.0  # one heap: the opponent takes it all
    # (1, 1): the opponent must take one, the mover takes the last
    assert rl_basics.random_rollout(rl_basics.Nim((1, 1)), rng) == 1.0


def test_mcts_with_a_perfect_rollout_needs_few_simulations():
    """``rollout`` is pluggable: a rollout that knows the nim-sum rule finds the winning move of (3, 4, 5) fast."""
    def perfect(state, rng):  # the mover wins iff they left a zero nim-sum
        return float(state.nim_sum() == 0)
    position = rl_basics.Nim((3, 4, 5))  # only winning move: take 2 from the heap of 3
    rng = np.random.default_rng(0)
    assert all(rl_basics.mcts_move(position, 100, rng, rollout=perfect) == (0, 2) for _ in range(5))
    assert sum(rl_basics.mcts_move(position, 100, rng) == (0, 2) for _ in range(10)) <= 5


def test_mcts_beats_random_player():
    rng = np.random.default_rng(1)
    wins = sum(rl_basics.play((3, 4, 5), rl_basics.mcts_agent(200), rl_basics.random_agent, rng) == 0 for _ in range(30))
    assert wins >= 26


def test_nim_rules():
    with pytest.raises(ValueError, match="illegal"):
        rl_basics.Nim((1, 2)).play((0, 2))
    with pytest.raises(ValueError, match="over"):
        rl_basics.mcts_move(rl_basics.Nim((0, 0)), 10, np.random.default_rng(0))
    assert rl_basics.uct_score(0, 0, 10, 1.4) == math.inf
    assert rl_basics.uct_score(3, 4, 10, 0.0) == 0.75


def test_sarsa_is_safer_than_q_learning_on_the_cliff():
    env = rl_basics.CliffWalk()
    sarsa, q_s, falls_s = rl_basics.td_control(env, np.random.default_rng(0), "sarsa", episodes=300)
    qlearn, q_q, falls_q = rl_basics.td_control(env, np.random.default_rng(0), "q_learning", episodes=300)
    assert np.mean(sarsa[-100:]) > np.mean(qlearn[-100:])
    assert len(rl_basics.greedy_path(env, q_q)) == 14  # the shortest path, along the edge: 13 moves
    assert min(r for r, _ in rl_basics.greedy_path(env, q_s)) < 2  # SARSA's path climbs away from the cliff
    assert min(r for r, _ in rl_basics.greedy_path(env, q_q)) == 2  # Q-learning walks the row next to the cliff
    assert len(falls_s) == 300 and sum(falls_s) < sum(falls_q)      # and falls less while it trains
    # a fall costs 100 and every other step 1: each return is -(steps - falls) - 100 * falls, at most -13
    assert all(r <= -13 - 99 * f for r, f in zip(sarsa, falls_s))
    with pytest.raises(ValueError):
        rl_basics.td_control(env, np.random.default_rng(0), "expected_sarsa")


def test_sarsa_and_q_learning_coincide_without_exploration():
    """With eps = 0 the action taken is the greedy one, so the two TD targets are the same number."""
    env = rl_basics.CliffWalk()
    _, q_s, _ = rl_basics.td_control(env, np.random.default_rng(3), "sarsa", episodes=30, eps=0.0)
    _, q_q, _ = rl_basics.td_control(env, np.random.default_rng(3), "q_learning", episodes=30, eps=0.0)
    np.testing.assert_array_equal(q_s, q_q)
    _, q_s, _ = rl_basics.td_control(env, np.random.default_rng(3), "sarsa", episodes=30, eps=0.1)
    _, q_q, _ = rl_basics.td_control(env, np.random.default_rng(3), "q_learning", episodes=30, eps=0.1)
    assert not np.array_equal(q_s, q_q)  # with exploration the targets differ


def test_cliff_runs_are_independent_and_averaged_per_method():
    env = rl_basics.CliffWalk()
    runs = rl_basics.cliff_runs(env, 5, "q_learning", runs=3, episodes=60, walk_episodes=5)
    assert runs["returns"].shape == runs["falls"].shape == (3, 60) and runs["heights"].shape == (3,)
    assert len(runs["q"]) == len(runs["walks"]) == len(runs["paths"]) == 3
    assert not np.array_equal(runs["returns"][0], runs["returns"][1])          # each run its own seed
    returns, q, falls = rl_basics.td_control(env, np.random.default_rng([5, 1]), "q_learning", episodes=60)
    np.testing.assert_array_equal(runs["returns"][1], returns)                  # run k: default_rng([seed, k])
    np.testing.assert_array_equal(runs["q"][1], q)
    assert runs["heights"][1] == rl_basics.walk_height(env, runs["walks"][1][0])


def test_walk_height():
    env = rl_basics.CliffWalk()
    visits = np.zeros((env.rows, env.cols))
    visits[2, :] = 1          # the row next to the cliff: 1 row above it
    assert rl_basics.walk_height(env, visits) == 1.0
    visits[0, 1:-1] = 1       # as many cells 3 rows up: the mean is 2
    assert rl_basics.walk_height(env, visits) == 2.0


def test_walk_counts_visits_and_falls():
    env = rl_basics.CliffWalk()
    q = np.zeros((env.rows, env.cols, 4))
    q[..., 1] = 1.0  # always "right": from the start that is straight into the cliff
    visits, falls = rl_basics.walk(env, q, np.random.default_rng(0), eps=0.0, episodes=2, max_steps=10)
    assert falls == 20 and visits[env.start] == 22 and visits.sum() == 22
    q[env.start] = [1.0, 0.0, 0.0, 0.0]  # up first, then right along row 2, then down into the goal
    q[2, env.cols - 1] = [0.0, 0.0, 1.0, 0.0]
    visits, falls = rl_basics.walk(env, q, np.random.default_rng(0), eps=0.0, episodes=3)
    assert falls == 0 and visits[env.goal] == 3 and visits[2].sum() == 3 * env.cols


def test_eps_greedy():
    q = np.zeros((1, 2, 4))
    q[0, 1] = [0.0, 2.0, 1.0, 2.0]  # actions 1 and 3 tie for the best
    rng = np.random.default_rng(0)
    greedy = [rl_basics.eps_greedy(q, (0, 1), 0.0, rng) for _ in range(200)]
    assert set(greedy) == {1, 3}  # only the best actions, ties broken at random
    explore = np.array([rl_basics.eps_greedy(q, (0, 1), 1.0, rng) for _ in range(4000)])
    assert np.allclose(np.bincount(explore, minlength=4) / 4000, 0.25, atol=0.03)


def test_policy_gradient_estimate_is_unbiased_and_baseline_reduces_variance():
    bandit = rl_basics.BernoulliBandit([0.2, 0.5, 0.8])
    logits = np.array([0.1, -0.3, 0.2])
    exact = rl_basics.policy_gradient_exact(logits, bandit.means)
    rng = np.random.default_rng(0)
    plain = rl_basics.policy_gradient_estimates(bandit, logits, 8, 20_000, rng, baseline=False)
    based = rl_basics.policy_gradient_estimates(bandit, logits, 8, 20_000, rng, baseline=True)
    for est in (plain, based):
        assert np.all(np.abs(est.mean(0) - exact) < 5 * np.sqrt(est.var(0) / len(est)))
    assert based.var(0).sum() < 0.6 * plain.var(0).sum()  # measured ratio 0.46


def test_bandit_learning_on_and_off_policy():
    bandit = rl_basics.BernoulliBandit([0.1, 0.9])
    _, returns = rl_basics.reinforce_on_policy(bandit, np.random.default_rng(0), steps=100)
    assert returns[-1] > 0.8
    assert rl_basics.off_policy_from_log(bandit, np.random.default_rng(0), 200) > 0.8
    # a behaviour policy that never pulls the good arm leaves nothing to learn from
    assert rl_basics.off_policy_from_log(bandit, np.random.default_rng(0), 200, behaviour=[1.0, 0.0]) < 0.6
    with pytest.raises(ValueError):
        rl_basics.BernoulliBandit([0.5, 1.5])


def test_importance_weights_let_a_skewed_log_find_the_best_arm():
    """The log mostly pulls arm 1 (0.8); only the weights pi/mu reveal that the rarely pulled arm 2 (0.9) is better.

    Without them the update maximises sum_a mu(a) (m_a - b) log pi(a) and settles on arm 1 (return 0.80).
    """
    bandit = rl_basics.BernoulliBandit([0.1, 0.8, 0.9])
    learned = rl_basics.off_policy_from_log(bandit, np.random.default_rng(0), 4000, behaviour=[0.1, 0.85, 0.05])
    assert learned > 0.88  # measured 0.895


def test_monte_carlo_estimates():
    rng = np.random.default_rng(0)
    assert rl_basics.mc_pi(200_000, rng) == pytest.approx(math.pi, abs=0.02)
    assert rl_basics.mc_integral_hit_or_miss(lambda x: x ** 2, 0, 1, 1, 200_000, rng) == pytest.approx(1 / 3, abs=0.01)


def test_ucb_beats_greedy_exposure():
    ctrs = [0.02, 0.05, 0.08]
    ucb = np.mean([rl_basics.simulate_ctr(ctrs, 5000, np.random.default_rng(s), c=0.2)["regret"] for s in range(10)])
    greedy = np.mean([rl_basics.simulate_ctr(ctrs, 5000, np.random.default_rng(s), c=None)["regret"] for s in range(10)])
    assert ucb < greedy
