"""Make TRL 1.15's trainers run on a CPU-only machine.

TRL 1.15 computes the token log-probabilities of SFT, DPO, GRPO, RLOO and KTO with
``trl.kernels.ChunkedLogProbFunction``, a Triton kernel. The CPU build of PyTorch
ships without Triton, so TRL sets the function to ``None`` and training fails with
``'NoneType' object has no attribute 'apply'``. TRL 1.16 added a torch fallback,
but unsloth (the GPU capstone) caps TRL at 1.15, and the course keeps one
environment for both paths.

:class:`DenseLogProbFunction` is that fallback: the same inputs and outputs,
computed densely with ordinary torch ops (autograd provides the backward). The
tiny model's vocabulary is ~600 tokens, so materialising the logits costs nothing.
Where Triton is present (a GPU machine) nothing is replaced.
"""
from __future__ import annotations

import torch

ALL_OUTPUTS = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


class DenseLogProbFunction:
    """Drop-in for ``trl.kernels.ChunkedLogProbFunction`` (same ``apply`` signature).

    With ``z = softcap(logit_scale * (hidden @ weight.T + bias)) / temperature`` and
    ``log p = log_softmax(z)`` it returns, per token, the tuple
    ``(log p[target], entropy, log sum_v p_v^2, mean_v z_v, target is argmax)``,
    with ``None`` for fields not asked for in ``outputs``.
    """

    @staticmethod
    def apply(hidden, weight, bias, targets, temperature, chunk_size=None, final_logit_softcapping=None,
              logit_scale=1.0, outputs=ALL_OUTPUTS):
        z = torch.nn.functional.linear(hidden.float(), weight.float(), None if bias is None else bias.float())
        z = z * logit_scale
        if final_logit_softcapping:
            z = final_logit_softcapping * torch.tanh(z / final_logit_softcapping)
        z = z / temperature                                                   # (N, V)
        logp = z.log_softmax(-1)
        log_probs = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)        # (N,)
        entropy = -(logp.exp() * logp).sum(-1) if "entropy" in outputs else None
        with torch.no_grad():
            log_sum_sq = torch.logsumexp(2 * logp, -1) if "log_sum_sq_probs" in outputs else None
            mean_logits = z.mean(-1) if "mean_logits" in outputs else None
            is_top1 = (z.argmax(-1) == targets) if "is_top1" in outputs else None
        return log_probs, entropy, log_sum_sq, mean_logits, is_top1


def install_trl_cpu_fallback() -> bool:
    """Give TRL the dense fallback if its Triton kernel is unavailable; True if installed."""
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:  # TRL not installed: nothing to patch
        return False
    if getattr(trl_utils, "_ChunkedLogProbFunction", None) is None:
        trl_utils._ChunkedLogProbFunction = DenseLogProbFunction
        return True
    return trl_utils._ChunkedLogProbFunction is DenseLogProbFunction
