"""The course's losses, written from scratch as small pure functions of tensors.

Each docstring carries the formula; notebooks derive it on the page, then check
these functions against the library (TRL / transformers) with ``show.compare``.
Shapes: ``B`` batch, ``T`` sequence length, ``V`` vocabulary.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of the chosen tokens: ``log softmax(logits)[..., index]``.

    .. math:: \\log \\pi(y_t) = z_{t, y_t} - \\log \\sum_v e^{z_{t, v}}

    Args:
        logits: ``(B, T, V)`` unnormalised scores.
        index: ``(B, T)`` token ids whose log-probability we want.
    Returns:
        ``(B, T)`` log-probabilities, in the dtype of ``logits``.

    Naive equivalent: ``torch.gather(logits.log_softmax(-1), -1, index[..., None])[..., 0]``.
    Here we subtract ``logsumexp`` from the gathered logit instead, which avoids
    materialising the full ``(B, T, V)`` log-softmax (TRL does the same).
    """
    if logits.shape[:-1] != index.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and index {tuple(index.shape)} disagree: "
                         "need logits (..., V) and index (...)")
    picked = torch.gather(logits, -1, index.unsqueeze(-1)).squeeze(-1)      # (B, T)
    return picked - torch.logsumexp(logits, dim=-1)                          # (B, T)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is 1: ``sum(values * mask) / sum(mask)``.

    Over all elements when ``dim`` is None, else along ``dim``. An all-zero mask
    gives 0 rather than NaN (an empty completion contributes nothing).
    """
    if values.shape != mask.shape:
        raise ValueError(f"values {tuple(values.shape)} and mask {tuple(mask.shape)} must match")
    mask = mask.to(values.dtype)
    total = (values * mask).sum() if dim is None else (values * mask).sum(dim)
    count = mask.sum() if dim is None else mask.sum(dim)
    return total / count.clamp(min=1)


def sft_loss(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Mean next-token cross-entropy over positions whose label is not ``ignore_index``.

    .. math:: \\mathcal{L} = -\\frac{1}{|M|} \\sum_{t \\in M} \\log \\pi_\\theta(x_{t+1} \\mid x_{\\le t})

    ``logits`` ``(B, T, V)`` and ``labels`` ``(B, T)`` are as a causal LM receives
    them (labels = input ids, prompt/pad positions set to ``ignore_index``); the
    function shifts so position ``t`` predicts token ``t+1``. With no masked labels
    this is plain pretraining loss; with the prompt masked it is the SFT loss.
    """
    if logits.dim() != 3 or labels.dim() != 2 or logits.shape[:2] != labels.shape:
        raise ValueError(f"need logits (B, T, V) and labels (B, T); got {tuple(logits.shape)} "
                         f"and {tuple(labels.shape)}")
    shift_logits = logits[:, :-1]                                            # (B, T-1, V)
    shift_labels = labels[:, 1:]                                             # (B, T-1)
    mask = shift_labels != ignore_index
    safe_labels = shift_labels.masked_fill(~mask, 0)
    if shift_logits.dtype in (torch.float16, torch.bfloat16):
        shift_logits = shift_logits.float()  # log-softmax in half precision loses too much
    logps = selective_log_softmax(shift_logits, safe_labels)                # (B, T-1)
    return -masked_mean(logps, mask)


def bradley_terry_loss(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> torch.Tensor:
    """Reward-model loss: mean of ``-log sigmoid(r_chosen - r_rejected)``.

    .. math:: \\mathcal{L} = -\\mathbb{E}\\,\\log \\sigma(r_\\phi(x, y_w) - r_\\phi(x, y_l))

    Under the Bradley-Terry model ``P(y_w > y_l) = sigmoid(r_w - r_l)``; this is the
    negative log-likelihood of the observed preferences. ``logsigmoid`` keeps it
    finite for large margins.
    """
    if chosen_rewards.shape != rejected_rewards.shape:
        raise ValueError(f"chosen {tuple(chosen_rewards.shape)} and rejected "
                         f"{tuple(rejected_rewards.shape)} rewards must have the same shape")
    return -F.logsigmoid(chosen_rewards - rejected_rewards).mean()


def mask_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count only attended tokens: ``cumsum(mask) - 1`` (``(B, T)``; 0 on leading padding).

    ``generate``'s rule for left padding, and TRL's PPO's: a left-padded row's first real token is at
    position 0, as it is when the row is run alone. Rotary embeddings (Qwen3, Llama) see only the
    distance between two positions, so for them a row's offset changes nothing but rounding; learned
    absolute positions (GPT-2) need it.
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def completion_logps(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     completion_mask: torch.Tensor, temperature: float = 1.0,
                     positions: str = "mask") -> torch.Tensor:
    """Per-token log-probabilities of the completion tokens: ``(B, T)``, 0 at prompt and pad positions.

    .. math:: \\log \\pi_\\theta(x_t \\mid x_{<t}) \\text{ for every } t \\text{ with mask}_t = 1

    ``input_ids``/``attention_mask``/``completion_mask`` are ``(B, T)`` over the whole
    sequence (prompt then completion). Logits at position ``t - 1`` predict token ``t``,
    so the function shifts once, divides by ``temperature`` (the distribution the tokens
    were sampled from) and gathers with :func:`selective_log_softmax`. Gradients flow
    unless the caller wraps it in ``torch.no_grad()``. This is the one place where
    the course turns a model's logits into per-token log-probs.

    ``positions``: ``"mask"`` (default) numbers the attended tokens with :func:`mask_positions`, as
    sampling did; ``"index"`` leaves the model's default ``0 .. T-1``, as TRL's ``GRPOTrainer`` computes
    its log-probs (the same for a row without left padding).
    """
    if not (input_ids.shape == attention_mask.shape == completion_mask.shape):
        raise ValueError(f"input_ids {tuple(input_ids.shape)}, attention_mask {tuple(attention_mask.shape)} and "
                         f"completion_mask {tuple(completion_mask.shape)} must have the same (B, T) shape")
    if positions not in ("mask", "index"):
        raise ValueError(f"positions must be 'mask' or 'index', not {positions!r}")
    extra = {"position_ids": mask_positions(attention_mask)} if positions == "mask" else {}
    logits = model(input_ids=input_ids, attention_mask=attention_mask, **extra).logits[:, :-1]   # (B, T-1, V)
    logits = logits.float() / temperature
    logps = selective_log_softmax(logits, input_ids[:, 1:])                               # (B, T-1)
    logps = logps * completion_mask[:, 1:].to(logps.dtype)
    return torch.cat([torch.zeros_like(logps[:, :1]), logps], 1)                          # (B, T)


# ---------------------------------------------------------------------------------------------
# PPO (notebook 05). Shapes: (B, T) over completion tokens; ``mask`` is 1 on real tokens
# (up to and including EOS) and 0 on padding after it.
# ---------------------------------------------------------------------------------------------

KL_KINDS = ("k1", "k2", "k3")


def kl_estimate(logps: torch.Tensor, ref_logps: torch.Tensor, kind: str = "k1") -> torch.Tensor:
    """Per-token estimate of ``KL(π ‖ π_ref)`` from tokens sampled from ``π`` (Schulman's k1/k2/k3).

    With ``log r = ref_logps − logps`` (the log-ratio ``π_ref / π`` at the sampled token):

    * ``"k1"``: ``−log r = logps − ref_logps`` — unbiased, negative on some tokens, the largest
      spread while π ≈ π_ref;
    * ``"k2"``: ``½ (log r)²`` — never negative, biased (exact to second order);
    * ``"k3"``: ``r − 1 − log r = exp(ref − logp) − (ref − logp) − 1`` — unbiased and never negative.

    k2 and k3 have a small spread near π_ref. Far from it they can grow large: k2 on any token whose
    log-ratio is large, k3 where ``r`` blows up, on tokens the policy has made unlikely, which sampling from π
    seldom draws (so k3's measured spread may stay below k1's).

    Each is averaged over samples to estimate the KL; TRL's PPO used k1 as a per-token
    reward penalty, GRPO puts k3 in the loss.
    """
    if logps.shape != ref_logps.shape:
        raise ValueError(f"logps {tuple(logps.shape)} and ref_logps {tuple(ref_logps.shape)} must match")
    log_r = ref_logps - logps
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r ** 2
    if kind == "k3":
        return torch.exp(log_r) - log_r - 1
    raise ValueError(f"kind must be one of {KL_KINDS}, got {kind!r}")


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """``(values − mean) / std`` over the positions where ``mask`` is 1 (mean kept if not ``shift_mean``).

    PPO whitens advantages across the whole batch of tokens so that the policy loss
    has the same scale whatever the reward's units. The variance is the unbiased one,
    as in TRL; positions outside the mask are set to 0.
    """
    mean = masked_mean(values, mask)
    centred = values - mean
    count = mask.to(values.dtype).sum()
    var = masked_mean(centred ** 2, mask) * count / (count - 1).clamp(min=1)
    whitened = centred * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask.to(values.dtype)


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float = 1.0, lam: float = 0.95,
        mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the tokens of each completion.

    .. math::
        \\delta_t = r_t + \\gamma V_{t+1} - V_t, \\qquad
        A_t = \\delta_t + \\gamma \\lambda A_{t+1}, \\qquad R_t = A_t + V_t

    computed backwards from the last position; the value and the advantage *after* the
    last position are 0. ``rewards`` and ``values`` are ``(B, T)``. With a
    ``mask``, rewards and values after a row's EOS are set to 0 first, so those
    positions contribute nothing: their δ is 0 and the EOS token bootstraps from a
    value of 0, exactly as if the sequence ended there. (The advantages and returns
    at masked positions are 0 and are excluded from every loss by the same mask.)
    Returns ``(advantages, returns)``, both ``(B, T)``; neither carries gradient.
    """
    if rewards.shape != values.shape:
        raise ValueError(f"rewards {tuple(rewards.shape)} and values {tuple(values.shape)} must match")
    rewards, values = rewards.detach(), values.detach()
    if mask is not None:
        m = mask.to(values.dtype)
        rewards, values = rewards * m, values * m
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(rewards[:, 0])
    next_advantage = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.size(1))):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        next_advantage = delta + gamma * lam * next_advantage
        advantages[:, t] = next_advantage
        next_value = values[:, t]
    return advantages, advantages + values


def ppo_policy_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
                    mask: torch.Tensor, clip_range: float = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, as a loss to minimise, and the share of tokens where the clip binds.

    .. math::
        \\rho_t = \\exp(\\log\\pi_\\theta - \\log\\pi_{old}), \\quad
        \\mathcal{L} = \\operatorname{mean}_t \\max\\big(-A_t \\rho_t,\\;
        -A_t \\operatorname{clip}(\\rho_t, 1-\\epsilon, 1+\\epsilon)\\big)

    The max of the two negatives is the min of the two objectives: the pessimistic
    bound. ``clipfrac`` is the masked share of tokens where the clipped term is the
    larger loss (there the gradient is zero).
    """
    ratio = torch.exp(logps - old_logps)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = masked_mean(torch.max(unclipped, clipped), mask)
    clipfrac = masked_mean((clipped > unclipped).to(logps.dtype), mask)
    return loss, clipfrac.detach()


def ppo_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
                   clip_range_value: float = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss: ``0.5 · mean max((V − R)², (clip(V, V_old ± ε) − R)²)``, and its clip fraction.

    The new value prediction may move at most ``ε`` from the one made at rollout time
    before the clipped error takes over; taking the larger of the two squared errors
    makes the clip a pessimistic bound, like the policy's.
    """
    clipped_values = torch.clamp(values, old_values - clip_range_value, old_values + clip_range_value)
    unclipped_error = (values - returns) ** 2
    clipped_error = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(unclipped_error, clipped_error), mask)
    clipfrac = masked_mean((clipped_error > unclipped_error).to(values.dtype), mask)
    return loss, clipfrac.detach()


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of ``softmax(logits)``: ``(B, T, V) → (B, T)``, in nats."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


# ---------------------------------------------------------------------------------------------
# Direct preference optimisation and its family (notebook 06). Inputs are sequence
# log-probabilities, shape (B,): the sum over a completion's tokens of log pi(token).
# ---------------------------------------------------------------------------------------------

def dpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
             ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor,
             beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sigmoid DPO loss per pair, and the implicit rewards of both answers.

    .. math:: r(y) = \\beta \\log \\frac{\\pi_\\theta(y \\mid x)}{\\pi_{ref}(y \\mid x)}, \\qquad
              \\ell = -\\log \\sigma\\big(r(y_w) - r(y_l)\\big)

    Returns ``(losses, chosen_rewards, rejected_rewards)``, each ``(B,)``; the rewards
    are detached (they are for logging and preference accuracy, as in TRL). Average
    ``losses`` for the batch loss.
    """
    chosen_rewards = beta * (policy_chosen_logps - ref_chosen_logps)
    rejected_rewards = beta * (policy_rejected_logps - ref_rejected_logps)
    losses = -F.logsigmoid(chosen_rewards - rejected_rewards)
    return losses, chosen_rewards.detach(), rejected_rewards.detach()


def ipo_loss(chosen_logratios: torch.Tensor, rejected_logratios: torch.Tensor, beta: float) -> torch.Tensor:
    """IPO loss per pair: a squared loss that aims the log-ratio margin at ``1 / (2 beta)``.

    .. math:: \\ell = \\Big(h - \\frac{1}{2\\beta}\\Big)^2, \\quad
              h = \\log\\frac{\\pi_\\theta(y_w)}{\\pi_{ref}(y_w)} - \\log\\frac{\\pi_\\theta(y_l)}{\\pi_{ref}(y_l)}

    DPO's sigmoid keeps pushing the margin towards infinity on separable pairs; IPO's
    square stops at a finite target. TRL (and this function's callers) pass log-ratios
    averaged over each completion's tokens.
    """
    return (chosen_logratios - rejected_logratios - 1 / (2 * beta)) ** 2


def simpo_loss(policy_chosen_avg_logps: torch.Tensor, policy_rejected_avg_logps: torch.Tensor,
               beta: float, gamma: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SimPO loss per pair: reference-free, length-normalised, with a target margin ``gamma``.

    .. math:: r(y) = \\frac{\\beta}{|y|} \\log \\pi_\\theta(y \\mid x), \\qquad
              \\ell = -\\log \\sigma\\big(r(y_w) - r(y_l) - \\gamma\\big)

    Inputs are log-probabilities averaged over each completion's tokens. Returns
    ``(losses, chosen_rewards, rejected_rewards)`` like :func:`dpo_loss`.
    """
    chosen_rewards = beta * policy_chosen_avg_logps
    rejected_rewards = beta * policy_rejected_avg_logps
    losses = -F.logsigmoid(chosen_rewards - rejected_rewards - gamma)
    return losses, chosen_rewards.detach(), rejected_rewards.detach()


# ---------------------------------------------------------------------------------------------
# GRPO (notebook 07). Shapes: (B, T) over completion tokens, B = prompts × num_generations with
# each prompt's completions consecutive; ``mask`` is 1 up to and including EOS.
# ---------------------------------------------------------------------------------------------

GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
REWARD_SCALES = ("group", "batch", "none")


def grpo_advantages(rewards: torch.Tensor, num_generations: int, scale: str = "group") -> torch.Tensor:
    """Group-relative advantages: ``(r − group mean) / (std + 1e-4)``, one per completion.

    .. math:: A_i = \\frac{r_i - \\operatorname{mean}(r_{g(i)})}{\\operatorname{std}(r_{g(i)}) + 10^{-4}}

    ``rewards`` is ``(B,)`` with each prompt's ``num_generations`` completions consecutive.
    ``scale`` is TRL's ``scale_rewards``: ``"group"`` divides by each group's std
    (GRPO), ``"batch"`` by the std of the whole batch, ``"none"`` only subtracts the
    group mean (Dr. GRPO: dividing by a small std up-weights easy and hopeless prompts).
    std is the unbiased one (``n − 1``), as TRL's ``nanstd``. A group whose rewards
    are all equal gets advantage 0: it teaches nothing.
    """
    if rewards.dim() != 1 or rewards.numel() % num_generations:
        raise ValueError(f"rewards must be 1-D with whole groups of {num_generations}, got {tuple(rewards.shape)}")
    if scale not in REWARD_SCALES:
        raise ValueError(f"scale must be one of {REWARD_SCALES}, got {scale!r}")
    grouped = rewards.view(-1, num_generations)
    advantages = rewards - grouped.mean(1).repeat_interleave(num_generations)
    if scale == "none":
        return advantages
    std = grouped.std(1).repeat_interleave(num_generations) if scale == "group" else rewards.std().expand_as(rewards)
    return advantages / (std + 1e-4)


SAMPLER_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def sampler_is_weight(trainer_logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor,
                      mode: str = "sequence_mask", clip_min: float | None = None,
                      clip_max: float | None = 3.0) -> torch.Tensor:
    """The importance weight for rollouts drawn by a sampler that is not quite the policy being trained.

    A fast RL system samples with an inference engine (vLLM: other kernels, often lower precision) or, when it is
    asynchronous, with weights some steps old; the trainer then recomputes the log-probs of the same tokens,
    ``trainer_logps`` (π_old), and they differ from the sampler's, ``sampler_logps`` (π_sample). The tokens were drawn
    from π_sample, so the policy gradient of π_old's expectation needs the weight

    .. math:: w = \\frac{\\pi_{old}(o)}{\\pi_{sample}(o)},

    per token (``"token_*"`` modes, shape ``(B, T)``) or per completion (``"sequence_*"``, the product over its tokens:
    the exp of the summed log-ratio, shape ``(B, 1)``). A rare token can make ``w`` huge, so it is bounded:
    ``"*_truncate"`` clips it to ``[clip_min, clip_max]`` (truncated importance sampling: a little bias for much less
    variance), ``"*_mask"`` sets it to 0 outside that range (the token or completion is dropped). ``None`` leaves a
    side open. Positions where ``mask`` is 0, and sampler log-probs that are NaN (unavailable), count as a log-ratio
    of 0. This is TRL 1.15's ``vllm_importance_sampling_correction`` (modes ``vllm_importance_sampling_mode``, bounds
    ``vllm_importance_sampling_clip_min`` / ``_clip_max``; TRL's defaults are ``"sequence_mask"`` and 3.0), and the
    weight multiplies the policy-gradient part of each token's loss (:func:`grpo_loss`'s ``is_weight``), not the KL
    term. It is not PPO's clip: that bounds π_θ/π_old, what this update changes; this one bounds π_old/π_sample, how
    far the sampler was from the trainer before any update.
    """
    if mode not in SAMPLER_IS_MODES:
        raise ValueError(f"mode must be one of {SAMPLER_IS_MODES}, got {mode!r}")
    if trainer_logps.shape != sampler_logps.shape:
        raise ValueError(f"trainer and sampler log-probs differ in shape: {tuple(trainer_logps.shape)} vs "
                         f"{tuple(sampler_logps.shape)}")
    diff = torch.nan_to_num((trainer_logps - sampler_logps) * mask.to(trainer_logps.dtype), nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)
    weight = torch.exp(diff)
    if mode.endswith("truncate"):
        return torch.clamp(weight, min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return weight.masked_fill((weight < low) | (weight > high), 0.0)


def grpo_loss(logps: torch.Tensor, old_logps: torch.Tensor | None, ref_logps: torch.Tensor | None,
              advantages: torch.Tensor, mask: torch.Tensor, beta: float = 0.0, epsilon_low: float = 0.2,
              epsilon_high: float = 0.2, loss_type: str = "grpo", importance_sampling_level: str = "token",
              max_completion_length: int | None = None, use_bias_correction_kl: bool = True,
              is_weight: torch.Tensor | None = None) -> torch.Tensor:
    """The GRPO loss, as TRL 1.15 computes it on one process without gradient accumulation.

    .. math::
        \\rho_{i,t} = \\frac{\\pi_\\theta(o_{i,t})}{\\pi_{old}(o_{i,t})},\\quad
        \\ell_{i,t} = -\\min\\big(\\rho_{i,t} A_i,\\ \\operatorname{clip}(\\rho_{i,t}, 1-\\epsilon_{low}, 1+\\epsilon_{high}) A_i\\big)
        + \\beta\\, \\mathrm{k3}_{i,t}

    with ``k3 = π_ref/π − log(π_ref/π) − 1`` per token. With ``use_bias_correction_kl``
    (TRL 1.15's default, from DeepSeek-V3.2) the k3 term is multiplied by the ratio ρ:
    the tokens were sampled from π_old, and the weight makes the gradient of the KL term
    the unbiased gradient of KL(π_θ ‖ π_ref). Its value is unchanged at ρ = 1, its
    gradient is not (ρ is differentiable). ``old_logps=None`` means
    π_old = π_θ (one update per generation batch): ``logps.detach()``, so ρ = 1 and
    the loss is ``−mean A`` ≈ 0, while its gradient is ``−A ∇log π``.
    ``importance_sampling_level="sequence"`` (GSPO) uses one ratio per completion, the
    exp of the mean per-token log-ratio. The per-token losses ``ℓ`` are reduced by
    ``loss_type``:

    * ``"grpo"``: mean over each completion's tokens, then over completions (a token
      of a short answer weighs more than one of a long answer: the length bias);
    * ``"bnpo"``: mean over all tokens of the batch;
    * ``"dr_grpo"``: sum over the batch / (B · ``max_completion_length``), a constant;
    * ``"dapo"``: sum / number of completion tokens in the generation batch (on one
      process without accumulation the same as ``"bnpo"``); TRL 1.15's default.

    ``is_weight`` (``(B, T)`` or ``(B, 1)``, from :func:`sampler_is_weight`) multiplies the clipped policy-gradient
    term of each token, before the KL term is added, as TRL does when it corrects for its sampler.
    """
    if loss_type not in GRPO_LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {GRPO_LOSS_TYPES}, got {loss_type!r}")
    if importance_sampling_level not in ("token", "sequence"):
        raise ValueError(f"importance_sampling_level must be 'token' or 'sequence', got {importance_sampling_level!r}")
    if beta != 0.0 and ref_logps is None:
        raise ValueError("beta > 0 needs ref_logps (the reference model's per-token log-probs)")
    if loss_type == "dr_grpo" and max_completion_length is None:
        raise ValueError("loss_type='dr_grpo' divides by max_completion_length: pass it")
    mask = mask.to(logps.dtype)
    old_logps = logps.detach() if old_logps is None else old_logps
    log_ratio = logps - old_logps
    if importance_sampling_level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)     # (B, 1)
    ratio = torch.exp(log_ratio)
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * adv)
    if is_weight is not None:
        per_token = per_token * is_weight
    if beta != 0.0:
        kl = kl_estimate(logps, ref_logps, "k3")
        per_token = per_token + beta * (kl * ratio if use_bias_correction_kl else kl)
    per_token = per_token * mask                                                               # (B, T)
    if loss_type == "grpo":
        return (per_token.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "dr_grpo":
        return per_token.sum() / (per_token.size(0) * max_completion_length)
    return per_token.sum() / mask.sum().clamp(min=1.0)                                       # bnpo, dapo


def soft_distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0,
                           mask: torch.Tensor | None = None) -> torch.Tensor:
    """Hinton's soft-label loss: T² · mean over (masked) positions of KL(softmax(teacher/T) ‖ softmax(student/T)).

    .. math:: \\mathcal{L} = T^2\\,\\frac{1}{|M|}\\sum_{t\\in M}\\sum_v p^T_{t,v}\\,(\\log p^T_{t,v} - \\log q^T_{t,v}),
              \\quad p^T = \\mathrm{softmax}(z_\\text{teacher}/T),\\ q^T = \\mathrm{softmax}(z_\\text{student}/T)

    Logits are ``(..., vocab)``; ``mask`` (``(...)``, 1 = counts) picks the positions, all
    of them if None. The T² keeps the gradient's size roughly independent of T (without it,
    the soft targets' gradient shrinks like 1/T² once T is large compared with the logit
    gaps). The teacher's logits are detached: only the student learns.
    TRL's ``GKDTrainer.generalized_jsd_loss`` with ``beta=0`` is the same KL without the T².
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                         f"{tuple(teacher_logits.shape)} differ (a shared vocabulary is required)")
    log_q = F.log_softmax(student_logits / temperature, dim=-1)
    log_p = F.log_softmax(teacher_logits.detach() / temperature, dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)                                   # (...)
    if mask is None:
        mask = torch.ones_like(kl)
    return temperature ** 2 * masked_mean(kl, mask.to(kl.dtype))


def distillation_mix_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor,
                          alpha: float, temperature: float = 1.0) -> torch.Tensor:
    """Hinton's mix: ``alpha`` · soft-label loss + (1 − ``alpha``) · hard-label cross-entropy.

    .. math:: \\mathcal{L} = \\alpha\\,T^2\\,\\mathrm{KL}(p^T \\| q^T) + (1-\\alpha)\\,\\mathrm{CE}(y, q)

    ``labels`` ``(B, T)`` as for :func:`sft_loss` (-100 off the answer); logits ``(B, T, V)``
    unshifted. Both terms are averaged over the same answer positions (shifted, so
    position t predicts token t+1); the cross-entropy uses the student at temperature 1.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    mask = (labels[:, 1:] != -100)
    soft = soft_distillation_loss(student_logits[:, :-1], teacher_logits[:, :-1], temperature, mask)
    return alpha * soft + (1 - alpha) * sft_loss(student_logits, labels)


def generalized_jsd(student_logits: torch.Tensor, teacher_logits: torch.Tensor, beta: float,
                    temperature: float = 1.0, mask: torch.Tensor | None = None,
                    reduction: str = "mean") -> torch.Tensor:
    """The divergence GKD and TRL's distillation trainers minimise, mean over (masked) positions
    (``reduction="none"``: one value per position, the mask ignored).

    With ``p`` the teacher's and ``q`` the student's softmax at temperature T:
    ``beta = 0`` gives the forward KL(p ‖ q) (mode-covering), ``beta = 1`` the reverse
    KL(q ‖ p) (mode-seeking), and 0 < ``beta`` < 1 the generalised Jensen-Shannon divergence

    .. math:: \\mathrm{JSD}_\\beta = \\beta\\,\\mathrm{KL}(p \\| m) + (1-\\beta)\\,\\mathrm{KL}(q \\| m),
              \\quad m = \\beta p + (1-\\beta) q .

    As in TRL (and unlike :func:`soft_distillation_loss`) there is no T² factor. The teacher is detached.
    """
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must lie in [0, 1], got {beta}")
    if reduction not in ("mean", "none"):
        raise ValueError(f"reduction must be 'mean' or 'none', got {reduction!r}")
    log_q = F.log_softmax(student_logits / temperature, dim=-1)
    log_p = F.log_softmax(teacher_logits.detach() / temperature, dim=-1)

    def kl(log_a, log_b):                                                   # KL(a || b) per position
        return (log_a.exp() * (log_a - log_b)).sum(-1)

    if beta == 0.0:
        div = kl(log_p, log_q)
    elif beta == 1.0:
        div = kl(log_q, log_p)
    else:
        log_m = torch.logsumexp(torch.stack([log_p + math.log(beta), log_q + math.log(1 - beta)]), dim=0)
        div = beta * kl(log_p, log_m) + (1 - beta) * kl(log_q, log_m)
    if reduction == "none":
        return div
    if mask is None:
        mask = torch.ones_like(div)
    return masked_mean(div, mask.to(div.dtype))


def hidden_state_loss(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor,
                      mask: torch.Tensor | None = None) -> torch.Tensor:
    """Intermediate-layer distillation: mean squared error between (projected) student and teacher states.

    .. math:: \\mathcal{L} = \\frac{1}{|M|}\\sum_{t\\in M} \\frac{\\lVert W h^s_t - h^t_t \\rVert^2}
              {\\lVert h^t_t \\rVert^2 + \\epsilon}

    Both ``(B, T, D)``: the caller applies the projection ``W`` that lifts the student's
    width to the teacher's. Each position's error is divided by the teacher state's
    squared norm, so layers of different scale weigh alike. The teacher is detached.
    """
    if student_hidden.shape != teacher_hidden.shape:
        raise ValueError(f"student states {tuple(student_hidden.shape)} and teacher states "
                         f"{tuple(teacher_hidden.shape)} differ: project the student's first")
    target = teacher_hidden.detach()
    err = ((student_hidden - target) ** 2).sum(-1) / ((target ** 2).sum(-1) + 1e-6)
    if mask is None:
        mask = torch.ones_like(err)
    return masked_mean(err, mask.to(err.dtype))
