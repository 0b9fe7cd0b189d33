"""The course's own PPO for a language model (notebook 05): one short function per phase.

TRL removed its ``PPOTrainer`` in 1.13, so the course writes PPO itself, without a
framework. The phases follow the numbered steps of TRL's ``PPOTrainer.train`` (up to
1.12), which the seed walks through:

=====================  ===============================================  ===========================
TRL step               what happens                                     here
=====================  ===============================================  ===========================
1. generate            sample one completion per prompt                 :func:`rollout`
2. logprobs, values    π_old and π_ref log-probs; V_old per token       :func:`policy_value_forward`,
                                                                        ``generation.logps_under``
3. scores              the reward model (or verifier) scores each       :func:`verifier_scores`,
                       completion; a missing EOS is penalised           :func:`reward_model_scores`
4. compute rewards     −β·KL on every token, + score on the last        :func:`shaped_rewards`
5. whiten rewards      (optional in TRL, off by default; not used)      —
6. advantages          GAE, returns = A + V; whiten A                   ``losses.gae``, ``losses.masked_whiten``
training loop          epochs × minibatches of the clipped policy       :func:`ppo_update`
                       loss + ``vf_coef`` · clipped value loss
=====================  ===============================================  ===========================

:func:`ppo_step` is one iteration (steps 1–6 and the update); :func:`train` repeats
it and returns the log of every iteration. Shapes: ``B`` rollouts, ``P`` prompt
tokens, ``C`` completion tokens; per-token tensors are ``(B, C)`` over the completion.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from .chat import chat_prompt
from .evaluation import score_completions
from .generation import Completions, eos_token_ids, logps_under, sample_completions
from .losses import (entropy_from_logits, gae, kl_estimate, mask_positions, masked_mean, masked_whiten,
                     ppo_policy_loss, ppo_value_loss, selective_log_softmax)
from .modeling import disable_dropout
from .progress import trange
from .recipes import PPORecipe
from .rewards import accuracy_reward

ScoreFn = Callable[[list[str], list[dict]], torch.Tensor]   # (completion texts, problems) -> (B,) scores


class PolicyAndValue(nn.Module):
    """The policy and the value model behind one ``forward``, as TRL's ``PolicyAndValueWrapper``.

    ``value_model`` is a sequence classifier with one label (a backbone plus a linear
    ``score`` head). A reward model scores the *last* token; the value model applies
    the same head to *every* token's hidden state, so ``V`` is defined at each position.
    Both live in one module so that one optimizer updates both.
    """

    def __init__(self, policy: nn.Module, value_model: nn.Module):
        super().__init__()
        self.policy = policy
        self.value_model = value_model
        self.critic_backbone = getattr(value_model, value_model.base_model_prefix)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits (B, T, V), values (B, T))``."""
        positions = mask_positions(attention_mask)   # as sampling numbered them (and TRL's PPO)
        logits = self.policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions).logits
        hidden = self.critic_backbone(input_ids=input_ids, attention_mask=attention_mask,
                                      position_ids=positions).last_hidden_state
        values = self.value_model.score(hidden).squeeze(-1)
        return logits, values.float()


@dataclass
class Rollouts:
    """One PPO batch: the completions and every per-token quantity computed from them (steps 1–6)."""

    completions: Completions
    problems: list[dict]
    scores: torch.Tensor        # (B,)   reward of each completion (after the missing-EOS penalty)
    logps: torch.Tensor         # (B, C) log π_old of each completion token
    ref_logps: torch.Tensor     # (B, C) log π_ref
    values: torch.Tensor        # (B, C) V_old: the value of the state before each token
    kl: torch.Tensor            # (B, C) per-token KL estimate (0 after EOS)
    rewards: torch.Tensor       # (B, C) −β·KL, plus the score on the last token
    advantages: torch.Tensor    # (B, C) GAE, whitened when the recipe says so
    returns: torch.Tensor       # (B, C) advantages (before whitening) + values

    @property
    def mask(self) -> torch.Tensor:
        return self.completions.completion_mask


def load_models(profile, start: str = "sft_cold"):
    """Fresh ``(policy, reference, value_model, tokenizer)`` for a PPO run, each loaded from disk.

    The policy and the frozen reference are two copies of stage ``start``
    (:func:`stages.load_policy_and_reference`); the value model is the same backbone under
    a new one-output ``score`` head (TRL initialised it from the reward model instead; here
    the verifier run has none). All three are float32, for the reason given there, and without
    dropout (:func:`modeling.disable_dropout`, as TRL's PPO had it).
    """
    from transformers import AutoModelForSequenceClassification

    from .stages import load_policy_and_reference, load_stage

    policy, reference, tokenizer = load_policy_and_reference(profile, start)
    value_model, _ = load_stage(start, profile, model_class=AutoModelForSequenceClassification, num_labels=1)
    disable_dropout(policy, reference, value_model)
    return policy, reference, value_model.float(), tokenizer


def rollout(policy, tokenizer, problems: list[dict], recipe: PPORecipe) -> Completions:
    """Step 1: ``recipe.samples_per_prompt`` sampled completions per problem, at the recipe's temperature.

    ``problems`` has one entry per completion (a problem repeated ``samples_per_prompt``
    times in a row), so that row ``i`` of every tensor belongs to ``problems[i]``.
    """
    k = recipe.samples_per_prompt
    prompts = [chat_prompt(tokenizer, p["question"]) for p in problems[::k]]
    return sample_completions(policy, tokenizer, prompts, num_samples=k, temperature=recipe.temperature,
                              max_new_tokens=recipe.max_new_tokens, batch_size=len(problems))


def policy_value_forward(model: PolicyAndValue, completions: Completions, temperature: float = 1.0,
                         rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward pass: per-token ``(logps, values, entropy)``, each ``(B, C)`` over the completion.

    The logits and the value at position ``t − 1`` belong to completion token ``t``
    (the state *before* the token is chosen), hence the slice ``P − 1 : −1``.
    ``rows`` selects a minibatch.
    """
    ids, attn, comp = completions.input_ids, completions.attention_mask, completions.completion_ids
    if rows is not None:
        ids, attn, comp = ids[rows], attn[rows], comp[rows]
    device = next(model.parameters()).device
    start = completions.prompt_ids.size(1) - 1
    logits, values = model(ids.to(device), attn.to(device))
    logits = logits[:, start:-1].float() / temperature                       # (B, C, V)
    logps = selective_log_softmax(logits, comp.to(device))                    # (B, C)
    return logps, values[:, start:-1], entropy_from_logits(logits)


@torch.no_grad()
def verifier_scores(texts: list[str], problems: list[dict]) -> torch.Tensor:
    """Step 3 with a rule: 1 for a right ``<answer>``, else 0 (``rewards.accuracy_reward``)."""
    return torch.tensor(accuracy_reward(texts, answer=[p["answer"] for p in problems]))


def reward_model_scores(reward_model, tokenizer) -> ScoreFn:
    """Step 3 with a learned reward model: a score function for :func:`ppo_step`."""
    def score(texts: list[str], problems: list[dict]) -> torch.Tensor:
        return score_completions(reward_model, tokenizer, [p["question"] for p in problems], texts)
    return score


def changed_answers(before, after, k: int = 6) -> str:
    """Markdown: how many greedy answers changed between two evaluations on the same held-out problems, and the first
    ``k`` that did, side by side (question, before, right?, after, right?).

    ``before`` and ``after`` are ``Eval.samples`` (``experiment.evaluate(..., keep_samples=True)``): dicts with
    ``question``, ``completion`` and ``correct``, one per problem, in the same order.
    """
    if len(before) != len(after) or any(b["question"] != a["question"] for b, a in zip(before, after)):
        raise ValueError("before and after must be evaluations of the same problems, in the same order")
    changed = [(b, a) for b, a in zip(before, after) if b["completion"] != a["completion"]]

    def cell(s):
        return "`" + s["completion"].replace("|", "\\|").replace("\n", " ") + "`"

    rows = [f"{len(changed)} of {len(before)} greedy answers changed" + (f"; the first {min(k, len(changed))}:"
                                                                       if changed else "."), "",
            "| question | before | ✓ | after | ✓ |", "|---|---|---|---|---|"]
    for b, a in changed[:k]:
        rows.append(f"| {b['question']} | {cell(b)} | {'✓' if b['correct'] else '✗'} | {cell(a)} | "
                    f"{'✓' if a['correct'] else '✗'} |")
    return "\n".join(rows if changed else rows[:1])


def finished(completions: Completions, eos_ids: list[int]) -> torch.Tensor:
    """``(B,)`` True where the completion ends with an EOS token (was not cut off)."""
    last = completions.completion_ids.gather(1, (completions.lengths - 1).clamp(min=0)[:, None])[:, 0]
    return torch.isin(last, torch.tensor(eos_ids))


def shaped_rewards(scores: torch.Tensor, logps: torch.Tensor, ref_logps: torch.Tensor, mask: torch.Tensor,
                   kl_coef: float, kl_estimator: str = "k1") -> tuple[torch.Tensor, torch.Tensor]:
    """Step 4: per-token rewards ``−β·KL_t`` on every token, plus the score on the last one.

    Returns ``(rewards, kl)``, both ``(B, C)`` and 0 after each row's EOS. The score
    arrives only at the end, so GAE has to carry it back to earlier tokens; the KL term
    pays every token for staying close to the reference.
    """
    kl = kl_estimate(logps, ref_logps, kl_estimator) * mask
    rewards = -kl_coef * kl
    last = (mask.sum(1).long() - 1).clamp(min=0)                                  # index of the EOS (or last) token
    rewards[torch.arange(rewards.size(0)), last] += scores.to(rewards.dtype)
    return rewards, kl


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    """``1 − Var(R − V) / Var(R)`` over masked tokens: 1 is a perfect critic, 0 is a constant one."""
    var_returns = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
    residual = returns - values
    var_residual = masked_mean((residual - masked_mean(residual, mask)) ** 2, mask)
    return float(1 - var_residual / var_returns.clamp(min=1e-8))


@torch.no_grad()
def make_rollouts(model: PolicyAndValue, ref_policy, tokenizer, problems: list[dict], score_fn: ScoreFn,
                  recipe: PPORecipe) -> Rollouts:
    """Steps 1–6: sample, score, log-probs and values, KL-shaped rewards, GAE."""
    completions = rollout(model.policy, tokenizer, problems, recipe)                       # 1
    mask = completions.completion_mask.float()
    scores = score_fn(completions.texts, problems).float()                                 # 3
    scores = scores - recipe.missing_eos_penalty * (~finished(completions, eos_token_ids(tokenizer, model.policy))).float()
    model.eval()
    logps, values, _ = policy_value_forward(model, completions, recipe.temperature)       # 2
    ref = logps_under(ref_policy, completions, recipe.temperature)                        # 2: π_ref
    logps, values, ref = logps.cpu() * mask, values.cpu() * mask, ref.cpu() * mask
    rewards, kl = shaped_rewards(scores, logps, ref, mask, recipe.kl_coef, recipe.kl_estimator)  # 4
    advantages, returns = gae(rewards, values, recipe.gamma, recipe.lam, mask)            # 6
    if recipe.whiten_advantages:
        advantages = masked_whiten(advantages, mask)
    return Rollouts(completions, problems, scores, logps, ref, values, kl, rewards, advantages, returns)


def ppo_update(model: PolicyAndValue, optimizer: torch.optim.Optimizer, batch: Rollouts,
               recipe: PPORecipe, generator: torch.Generator | None = None) -> dict:
    """Several epochs of minibatch updates on one batch: clipped policy loss + ``vf_coef`` · clipped value loss.

    Returns the means over all minibatches of the losses, clip fractions, entropy and
    the ratio, plus ``approx_kl``: ``½·mean (log π − log π_old)²`` measured at the start
    of each epoch after the first (how far the policy moved from the one that sampled).
    """
    model.train()
    device = next(model.parameters()).device
    mask = batch.mask.float()
    log = {k: [] for k in ("policy_loss", "value_loss", "policy_clipfrac", "value_clipfrac", "entropy",
                           "ratio", "approx_kl")}
    n = mask.size(0)
    for epoch in range(recipe.ppo_epochs):
        order = torch.randperm(n, generator=generator)
        for i, rows in enumerate(order.split(recipe.minibatch_size)):
            m = mask[rows].to(device)
            logps, values, entropy = policy_value_forward(model, batch.completions, recipe.temperature, rows)
            old_logps = batch.logps[rows].to(device)
            pg_loss, pg_clipfrac = ppo_policy_loss(logps, old_logps, batch.advantages[rows].to(device), m,
                                                   recipe.clip_range)
            vf_loss, vf_clipfrac = ppo_value_loss(values, batch.values[rows].to(device),
                                                  batch.returns[rows].to(device), m, recipe.clip_range_value)
            mean_entropy = masked_mean(entropy, m)
            loss = pg_loss + recipe.vf_coef * vf_loss - recipe.entropy_coef * mean_entropy
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), recipe.max_grad_norm)
            optimizer.step()
            log_ratio = (logps - old_logps).detach()
            log["policy_loss"].append(pg_loss.item())
            log["value_loss"].append(vf_loss.item())
            log["policy_clipfrac"].append(pg_clipfrac.item())
            log["value_clipfrac"].append(vf_clipfrac.item())
            log["entropy"].append(mean_entropy.item())
            log["ratio"].append(masked_mean(log_ratio.exp(), m).item())
            if epoch > 0 and i == 0:
                log["approx_kl"].append(masked_mean(0.5 * log_ratio ** 2, m).item())
    return {k: sum(v) / len(v) if v else 0.0 for k, v in log.items()}


def ppo_step(model: PolicyAndValue, ref_policy, tokenizer, optimizer, problems: list[dict], score_fn: ScoreFn,
             recipe: PPORecipe, generator: torch.Generator | None = None) -> tuple[dict, Rollouts]:
    """One PPO iteration: rollouts and everything computed from them, then the update. Returns ``(stats, rollouts)``."""
    batch = make_rollouts(model, ref_policy, tokenizer, problems, score_fn, recipe)
    stats = ppo_update(model, optimizer, batch, recipe, generator)
    mask = batch.mask.float()
    stats.update(
        score=batch.scores.mean().item(),
        kl=(batch.kl.sum(1)).mean().item(),                    # per completion, summed over its tokens
        non_score_reward=(batch.rewards.sum(1) - batch.scores).mean().item(),
        length=batch.completions.lengths.float().mean().item(),
        explained_variance=explained_variance(batch.values, batch.returns, mask),
        value=masked_mean(batch.values, mask).item(),
        correct=verifier_scores(batch.completions.texts, batch.problems).mean().item(),  # the truth, whatever the reward
    )
    return stats, batch


def make_optimizer(model: PolicyAndValue, recipe: PPORecipe) -> torch.optim.AdamW:
    """One AdamW over policy and value model (as TRL's wrapper had), in two parameter groups.

    The value model's group runs at ``recipe.value_learning_rate`` when it is set. Adam
    rescales every parameter's gradient, so ``vf_coef`` barely changes how fast the critic
    learns; its own learning rate does.
    """
    value_lr = recipe.value_learning_rate if recipe.value_learning_rate is not None else recipe.learning_rate
    return torch.optim.AdamW([{"params": list(model.policy.parameters())},
                              {"params": list(model.value_model.parameters()), "lr": value_lr}],
                             lr=recipe.learning_rate, eps=1e-5)


def train(policy, value_model, ref_policy, tokenizer, problems: list[dict], score_fn: ScoreFn,
          recipe: PPORecipe, seed: int = 0, progress: bool = True) -> list[dict]:
    """Run ``recipe.steps`` PPO iterations on prompts drawn from ``problems``; returns one stats dict per step.

    ``policy`` and ``value_model`` are trained in place; ``ref_policy`` stays frozen.
    Each step takes ``recipe.rollouts_per_step`` problems from a shuffled pass over
    ``problems`` (reshuffled when it runs out).
    """
    model = PolicyAndValue(policy, value_model)
    ref_policy.eval().requires_grad_(False)
    optimizer = make_optimizer(model, recipe)
    rng, generator = random.Random(seed), torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    order, history, t0 = [], [], time.perf_counter()
    bar = trange(recipe.steps, desc="PPO", disable=not progress)
    for step in bar:
        n_prompts = recipe.rollouts_per_step // recipe.samples_per_prompt
        if len(order) < n_prompts:
            order += rng.sample(range(len(problems)), len(problems))
        batch_problems = [problems[i] for i in order[:n_prompts] for _ in range(recipe.samples_per_prompt)]
        del order[:n_prompts]
        stats, _ = ppo_step(model, ref_policy, tokenizer, optimizer, batch_problems, score_fn, recipe, generator)
        stats.update(step=step + 1, seconds=time.perf_counter() - t0)
        history.append(stats)
        bar.set_postfix(score=f"{stats['score']:.2f}", kl=f"{stats['kl']:.2f}")
    model.eval()
    return history
