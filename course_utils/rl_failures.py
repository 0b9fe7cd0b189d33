"""RL runs that go wrong on purpose (notebook 13): the causes, the estimators that show them, and their fixes.

Each failure of notebook 13 is caused on the tiny model by one change to 07's GRPO recipe or start, seen in the logs a
practitioner watches, diagnosed and fixed. What is new there lives here, written from scratch; the notebook checks
each piece against TRL (or the paper's formula) on the same tensors, and ``tests/test_rl_failures.py`` does too:

* **entropy collapse** — :func:`high_entropy_mask`, the tokens a run trains on when it keeps only the high-entropy
  minority (Wang et al., arXiv 2506.01939; TRL's ``top_entropy_quantile``);
* **a reward that rewards nothing** — :class:`RandomReward`, the random-reward control of Shao et al. (arXiv
  2506.10947), and :func:`fixed_and_broken`, a paired count of the problems a run fixed and broke, with
  :func:`paired_z`, its z-score (the check cells of 05, 07, 08, 09 and 13 compare runs problem by problem with both),
  and :func:`paired_t`, the same comparison for a score per problem (05's check cell);
* **length running away** — DAPO's soft overlong punishment (:func:`soft_overlong_punishment`,
  :class:`SoftOverlongPunishment`; TRL's ``get_soft_overlong_punishment``);
* **the sampler is not the trainer** — :func:`truncate_logits` and :func:`truncated_logps`, top-k / top-p sampling
  as ``transformers``' warpers do it, at the trainer's temperature or another, :func:`sample_truncated`, which samples
  so and scores every token under both distributions, and :func:`reward_estimates`, a mean reward from such samples
  with and without the importance weight of :func:`losses.sampler_is_weight`;
* **evaluation that misleads** — :func:`pass_at_k_curve`, pass@k for every k from one set of samples (Yue et al.,
  arXiv 2504.13837).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .losses import sampler_is_weight


# --------------------------------------------------------------------------- entropy collapse
def high_entropy_mask(entropies: torch.Tensor, mask: torch.Tensor, top_quantile: float) -> torch.Tensor:
    """The tokens whose entropy is among the top ``top_quantile`` of the batch's: ``(B, T)`` bool.

    .. math:: m_t = \\mathbb{1}\\big[H_t \\ge \\tau_\\rho\\big]\\,\\text{mask}_t,\\qquad
              \\tau_\\rho = \\operatorname{quantile}_{1-\\rho}\\{H_s : \\text{mask}_s = 1\\}

    with ρ = ``top_quantile`` and the quantile interpolated linearly between the sorted entropies (``torch.quantile``).
    Wang et al. (arXiv 2506.01939) found that a minority of tokens carries the high entropy — the "forks" where a
    reasoning chain can go several ways — and that a policy gradient restricted to them (ρ = 0.2, the "80/20 rule")
    trained as well as the full one while the policy kept more of its entropy. TRL 1.15 does this when
    ``top_entropy_quantile`` < 1 (``GRPOTrainer.get_high_entropy_mask`` with threshold 1 − ρ): the per-token loss is
    multiplied by the mask, and the normaliser still counts every completion token. No valid token: all False.
    """
    if not 0.0 < top_quantile <= 1.0:
        raise ValueError(f"top_quantile must be in (0, 1], got {top_quantile}")
    if entropies.shape != mask.shape:
        raise ValueError(f"entropies {tuple(entropies.shape)} and mask {tuple(mask.shape)} must match")
    valid = mask.bool()
    if not valid.any():
        return torch.zeros_like(valid)
    tau = torch.quantile(entropies[valid].float(), 1.0 - top_quantile)        # the (1 - rho)-quantile
    return (entropies >= tau) & valid


# --------------------------------------------------------------------------- rewards that mislead
class RandomReward:
    """A reward that ignores the completion: 1 with probability ``p``, else 0, drawn independently each call.

    .. math:: r_i \\sim \\text{Bernoulli}(p)\\quad\\text{independently of } o_i

    The random-reward control of Shao et al. ("Spurious Rewards", arXiv 2506.10947, with p = 0.5): whatever a run with
    it changes is not learned from the reward. On-policy (a ratio of 1, as in the course's GRPO recipe) its expected
    policy gradient is 0, but each step's sampled gradient is not: the steps add up to a random walk, and a held-out
    change can be large (notebook 13's run with it can lose much of its start's accuracy) without pointing anywhere the
    reward asked; with clipping active the clip's bias can move a model towards what it already does, which is how the
    paper saw random rewards raise some models' accuracy. The draws come from a generator of its own (``seed``), so
    the run's sampling sees the same global random stream as a run with another reward.
    """

    __name__ = "random_reward"

    def __init__(self, p: float = 0.5, seed: int = 0):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p = p
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, completions: list, **kwargs) -> list[float]:
        draws = torch.rand(len(completions), generator=self.generator) < self.p
        return draws.float().tolist()


def soft_overlong_punishment(lengths, max_completion_length: int, cache: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al., arXiv 2503.14476, eq. 13) for completions of ``lengths`` tokens.

    .. math:: R_\\text{length}(y) = \\begin{cases} 0 & |y| \\le L_{\\max} - L_\\text{cache} \\\\
              \\dfrac{(L_{\\max} - L_\\text{cache}) - |y|}{L_\\text{cache}} & L_{\\max} - L_\\text{cache} < |y| \\le L_{\\max}
              \\\\ -1 & |y| > L_{\\max} \\end{cases}

    Added to the task's reward, it costs nothing below ``L_max − L_cache`` tokens and then falls linearly to −1 at
    the limit, so a policy learns to finish before it is cut, instead of being punished at random by truncation (a
    cut answer has no answer block and scores 0 whatever its working). Returns a float tensor shaped like ``lengths``.
    """
    if not 0 <= cache <= max_completion_length:
        raise ValueError(f"need 0 <= cache <= max_completion_length, got cache {cache}, max {max_completion_length}")
    n = torch.as_tensor(lengths, dtype=torch.float64)
    free = max_completion_length - cache                                        # L_max - L_cache
    ramp = (free - n) / cache if cache else torch.zeros_like(n)
    punishment = torch.where(n <= free, torch.zeros_like(n), ramp)
    return torch.where(n > max_completion_length, torch.full_like(n, -1.0), punishment).float()


class SoftOverlongPunishment:
    """:func:`soft_overlong_punishment` as a reward function in TRL's protocol (it reads ``completion_ids``)."""

    __name__ = "soft_overlong_punishment"

    def __init__(self, max_completion_length: int, cache: int):
        soft_overlong_punishment([0], max_completion_length, cache)               # checks the arguments
        self.max_completion_length, self.cache = max_completion_length, cache

    def __call__(self, completion_ids: Sequence[Sequence[int]], **kwargs) -> list[float]:
        lengths = [len(ids) for ids in completion_ids]
        return soft_overlong_punishment(lengths, self.max_completion_length, self.cache).tolist()


def fixed_and_broken(before: Sequence[bool], after: Sequence[bool]) -> tuple[int, int]:
    """A paired comparison of two runs on the same problems: how many problems ``after`` gets right that ``before``
    got wrong (fixed), and how many the other way (broken).

    Accuracy is ``before`` + (fixed − broken)/n; the two counts say whether a change moved many problems both ways
    (noise, or a trade) or a few one way. Two runs that differ only by chance fix and break about as many problems.
    """
    if len(before) != len(after):
        raise ValueError(f"the runs answered different problems: {len(before)} and {len(after)}")
    fixed = sum(1 for b, a in zip(before, after) if a and not b)
    broken = sum(1 for b, a in zip(before, after) if b and not a)
    return fixed, broken


def paired_z(fixed: int, broken: int) -> float:
    """The z-score of a paired comparison (:func:`fixed_and_broken`): ``(fixed - broken) / sqrt(fixed + broken)``.

    If the two runs differed only by chance, each problem that changed would be fixed or broken with even odds, so
    ``fixed - broken`` would spread as ``sqrt(fixed + broken)``: beyond about ±2 the difference is unlikely to be noise
    (a sign test). 0 when no problem changed.
    """
    if fixed < 0 or broken < 0:
        raise ValueError(f"counts cannot be negative: fixed={fixed}, broken={broken}")
    return (fixed - broken) / max(fixed + broken, 1) ** 0.5


def paired_t(before: Sequence[float], after: Sequence[float]) -> float:
    """The paired t-statistic of a score measured per problem in two runs (a reward model's score of each greedy
    answer, say): the mean of the differences ``after - before`` over its standard error.

    .. math:: t = \\frac{\\bar d}{s_d / \\sqrt n},\\qquad d_i = a_i - b_i,\\quad
              s_d^2 = \\frac{1}{n-1}\\sum_i (d_i - \\bar d)^2

    As with :func:`paired_z`, beyond about ±2 the change is unlikely to be noise: pairing removes what the problems
    themselves contribute to the spread (a hard problem scores low in both runs). 0 when no score changed; ±inf when
    every problem changed by the same amount.
    """
    if len(before) != len(after):
        raise ValueError(f"the runs scored different problems: {len(before)} and {len(after)}")
    if len(before) < 2:
        raise ValueError(f"a paired t needs at least 2 problems, got {len(before)}")
    d = np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0:
        return 0.0 if mean == 0.0 else float(np.copysign(np.inf, mean))
    return mean / (sd / len(d) ** 0.5)


# --------------------------------------------------------------------------- the sampler is not the trainer
def truncate_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """``logits`` with every token outside the top-k / top-p set at −inf, as ``generate``'s warpers leave them.

    Top-k keeps the k largest logits (ties with the k-th kept too); top-p then drops the least likely tokens while
    their total probability stays at most 1 − p, so it keeps the smallest set of most likely tokens whose mass
    reaches p (at least one). The order is ``transformers``': temperature first (divide before calling), then top-k,
    then top-p on what top-k left. ``top_k=0`` and ``top_p=1`` keep everything. Shapes ``(..., V)``.
    """
    if top_k < 0 or not 0.0 < top_p <= 1.0:
        raise ValueError(f"need top_k >= 0 and 0 < top_p <= 1, got top_k {top_k}, top_p {top_p}")
    out = logits
    if 0 < top_k < logits.size(-1):
        kth = torch.topk(out, top_k, dim=-1).values[..., -1:]                     # the k-th largest
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        ascending, order = torch.sort(out, dim=-1)                                 # least likely first
        tail_mass = ascending.softmax(-1).cumsum(-1)                               # mass up to each token, from below
        drop = tail_mass <= 1 - top_p
        drop[..., -1] = False                                                      # the most likely always stays
        out = out.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return out


def truncated_logps(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                    top_p: float = 1.0, sampler_temperature: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of ``tokens`` under the trainer's distribution and under the sampler's.

    .. math:: \\pi_\\text{train}(y_t) = \\operatorname{softmax}(z_t/T)_{y_t},\\qquad
              \\pi_\\text{sample}(y_t) = \\frac{q_t(y_t)\\,\\mathbb{1}[y_t \\in S_t]}{\\sum_{v \\in S_t} q_t(v)},
              \\quad q_t = \\operatorname{softmax}(z_t/T_s)

    where S_t is the set :func:`truncate_logits` keeps of q_t and T_s the sampler's temperature
    (``sampler_temperature``, default: the trainer's T). With T_s = T, for a sampled token (always in S_t),
    log π_train − log π_sample = log Σ_{v∈S_t} π_train(v) ≤ 0: the mass the sampler cut away, never positive, so the
    importance weight π_train/π_sample of every sampled token is at most 1. With T_s ≠ T the ratio takes both signs:
    a colder sampler (T_s < T) over-draws the likely tokens (ratio below 1) and under-draws the rest (above 1).
    ``logits`` ``(B, T, V)``, ``tokens`` ``(B, T)``; returns ``(train_logps, sample_logps)``, both ``(B, T)``,
    float32 (−inf where a token is outside S_t).
    """
    index = tokens.unsqueeze(-1)
    train = torch.log_softmax(logits.float() / temperature, -1).gather(-1, index).squeeze(-1)
    sampler_scaled = logits.float() / (temperature if sampler_temperature is None else sampler_temperature)
    sample = torch.log_softmax(truncate_logits(sampler_scaled, top_k, top_p), -1).gather(-1, index).squeeze(-1)
    return train, sample


@torch.no_grad()
def sample_truncated(model, tokenizer, prompts: list[str], num_samples: int, temperature: float, top_k: int = 0,
                     top_p: float = 1.0, max_new_tokens: int = 48, batch_size: int = 256,
                     sampler_temperature: float | None = None) -> dict:
    """Sample as a sampler configured apart from the trainer would, then score every token under both.

    The sampler draws at ``sampler_temperature`` (default: the trainer's ``temperature``) with top-k / top-p
    truncation (``model.generate``'s warpers); the trainer computes softmax(z/T) at ``temperature``.
    Returns ``{"completions": generation.Completions, "train_logps", "sample_logps"}``: the ``(N, C)`` log-probs of
    the sampled tokens under the trainer's full softmax(z/T) and under the sampler's distribution
    (:func:`truncated_logps`), from one forward pass of ``model`` over each batch, 0 after each completion's end, and
    ``"outside"``: how many sampled tokens that pass placed outside the truncated set (a rounding difference between
    ``generate``'s cached forward and the full one at the set's edge; such a token gets the trainer's log-prob as the
    sampler's, a weight of 1).
    """
    from .generation import eval_mode, sample_completions
    from .losses import mask_positions
    sampler_temperature = temperature if sampler_temperature is None else sampler_temperature
    completions = sample_completions(model, tokenizer, prompts, num_samples=num_samples,
                                     temperature=sampler_temperature, max_new_tokens=max_new_tokens,
                                     batch_size=batch_size, top_k=top_k, top_p=top_p)
    ids, attention = completions.input_ids, completions.attention_mask
    P = completions.prompt_ids.size(1)
    train_parts, sample_parts = [], []
    with eval_mode(model):
        for start in range(0, ids.size(0), batch_size):
            rows = slice(start, start + batch_size)
            logits = model(input_ids=ids[rows], attention_mask=attention[rows],
                           position_ids=mask_positions(attention[rows])).logits[:, P - 1:-1]   # predicts the completion
            train, sample = truncated_logps(logits, ids[rows, P:], temperature, top_k, top_p, sampler_temperature)
            train_parts.append(train)
            sample_parts.append(sample)
    mask = completions.completion_mask.bool()
    train, sample = torch.cat(train_parts), torch.cat(sample_parts)
    outside = torch.isinf(sample) & mask
    sample = torch.where(outside, train, sample)
    zero = torch.zeros_like(train)
    return {"completions": completions, "train_logps": torch.where(mask, train, zero),
            "sample_logps": torch.where(mask, sample, zero), "outside": int(outside.sum())}


def reward_estimates(rewards: torch.Tensor, train_logps: torch.Tensor, sample_logps: torch.Tensor,
                     mask: torch.Tensor, clip_max: float | None = 3.0) -> dict[str, float]:
    """The policy's mean reward estimated from a sampler's completions, naively and with the importance weight.

    .. math:: \\hat\\mu_\\text{naive} = \\frac1N\\sum_i r_i,\\qquad
              \\hat\\mu_\\text{IS} = \\frac1N\\sum_i \\min\\Big(\\prod_t \\frac{\\pi_\\text{train}(o_{i,t})}
              {\\pi_\\text{sample}(o_{i,t})},\\ C\\Big)\\, r_i

    The naive mean estimates the *sampler's* mean reward — what GRPO's group baseline does when the sampler is not
    the trainer. The weighted one (:func:`losses.sampler_is_weight`, ``"sequence_truncate"`` with cap C =
    ``clip_max``: TRL's correction, per completion) estimates the trainer's, up to the completions the sampler can
    never draw: a truncating sampler never draws a token outside its set, so their share of the reward is missing
    from both estimates. ``rewards`` ``(N,)``, log-probs and ``mask`` ``(N, C)``.
    """
    weight = sampler_is_weight(train_logps, sample_logps, mask, "sequence_truncate", None, clip_max)   # (N, 1)
    rewards = rewards.float()
    return {"naive": float(rewards.mean()), "corrected": float((weight.squeeze(-1) * rewards).mean()),
            "mean_weight": float(weight.mean())}


# --------------------------------------------------------------------------- evaluation that misleads
def pass_at_k_curve(model, tokenizer, profile, ks: Sequence[int], temperature: float = 1.0, split: str = "test",
                    batch_size: int = 256) -> dict:
    """pass@k for every k in ``ks`` from one set of ``max(ks)`` samples per held-out problem (Yue et al.'s curve).

    .. math:: \\text{pass@}k = \\frac1n\\sum_{j=1}^{n}\\Big(1 - \\binom{N - c_j}{k}\\Big/\\binom{N}{k}\\Big)

    with N = ``max(ks)`` samples of problem j at ``temperature``, c_j of them right (the unbiased estimator,
    :func:`evaluation.pass_at_k_estimator`). Problems: ``profile.eval_size`` of ``split``; budget
    ``profile.max_new_tokens``. Returns ``{"curve": {k: pass@k}, "right": (n,) right answers per problem,
    "num_samples": N}``. Yue et al. (arXiv 2504.13837) found that RL with verifiable rewards raised pass@1 while the
    base model caught up at large k: RL made the model find answers it could already sample, more often.
    """
    from .chat import chat_prompt
    from .evaluation import heldout_problems, pass_at_k_estimator
    from .generation import sample_completions
    from .rewards import is_correct
    if not ks or min(ks) < 1:
        raise ValueError(f"ks must be positive sample counts, got {ks}")
    num_samples = max(ks)
    problems = heldout_problems(split, profile.eval_size)
    prompts = [chat_prompt(tokenizer, p["question"]) for p in problems]
    samples = sample_completions(model, tokenizer, prompts, num_samples=num_samples, temperature=temperature,
                                 max_new_tokens=profile.max_new_tokens, batch_size=batch_size)
    right = np.array([is_correct(text, problems[i // num_samples]["answer"])
                      for i, text in enumerate(samples.texts)]).reshape(len(problems), num_samples).sum(1)
    curve = {k: float(np.mean([pass_at_k_estimator(num_samples, int(c), k) for c in right])) for k in sorted(ks)}
    return {"curve": curve, "right": right, "num_samples": num_samples}


def gap(curve: dict, low: int = 1, high: int | None = None) -> float:
    """pass@``high`` − pass@``low`` of a :func:`pass_at_k_curve` curve (``high``: its largest k): how much more a
    model solves when it may try many times. A policy whose samples all agree has a gap of 0."""
    high = max(curve) if high is None else high
    return curve[high] - curve[low]

