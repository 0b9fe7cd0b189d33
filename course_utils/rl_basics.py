"""RL basics: the toy experiments of notebook 04 (RL foundations), in NumPy, no language model.

This module holds only the small, self-contained experiments that notebook 04 runs
and shows on the page with ``show.show_source``; the PPO / GRPO / DPO code for
language models lives in other modules. Everything takes an explicit
``numpy.random.Generator`` so results are seeded.

* Bandits: :class:`BernoulliBandit`, on-policy REINFORCE and off-policy
  importance-weighted policy gradient from a fixed behaviour policy.
* Gridworld: the cliff walk, :func:`td_control` = SARSA (on-policy TD) or Q-learning (off-policy TD);
  :func:`walk` (where a learned epsilon-greedy policy goes), :func:`walk_height`, :func:`greedy_path`, and
  :func:`cliff_runs`, several independent runs of one method.
* Importance sampling: :func:`importance_sampling_estimate` (plain or with truncated weights).
* Monte Carlo: :func:`mc_pi`, :func:`mc_integral_hit_or_miss`,
  :func:`policy_gradient_estimates` (with and without a baseline).
* MCTS with UCT on Nim: :class:`Nim`, :func:`uct_score`, :func:`mcts_move`, :func:`play`.
* Cold start: :func:`simulate_ctr` (UCB-ranked vs greedy item exposure).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=float)
    z = z - z.max()
    e = np.exp(z)
    return e / e.sum()


# --------------------------------------------------------------------------- bandits
@dataclass
class BernoulliBandit:
    """K arms; pulling arm ``a`` pays 1 with probability ``means[a]``, else 0."""
    means: np.ndarray

    def __post_init__(self):
        self.means = np.asarray(self.means, dtype=float)
        if self.means.ndim != 1 or not ((self.means >= 0) & (self.means <= 1)).all():
            raise ValueError("means must be a 1-D array of probabilities")

    @property
    def k(self) -> int:
        return len(self.means)

    def pull(self, actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return (rng.random(np.shape(actions)) < self.means[actions]).astype(float)

    def expected_return(self, probs: np.ndarray) -> float:
        """Expected reward of a policy with action probabilities ``probs``."""
        return float(np.dot(probs, self.means))


def grad_log_softmax(logits: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """Rows of d log softmax(logits)[a] / d logits = onehot(a) - softmax(logits); shape (N, K)."""
    probs = softmax(logits)
    onehot = np.eye(len(logits))[actions]
    return onehot - probs


def reinforce_on_policy(bandit: BernoulliBandit, rng: np.random.Generator, steps: int = 200,
                        batch: int = 16, lr: float = 0.5) -> tuple[list[int], list[float]]:
    """On-policy REINFORCE: after each update, sample a fresh batch from the *new* policy.

    Returns ``(samples_used, expected_return)`` after each update.
    """
    theta = np.zeros(bandit.k)                                       # policy pi = softmax(theta)
    used, returns = [], []
    for step in range(1, steps + 1):
        actions = rng.choice(bandit.k, size=batch, p=softmax(theta))  # fresh samples from the current pi
        rewards = bandit.pull(actions, rng)
        # batch-mean baseline; it includes each sample's own reward, so the expected step is (batch-1)/batch
        # of the true gradient (a leave-one-out mean, as in RLOO, would be exactly unbiased)
        advantages = rewards - rewards.mean()
        grad = (advantages[:, None] * grad_log_softmax(theta, actions)).mean(0)
        theta += lr * grad                                           # gradient ascent on E[R]
        used.append(step * batch)
        returns.append(bandit.expected_return(softmax(theta)))
    return used, returns


def off_policy_from_log(bandit: BernoulliBandit, rng: np.random.Generator, n_samples: int,
                        behaviour: np.ndarray | None = None, epochs: int = 300, lr: float = 0.5,
                        clip: float | None = None) -> float:
    """Learn from a fixed log of ``n_samples`` pulls of a behaviour policy ``mu`` (uniform by default).

    The log is generated once; the target policy is then updated ``epochs`` times on it with
    the importance-weighted gradient ``mean(pi(a)/mu(a) * (r - b) * grad log pi(a))``
    (``clip``: use ``min(pi/mu, clip)``). Returns the expected return of the learned policy.
    """
    mu = np.full(bandit.k, 1.0 / bandit.k) if behaviour is None else np.asarray(behaviour, float)
    actions = rng.choice(bandit.k, size=n_samples, p=mu)             # the log: sampled once, from mu
    rewards = bandit.pull(actions, rng)
    baseline = rewards.mean()
    theta = np.zeros(bandit.k)
    for _ in range(epochs):                                          # reuse the same log every epoch
        ratio = softmax(theta)[actions] / mu[actions]                # importance weight pi(a) / mu(a)
        if clip is not None:
            ratio = np.minimum(ratio, clip)
        weights = ratio * (rewards - baseline)
        theta += lr * (weights[:, None] * grad_log_softmax(theta, actions)).mean(0)
    return bandit.expected_return(softmax(theta))


# --------------------------------------------------------------------------- cliff walk
@dataclass
class CliffWalk:
    """The classic 4 x 12 cliff: start bottom-left, goal bottom-right, the cells between are a cliff.

    Reward -1 per step, -100 for stepping into the cliff (and back to start).
    Actions: 0 up, 1 right, 2 down, 3 left.
    """
    rows: int = 4
    cols: int = 12

    @property
    def start(self) -> tuple[int, int]:
        return (self.rows - 1, 0)

    @property
    def goal(self) -> tuple[int, int]:
        return (self.rows - 1, self.cols - 1)

    def step(self, state: tuple[int, int], action: int) -> tuple[tuple[int, int], float, bool]:
        dr, dc = [(-1, 0), (0, 1), (1, 0), (0, -1)][action]
        r = min(max(state[0] + dr, 0), self.rows - 1)
        c = min(max(state[1] + dc, 0), self.cols - 1)
        if r == self.rows - 1 and 0 < c < self.cols - 1:
            return self.start, -100.0, False
        return (r, c), -1.0, (r, c) == self.goal


def eps_greedy(q: np.ndarray, state, eps: float, rng: np.random.Generator) -> int:
    """With probability ``eps`` a random action, else a greedy one (ties broken at random)."""
    if rng.random() < eps:
        return int(rng.integers(4))
    values = q[state]
    return int(rng.choice(np.flatnonzero(values == values.max())))


def td_control(env: CliffWalk, rng: np.random.Generator, method: str, episodes: int = 300,
               alpha: float = 0.5, eps: float = 0.1, gamma: float = 1.0, max_steps: int = 500):
    """SARSA (``method="sarsa"``, on-policy) or Q-learning (``"q_learning"``, off-policy).

    Both act epsilon-greedily and update ``Q(s, a) += alpha * (target - Q(s, a))``. The only
    difference is the TD target: SARSA bootstraps from the action ``a'`` its epsilon-greedy
    policy *will actually take*; Q-learning from the greedy ``max_a Q(s', a)``, whatever it
    does next. Returns ``(returns, Q, falls)``: each episode's return, the final Q-table, and how many of each
    episode's steps went into the cliff.
    """
    if method not in ("sarsa", "q_learning"):
        raise ValueError(f"method must be 'sarsa' or 'q_learning', got {method!r}")
    q = np.zeros((env.rows, env.cols, 4))
    returns, falls = [], []
    for _ in range(episodes):
        s, total, fell = env.start, 0.0, 0
        a = eps_greedy(q, s, eps, rng)
        for _ in range(max_steps):
            s2, r, done = env.step(s, a)
            total += r
            fell += r == -100.0                               # a step into the cliff (and back to the start)
            a2 = eps_greedy(q, s2, eps, rng)                  # the action it will really take next
            if done:
                target = r                                    # no future after the goal
            elif method == "sarsa":
                target = r + gamma * q[s2][a2]                # on-policy: the action taken
            else:
                target = r + gamma * q[s2].max()              # off-policy: the greedy action
            q[s][a] += alpha * (target - q[s][a])             # target - Q(s, a) is the TD error
            s, a = s2, a2
            if done:
                break
        returns.append(total)
        falls.append(int(fell))
    return returns, q, falls


def walk(env: CliffWalk, q: np.ndarray, rng: np.random.Generator, eps: float = 0.1, episodes: int = 100,
         max_steps: int = 500) -> tuple[np.ndarray, int]:
    """Follow the epsilon-greedy policy of a fixed ``q`` (no learning) for ``episodes`` episodes.

    Returns ``(visits, falls)``: how often each cell was entered, shape ``(rows, cols)``
    (the start counts once per episode and once per fall), and how many steps went into the cliff.
    """
    visits, falls = np.zeros((env.rows, env.cols)), 0
    for _ in range(episodes):
        s = env.start
        visits[s] += 1
        for _ in range(max_steps):
            s, r, done = env.step(s, eps_greedy(q, s, eps, rng))
            visits[s] += 1
            falls += r == -100.0
            if done:
                break
    return visits, int(falls)


def walk_height(env: CliffWalk, visits: np.ndarray) -> float:
    """How far above the cliff a :func:`walk` went: the mean number of rows above the cliff row of the cells it
    entered between the start column and the goal column (0: along the cliff's edge is impossible, 1: the row next
    to it; the start and goal columns, which every walk crosses, are left out)."""
    heights = (env.rows - 1 - np.arange(env.rows))[:, None]
    inner = visits[:, 1:-1]
    return float((heights * inner).sum() / inner.sum())


def cliff_runs(env: CliffWalk, seed: int, method: str, runs: int = 10, episodes: int = 400,
               walk_episodes: int = 100) -> dict:
    """``runs`` independent runs of :func:`td_control` with ``method``, each followed by a :func:`walk` of its final
    Q-table: one run is a noisy draw (a constant step size keeps Q moving), their average is the algorithm's behaviour.

    Run k samples with ``np.random.default_rng([seed, k])`` and walks with ``default_rng([seed, k, 1])``, so each
    method sees the same seeds. Returns a dict: ``returns`` and ``falls``, arrays ``(runs, episodes)`` of each training
    episode's return and steps into the cliff; ``q``, the final Q-tables; ``walks``, each walk's ``(visits, falls)``;
    ``heights``, each walk's :func:`walk_height`; ``paths``, each Q-table's :func:`greedy_path`.
    """
    out = {"returns": [], "falls": [], "q": [], "walks": [], "heights": [], "paths": []}
    for k in range(runs):
        returns, q, falls = td_control(env, np.random.default_rng([seed, k]), method, episodes=episodes)
        visits, walk_falls = walk(env, q, np.random.default_rng([seed, k, 1]), episodes=walk_episodes)
        for key, value in (("returns", returns), ("falls", falls), ("q", q), ("walks", (visits, walk_falls)),
                           ("heights", walk_height(env, visits)), ("paths", greedy_path(env, q))):
            out[key].append(value)
    out["returns"], out["falls"] = np.array(out["returns"]), np.array(out["falls"])
    out["heights"] = np.array(out["heights"])
    return out


def greedy_path(env: CliffWalk, q: np.ndarray, max_steps: int = 60) -> list[tuple[int, int]]:
    """States visited by the greedy policy of ``q`` from the start."""
    s, path = env.start, [env.start]
    for _ in range(max_steps):
        s, _, done = env.step(s, int(q[s].argmax()))
        path.append(s)
        if done:
            break
    return path


# --------------------------------------------------------------------------- importance sampling
def importance_sampling_estimate(f_values: np.ndarray, log_p: np.ndarray, log_q: np.ndarray,
                                 weighted: bool = True, clip: float | None = None) -> float:
    """Estimate ``E_p[f]`` from samples ``x ~ q``, given ``log p(x)`` and ``log q(x)``.

    ``weighted=True``: ``mean(p(x)/q(x) * f(x))`` (unbiased when ``q > 0`` wherever ``p > 0``);
    ``weighted=False``: ``mean(f(x))``, which estimates ``E_q[f]`` instead (biased for ``E_p``);
    ``clip``: truncate the weights, ``min(p/q, clip)`` (less variance, biased towards ``q``;
    this is truncated IS as in Retrace / V-trace, *not* PPO's clipped objective).
    """
    f_values = np.asarray(f_values, float)
    if not weighted:
        return float(f_values.mean())
    w = np.exp(np.asarray(log_p, float) - np.asarray(log_q, float))   # p(x) / q(x)
    if clip is not None:
        w = np.minimum(w, clip)
    return float((w * f_values).mean())


def gaussian_logpdf(x: np.ndarray, mean: float, std: float = 1.0) -> np.ndarray:
    return -0.5 * ((np.asarray(x) - mean) / std) ** 2 - math.log(std * math.sqrt(2 * math.pi))


# --------------------------------------------------------------------------- Monte Carlo
def mc_pi(n: int, rng: np.random.Generator) -> float:
    """pi from the share of uniform points in the unit square inside the quarter circle."""
    xy = rng.random((n, 2))
    return 4.0 * float(((xy ** 2).sum(1) <= 1.0).mean())


def mc_integral_hit_or_miss(f, a: float, b: float, f_max: float, n: int, rng: np.random.Generator) -> float:
    """``int_a^b f`` (with ``0 <= f <= f_max``) as the box area times the share of points under f."""
    x = rng.uniform(a, b, n)
    y = rng.uniform(0.0, f_max, n)
    return (b - a) * f_max * float((y <= f(x)).mean())


def policy_gradient_exact(logits: np.ndarray, mean_rewards: np.ndarray) -> np.ndarray:
    """``grad_theta E_{a~pi}[r(a)] = sum_a pi(a) r(a) grad log pi(a)`` for a softmax policy."""
    probs = softmax(logits)
    return (probs[:, None] * mean_rewards[:, None] * (np.eye(len(logits)) - probs)).sum(0)


def policy_gradient_estimates(bandit: BernoulliBandit, logits: np.ndarray, n: int, repeats: int,
                              rng: np.random.Generator, baseline: bool) -> np.ndarray:
    """``repeats`` Monte Carlo estimates of the policy gradient, each from ``n`` sampled actions.

    Without a baseline: ``mean(R * grad log pi(a))``. With one: ``mean((R - b) * grad log pi(a))``
    where ``b`` is the policy's true expected reward (a constant, so the estimate stays unbiased).
    Returns an array of shape ``(repeats, K)``.
    """
    probs = softmax(logits)
    b = bandit.expected_return(probs) if baseline else 0.0
    actions = rng.choice(bandit.k, size=(repeats, n), p=probs)
    rewards = bandit.pull(actions, rng)
    grad_log_pi = np.eye(bandit.k)[actions] - probs                    # (repeats, n, K)
    return ((rewards - b)[..., None] * grad_log_pi).mean(1)            # average over the n samples


# --------------------------------------------------------------------------- MCTS on Nim
@dataclass(frozen=True)
class Nim:
    """Normal-play Nim: players alternately take >= 1 object from one heap; taking the last one wins."""
    heaps: tuple[int, ...]

    def moves(self) -> list[tuple[int, int]]:
        return [(i, k) for i, h in enumerate(self.heaps) for k in range(1, h + 1)]

    def play(self, move: tuple[int, int]) -> "Nim":
        i, k = move
        if not (0 <= i < len(self.heaps)) or not (1 <= k <= self.heaps[i]):
            raise ValueError(f"illegal move {move} in {self.heaps}")
        heaps = list(self.heaps)
        heaps[i] -= k
        return Nim(tuple(heaps))

    @property
    def over(self) -> bool:
        return sum(self.heaps) == 0

    def nim_sum(self) -> int:
        x = 0
        for h in self.heaps:
            x ^= h
        return x


def uct_score(wins: float, visits: int, parent_visits: int, c: float) -> float:
    """UCT = Q_i / N_i + C * sqrt(ln T / N_i); unvisited children come first."""
    if visits == 0:
        return math.inf
    return wins / visits + c * math.sqrt(math.log(parent_visits) / visits)


@dataclass
class Node:
    state: Nim
    parent: "Node | None" = None
    move: tuple[int, int] | None = None
    children: list["Node"] = field(default_factory=list)
    untried: list[tuple[int, int]] = field(default_factory=list)
    wins: float = 0.0   # from the point of view of the player who made `move`
    visits: int = 0


def random_rollout(state: Nim, rng: np.random.Generator) -> float:
    """Play uniformly random moves to the end: 1.0 if the player who moved *into* ``state`` wins, else 0.0."""
    mover_wins = True                       # a finished game: the mover took the last object
    while not state.over:
        moves = state.moves()
        state = state.play(moves[int(rng.integers(len(moves)))])
        mover_wins = not mover_wins
    return float(mover_wins)


def mcts_move(state: Nim, simulations: int, rng: np.random.Generator, c: float = 1.4,
              return_root: bool = False, rollout=random_rollout):
    """Choose a move by Monte Carlo tree search with UCT; the most visited child is played.

    A node's ``wins`` count from the point of view of the player who made its ``move``.
    ``rollout(state, rng)`` returns that player's result (1.0 win, 0.0 loss).
    """
    if state.over:
        raise ValueError("the game is over: no move to choose")
    root = Node(state, untried=state.moves())
    for _ in range(simulations):
        node = root
        # 1. selection: while every move of the node has been tried, descend to the best-UCT child
        while not node.untried and node.children:
            parent = node
            node = max(parent.children, key=lambda ch: uct_score(ch.wins, ch.visits, parent.visits, c))
        # 2. expansion: add one untried move as a new child
        if node.untried:
            move = node.untried.pop(int(rng.integers(len(node.untried))))
            child = Node(node.state.play(move), parent=node, move=move)
            child.untried = child.state.moves()
            node.children.append(child)
            node = child
        # 3. simulation: play on at random; does the player who made node.move win?
        mover_wins = rollout(node.state, rng)
        # 4. back-propagation: every node on the path gets a visit; the result flips at each level
        while node is not None:
            node.visits += 1
            node.wins += mover_wins
            mover_wins = 1.0 - mover_wins
            node = node.parent
    best = max(root.children, key=lambda ch: ch.visits)
    return (best.move, root) if return_root else best.move


def play(heaps: tuple[int, ...], first, second, rng: np.random.Generator) -> int:
    """Play one game; ``first``/``second`` map ``(state, rng) -> move``. Returns the winner (0 or 1)."""
    state, player, agents = Nim(tuple(heaps)), 0, (first, second)
    while True:
        state = state.play(agents[player](state, rng))
        if state.over:
            return player
        player ^= 1


def random_agent(state: Nim, rng: np.random.Generator) -> tuple[int, int]:
    moves = state.moves()
    return moves[int(rng.integers(len(moves)))]


def mcts_agent(simulations: int, c: float = 1.4):
    """An agent that plays ``mcts_move`` with the given budget and exploration constant."""
    def agent(state: Nim, rng: np.random.Generator) -> tuple[int, int]:
        return mcts_move(state, simulations, rng, c=c)
    return agent


# --------------------------------------------------------------------------- cold start
def simulate_ctr(ctrs: np.ndarray, rounds: int, rng: np.random.Generator, c: float | None = 1.0,
                 warmup: int = 1) -> dict:
    """Show one item per round, chosen by UCB (``c``) or greedily by observed CTR (``c=None``).

    Score of item i: ``clicks_i / shows_i + c * sqrt(ln T / shows_i)`` — the UCT bonus with
    T the total shows so far. Every item is shown ``warmup`` times first. Returns the
    per-round choice, impressions and clicks per item, and the regret against always
    showing the best item.
    """
    ctrs = np.asarray(ctrs, float)
    k = len(ctrs)
    shows, clicks = np.zeros(k), np.zeros(k)
    choices = np.empty(rounds, dtype=int)
    for t in range(rounds):
        if t < warmup * k:
            i = t % k
        else:
            est = clicks / shows
            bonus = 0.0 if c is None else c * np.sqrt(math.log(t) / shows)
            score = est + bonus
            i = int(rng.choice(np.flatnonzero(score == score.max())))
        choices[t] = i
        shows[i] += 1
        clicks[i] += float(rng.random() < ctrs[i])
    regret = float(rounds * ctrs.max() - ctrs[choices].sum())
    return {"choices": choices, "shows": shows, "clicks": clicks, "regret": regret}
