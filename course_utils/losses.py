"""The course's losses, written from scratch as small pure functions of tensors.

Each docstring carries the formula; notebooks derive it on the page, then check
these functions against the library (TRL / transformers) with ``checks.compare``.
Shapes: ``B`` batch, ``T`` sequence length, ``V`` vocabulary.
"""
from __future__ import annotations

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


def completion_logps(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     completion_mask: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Per-token log-probabilities of the completion tokens: ``(B, T)``, 0 at prompt and pad positions.

    .. math:: \\log \\pi_\\theta(x_t \\mid x_{<t}) \\text{ for every } t \\text{ with mask}_t = 1

    ``input_ids``/``attention_mask``/``completion_mask`` are ``(B, T)`` over the whole
    sequence (prompt then completion). Logits at position ``t - 1`` predict token ``t``,
    so the function shifts once, divides by ``temperature`` (the distribution the tokens
    were sampled from) and gathers with :func:`selective_log_softmax`. Gradients flow
    unless the caller wraps it in ``torch.no_grad()``. This is the one place where
    the course turns a model's logits into per-token log-probs.
    """
    if not (input_ids.shape == attention_mask.shape == completion_mask.shape):
        raise ValueError(f"input_ids {tuple(input_ids.shape)}, attention_mask {tuple(attention_mask.shape)} and "
                         f"completion_mask {tuple(completion_mask.shape)} must have the same (B, T) shape")
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]     # (B, T-1, V)
    logits = logits.float() / temperature
    logps = selective_log_softmax(logits, input_ids[:, 1:])                               # (B, T-1)
    logps = logps * completion_mask[:, 1:].to(logps.dtype)
    return torch.cat([torch.zeros_like(logps[:, :1]), logps], 1)                          # (B, T)
