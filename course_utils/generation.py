"""Generating text: greedy answers for evaluation, sampled completions for RL.

* :func:`eval_mode` — "eval mode, this padding side" for the duration of a block,
  restored afterwards even on an error.
* :func:`generate` — complete prompts, return only the new text (greedy by default).
* :func:`sample_completions` — ``num_samples`` completions per prompt with their token
  ids, a completion mask that stops after the first EOS and, when asked, per-token
  log-probabilities. PPO rollouts, rejection sampling, best-of-N and sequence-level
  distillation all start here.
* :func:`logps_under` — the same completions scored by another model (a reference).

Decoding itself is :func:`engine.decode` (a KV-cached loop of the course's own) where the
model supports it, else ``model.generate``.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from . import engine
from .losses import completion_logps
from .progress import tqdm


@contextmanager
def eval_mode(model, tokenizer=None, padding_side: str | None = None):
    """Put ``model`` in eval mode (and ``tokenizer`` on ``padding_side``) inside the block.

    Both are restored on exit, also when the block raises. Generation pads on the
    left (every row's continuation starts at the same column); scoring pads on the right.
    """
    was_training = model.training
    old_side = tokenizer.padding_side if tokenizer is not None else None
    model.eval()
    if tokenizer is not None and padding_side is not None:
        tokenizer.padding_side = padding_side
    try:
        yield model
    finally:
        model.train(was_training)
        if tokenizer is not None:
            tokenizer.padding_side = old_side


def _check_prompts(prompts) -> list[str]:
    if not isinstance(prompts, (list, tuple)) or not all(isinstance(p, str) for p in prompts):
        raise TypeError("prompts must be a list of strings")
    return list(prompts)


def eos_token_ids(tokenizer, model) -> list[int]:
    """Every token id that ends a completion (the tokenizer's EOS and the model's)."""
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos])
    return sorted(i for i in ids if i is not None)


def _sampling_kwargs(tokenizer, eos_ids: list[int], max_new_tokens: int, temperature: float, top_k: int = 0,
                     top_p: float = 1.0) -> dict:
    """``generate`` arguments: greedy at temperature 0, else sampling from softmax(z / T), truncated to the top-k /
    top-p set where asked."""
    kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id, eos_token_id=eos_ids)
    if temperature == 0:
        return dict(kwargs, do_sample=False)
    # top_k=0 and top_p=1 (the defaults) switch off the generation config's truncations: the full distribution.
    return dict(kwargs, do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p)


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], max_new_tokens: int = 48, batch_size: int = 64,
             temperature: float = 0.0, progress: bool = False) -> list[str]:
    """Complete each prompt; returns only the new text, special tokens removed.

    Greedy at ``temperature=0`` (the default, which makes evaluation deterministic);
    sampled from ``softmax(logits / temperature)`` otherwise.
    """
    return sample_completions(model, tokenizer, prompts, num_samples=1, temperature=temperature,
                              max_new_tokens=max_new_tokens, batch_size=batch_size, progress=progress).texts


@dataclass
class Completions:
    """Sampled completions, grouped by prompt: row ``i`` answers ``prompts[i // num_samples]``.

    Attributes:
        texts: decoded completions (special tokens removed), ``N = len(prompts) * num_samples``.
        prompt_ids, prompt_mask: ``(N, P)`` left-padded prompt tokens and their attention mask.
        completion_ids: ``(N, C)`` generated tokens, right-padded with the pad token.
        completion_mask: ``(N, C)`` 1 up to and including the first EOS, 0 after it.
        logps: ``(N, C)`` log-probabilities of the generated tokens under the sampling
            distribution (0 where the mask is 0), or None if not asked for.
        num_samples: completions per prompt.
    """

    texts: list[str]
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    logps: torch.Tensor | None
    num_samples: int

    @property
    def input_ids(self) -> torch.Tensor:
        """``(N, P + C)`` prompt and completion, as one sequence."""
        return torch.cat([self.prompt_ids, self.completion_ids], 1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], 1)

    @property
    def full_completion_mask(self) -> torch.Tensor:
        """``(N, P + C)`` the completion mask aligned with :attr:`input_ids` (prompt positions 0)."""
        return torch.cat([torch.zeros_like(self.prompt_mask), self.completion_mask], 1)

    @property
    def lengths(self) -> torch.Tensor:
        """``(N,)`` completion lengths in tokens, EOS included."""
        return self.completion_mask.sum(1)


@torch.no_grad()
def logps_under(model, completions: "Completions", temperature: float = 1.0,
                batch_size: int | None = None) -> torch.Tensor:
    """``(N, C)`` log-probs of ``completions``' tokens under ``model`` (0 after each EOS).

    The same positions as ``completions.logps`` (which hold the sampling model's own),
    so a log-ratio to a reference is ``completions.logps - logps_under(reference, completions)``.
    ``batch_size`` rows per forward pass (default: all at once).
    """
    device = next(model.parameters()).device
    n = len(completions.texts)
    batch_size = batch_size or n
    parts = []
    with eval_mode(model):
        for start in range(0, n, batch_size):
            rows = slice(start, start + batch_size)
            logps = completion_logps(model, completions.input_ids[rows].to(device),
                                     completions.attention_mask[rows].to(device),
                                     completions.full_completion_mask[rows].to(device), temperature)
            parts.append(logps[:, completions.prompt_ids.size(1):])
    return torch.cat(parts)


def completion_mask_after_eos(completion_ids: torch.Tensor, eos_ids: list[int]) -> torch.Tensor:
    """``(N, C)`` mask: 1 up to and including the first EOS of each row, 0 after; all 1 without EOS."""
    is_eos = torch.isin(completion_ids, torch.tensor(eos_ids, device=completion_ids.device))   # (N, C)
    positions = torch.arange(completion_ids.size(1), device=completion_ids.device)              # (C,)
    first_eos = torch.where(is_eos.any(1), is_eos.float().argmax(1), completion_ids.size(1))  # (N,)
    return (positions[None, :] <= first_eos[:, None]).long()


def _pad_and_stack(rows: list[torch.Tensor], value, left: bool = False) -> torch.Tensor:
    """Concatenate ``(n_i, T_i)`` batches along dim 0, padding each to the widest on the left or the right."""
    width = max(r.size(1) for r in rows)
    return torch.cat([torch.nn.functional.pad(r, (width - r.size(1), 0) if left else (0, width - r.size(1)),
                                              value=value) for r in rows])


@torch.no_grad()
def sample_completions(model, tokenizer, prompts: list[str], num_samples: int = 1, temperature: float = 1.0,
                       max_new_tokens: int = 48, return_logps: bool = False, batch_size: int = 64,
                       progress: bool = False, use_engine: bool | None = None, top_k: int = 0,
                       top_p: float = 1.0) -> Completions:
    """Sample ``num_samples`` completions for each prompt (greedy when ``temperature == 0``).

    Prompts are left-padded so that every continuation starts at the same column. The
    completion mask keeps each completion up to and including its first EOS (what a
    loss should count); the ids after it are padding. ``return_logps`` adds the
    per-token log-probabilities of the sampled tokens under ``softmax(logits / T)``,
    recomputed by one forward pass (``losses.completion_logps``), as PPO stores them.

    Decoding runs on the course's KV-cached loop (:mod:`engine`, the same distribution at
    a fraction of ``generate``'s per-token cost) wherever ``engine.supports(model)``, and on
    ``model.generate`` otherwise; ``use_engine`` forces one or the other. ``top_k`` > 0 or ``top_p`` < 1 sample
    from the truncated distribution instead (``generate``'s warpers; the engine draws from the full one only), and
    ``return_logps`` still gives the full distribution's log-probs (notebook 13 compares the two).
    """
    prompts = _check_prompts(prompts)
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    device = next(model.parameters()).device
    eos_ids = eos_token_ids(tokenizer, model)
    gen_kwargs = _sampling_kwargs(tokenizer, eos_ids, max_new_tokens, temperature, top_k, top_p)
    truncated = temperature > 0 and (top_k > 0 or top_p < 1.0)
    if truncated and use_engine:
        raise ValueError("the engine samples from the full distribution: top-k / top-p need generate")
    fast = (use_engine if use_engine is not None else engine.supports(model)) and not truncated
    prompts_per_batch = max(1, batch_size // num_samples)
    parts = {"prompt_ids": [], "prompt_mask": [], "completion_ids": [], "completion_mask": [], "logps": []}
    with eval_mode(model, tokenizer, padding_side="left"):
        starts = range(0, len(prompts), prompts_per_batch)
        for start in tqdm(starts, desc="generate", disable=not progress, leave=False):
            enc = tokenizer(prompts[start:start + prompts_per_batch], return_tensors="pt", padding=True,
                            add_special_tokens=False).to(device)
            prompt_ids = enc["input_ids"].repeat_interleave(num_samples, 0)            # (n, P)
            prompt_mask = enc["attention_mask"].repeat_interleave(num_samples, 0)      # (n, P)
            if fast:
                completion_ids = engine.decode(model, prompt_ids, prompt_mask, max_new_tokens, eos_ids,
                                               tokenizer.pad_token_id, temperature)   # (n, C)
            else:
                out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, **gen_kwargs)
                completion_ids = out[:, prompt_ids.size(1):]                          # (n, C)
            if completion_ids.size(1) == 0:  # max_new_tokens=0: keep one pad column
                completion_ids = torch.full_like(prompt_ids[:, :1], tokenizer.pad_token_id)
            mask = completion_mask_after_eos(completion_ids, eos_ids)
            if return_logps:
                full_ids = torch.cat([prompt_ids, completion_ids], 1)
                full_mask = torch.cat([torch.zeros_like(prompt_mask), mask], 1)
                logps = completion_logps(model, full_ids, torch.cat([prompt_mask, mask], 1), full_mask,
                                         temperature=temperature or 1.0)
                parts["logps"].append(logps[:, prompt_ids.size(1):].cpu())
            parts["prompt_ids"].append(prompt_ids.cpu())
            parts["prompt_mask"].append(prompt_mask.cpu())
            parts["completion_ids"].append(completion_ids.cpu())
            parts["completion_mask"].append(mask.cpu())
    pad = tokenizer.pad_token_id
    completion_ids = _pad_and_stack(parts["completion_ids"], pad)
    completion_mask = _pad_and_stack(parts["completion_mask"], 0)
    texts = tokenizer.batch_decode(completion_ids.masked_fill(completion_mask == 0, pad), skip_special_tokens=True)
    return Completions(
        texts=texts, prompt_ids=_pad_and_stack(parts["prompt_ids"], pad, left=True),
        prompt_mask=_pad_and_stack(parts["prompt_mask"], 0, left=True),
        completion_ids=completion_ids, completion_mask=completion_mask,
        logps=_pad_and_stack(parts["logps"], 0.0) if return_logps else None, num_samples=num_samples)
