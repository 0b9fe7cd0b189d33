"""Rollouts that are not quite on-policy, and their correction (notebook 07, section 8).

A fast RL system samples with an inference engine (vLLM) whose log-probs differ from the trainer's, and an
asynchronous one samples with weights a few optimizer steps old. The trainer then updates π_θ on tokens drawn from
another policy, π_sample. This module makes that happen on purpose, with TRL's own trainer, so its effect and TRL's
fix can be measured on the tiny model:

* :class:`WeightHistory` — the trainable weights (a LoRA adapter's) at each step, and a context that puts old ones
  back into the model for a while;
* :func:`stale_grpo_trainer_class` — TRL's ``GRPOTrainer`` (the course's, :func:`training.grpo_trainer_class`)
  whose rollouts are sampled by the policy ``lag`` optimizer steps behind the one it trains, and, with
  ``correct=True``, corrected by TRL's own ``vllm_importance_sampling_correction`` code;
* :func:`stale_grpo_trainer` — that trainer, built as :func:`training.grpo_trainer` builds the others;
* :func:`sampler_log_ratio` — log π_train − log π_sample per token, on a batch the sampler drew,
  :func:`log_ratios_by_lag` — those of samples drawn k steps behind, and by a lower-precision copy, and
  :func:`ratio_table` — how far each sampler is from the trainer, as a table.

The weight itself (the from-scratch truncated or masked importance sampling) is :func:`losses.sampler_is_weight`.
"""
from __future__ import annotations

import contextlib
import functools
import math
from collections import deque

import torch

from .grpo import batch_logps


class WeightHistory:
    """Copies of a model's trainable weights (its LoRA adapter's, under PEFT), oldest first, at most ``keep``, in
    CPU memory.

    ``push()`` copies the current weights; ``[i]`` is the i-th kept copy (``[0]`` the oldest, ``[-1]`` the newest);
    ``use(weights)`` is a context in which the model computes with ``weights`` and after which it has its own again.
    Only the trainable parameters are copied: a frozen base is the same at every step.
    """

    def __init__(self, model, keep: int):
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.params = {name: p for name, p in model.named_parameters() if p.requires_grad}
        if not self.params:
            raise ValueError("the model has no trainable parameters to keep")
        self.kept: deque[dict[str, torch.Tensor]] = deque(maxlen=keep)

    def snapshot(self) -> dict[str, torch.Tensor]:
        return {name: p.detach().to("cpu", copy=True) for name, p in self.params.items()}   # off the GPU, if any

    def push(self) -> dict[str, torch.Tensor]:
        self.kept.append(self.snapshot())
        return self.kept[-1]

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.kept[i]

    def __len__(self) -> int:
        return len(self.kept)

    def callback(self):
        """A ``transformers`` ``TrainerCallback`` that pushes a copy at the end of every optimizer step."""
        from transformers import TrainerCallback
        history = self

        class PushWeights(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                history.push()

        return PushWeights()

    @contextlib.contextmanager
    def use(self, weights: dict[str, torch.Tensor]):
        own = self.snapshot()
        try:
            with torch.no_grad():
                for name, p in self.params.items():
                    p.copy_(weights[name])
            yield
        finally:
            with torch.no_grad():
                for name, p in self.params.items():
                    p.copy_(own[name])


def sampler_log_ratio(model, batch: dict, sampler_weights: dict, history: WeightHistory,
                      temperature: float = 1.0) -> torch.Tensor:
    """``log π_train(o_t) − log π_sample(o_t)`` per token ``(B, C)`` of a TRL batch, 0 on padding.

    π_train is ``model`` with its own weights, π_sample the same network with ``sampler_weights`` (e.g. a copy kept
    by ``history`` some steps earlier). Its exp is the ratio truncated importance sampling weights
    (:func:`losses.sampler_is_weight`); PPO's clip bounds another one, π_θ/π_old, where π_old is π_train.
    """
    with torch.no_grad():
        train = batch_logps(model, batch, temperature)
        with history.use(sampler_weights):
            sample = batch_logps(model, batch, temperature)
    return (train - sample) * batch["completion_mask"]


def log_ratios_by_lag(trainer, history: WeightHistory, lags, at: int = -1, n_prompts: int = 8, start: int = 0,
                      low_precision: torch.dtype | None = torch.bfloat16) -> dict[str, torch.Tensor]:
    """The per-token ``log π_train − log π_sample`` of samples drawn ``k`` steps behind, for each ``k`` in ``lags``.

    π_train is ``trainer.model`` with the kept weights ``history[at]`` (with a history pushed once before training
    and after every step, ``history[t]`` is the policy after step t); π_sample is the same network with
    ``history[at - k]``. Each lag samples its own TRL generation batch of ``n_prompts`` prompts from the trainer's
    data set (:func:`grpo.trl_generation_batch`, under the sampler's weights). With ``low_precision``, one more
    entry, ``"bf16 copy"`` (or the dtype's name): samples of π_train scored by a copy of the model cast to that
    dtype, as an engine computing in lower precision would. The model has its own weights again afterwards.
    Returns a dict of 1-D tensors, the completion tokens' log-ratios, keyed ``"k = 2"`` etc.
    """
    import copy

    from .grpo import trl_generation_batch
    index = at % len(history) if -len(history) <= at < len(history) else None
    if index is None or min(index - k for k in lags) < 0:
        raise ValueError(f"lags {tuple(lags)} behind position {at} need {max(lags)} earlier copies; the history keeps "
                         f"{len(history)}")
    model, T = trainer.model, trainer.temperature
    out = {}
    with history.use(history[index]):
        for k in lags:
            with history.use(history[index - k]):
                batch, _ = trl_generation_batch(trainer, n_prompts, start=start)
            ratio = sampler_log_ratio(model, batch, history[index - k], history, T)
            out[f"k = {k}"] = ratio[batch["completion_mask"].bool()]
        if low_precision is not None:
            batch, _ = trl_generation_batch(trainer, n_prompts, start=start)
            low = copy.deepcopy(model).to(low_precision)
            for module in low.modules():   # a per-instance forward wrapper (accelerate's) still calls the original
                module.__dict__.pop("forward", None)
            with torch.no_grad():
                diff = batch_logps(model, batch, T) - batch_logps(low, batch, T)
            name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(low_precision, str(low_precision))
            out[f"{name} copy"] = diff[batch["completion_mask"].bool()]
    return out


def ratio_table(log_ratios: dict[str, torch.Tensor], epsilon_low: float = 0.2, epsilon_high: float = 0.2) -> str:
    """A Markdown table of :func:`log_ratios_by_lag`'s output: per sampler, the tokens, the mean and largest absolute
    log-ratio, and the share of tokens whose ratio lies outside PPO's clip range [1 − ε_low, 1 + ε_high]."""
    from .show import markdown_table
    low, high = math.log(1 - epsilon_low), math.log(1 + epsilon_high)
    return markdown_table({
        "tokens": [r.numel() for r in log_ratios.values()],
        "mean abs. log-ratio": [float(r.abs().mean()) for r in log_ratios.values()],
        "largest abs. log-ratio": [float(r.abs().max()) for r in log_ratios.values()],
        "share outside PPO's clip range": [f"{float(((r < low) | (r > high)).float().mean()):.1%}"
                                           for r in log_ratios.values()]},
        index=list(log_ratios), index_header="sampler")


@functools.cache
def stale_grpo_trainer_class():
    """The course's ``GRPOTrainer`` sampling with its own weights of ``lag`` optimizer steps ago.

    Each generation batch is sampled by the policy of step ``max(0, t - lag)`` (kept by a :class:`WeightHistory`),
    then trained on at step t as if it were on-policy: TRL recomputes π_old with the current weights, so its PPO ratio
    π_θ/π_old starts at exactly 1 and its clip never sees the staleness. The sampler's per-token log-probs are what
    vLLM would return with its samples; with ``correct=True`` they go where vLLM's go, into TRL's
    ``vllm_importance_sampling_correction`` code (``vllm_importance_sampling_mode``, ``_clip_min``, ``_clip_max`` of
    the config): TRL computes the weight π_old/π_sample in ``_generate_and_score_completions`` and multiplies each
    token's policy-gradient loss by it in ``_compute_loss``. TRL runs both only when ``use_vllm`` is set, so the flag is
    raised for everything except the sampling itself, which stays the course's sampler. With ``lag=0`` and
    ``correct=False`` this is the ordinary trainer.

    Logged each step, in either case: ``stale/logp_diff`` (mean |log π_old − log π_sample| over the completions'
    tokens) and ``stale/outside_clip`` (the share of tokens whose π_old/π_sample lies outside the PPO clip range
    [1 − ε, 1 + ε_high]). ``last_sampling_logps`` keeps the last batch's sampler log-probs ``(B, C)``, padded with 0
    as TRL pads them.
    """
    from trl.trainer.utils import pad

    from .training import grpo_trainer_class

    class StaleGRPOTrainer(grpo_trainer_class()):
        lag: int = 0
        correct: bool = False
        history: WeightHistory | None = None
        last_sampling_logps: torch.Tensor | None = None

        def configure_staleness(self, lag: int, correct: bool) -> None:
            if lag < 0:
                raise ValueError(f"lag must be >= 0, got {lag}")
            if self.args.use_vllm:
                raise ValueError("the stale trainer samples with the course's sampler and old weights; "
                                 "build it with use_vllm=False")
            self.lag, self.correct = lag, correct
            self.history = WeightHistory(self.model, keep=lag + 1)
            self.use_vllm = correct   # what TRL's correction code reads; sampling lowers it again, below

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                                  has_tool_images=False):
            if self.history is None:
                raise RuntimeError("call configure_staleness(lag, correct) before training")
            self.history.push()
            sampler = self.history[0]   # lag steps old once lag + 1 copies are kept; the first ones before that
            self.use_vllm = False       # the course's sampler, never vLLM
            try:
                with self.history.use(sampler):
                    completion_ids, _ = super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                                      num_generations, has_tool_images)
                    sample = self._completion_logps(prompt_ids, completion_ids)
            finally:
                self.use_vllm = self.correct
            train = self._completion_logps(prompt_ids, completion_ids)
            mask = sample["mask"]
            diff = (train["logps"] - sample["logps"]) * mask
            ratio = torch.exp(diff)
            outside = ((ratio < 1 - self.epsilon_low) | (ratio > 1 + self.epsilon_high)) & mask.bool()
            tokens = mask.sum().clamp(min=1)
            self._metrics["train"]["stale/logp_diff"].append((diff.abs().sum() / tokens).item())
            self._metrics["train"]["stale/outside_clip"].append((outside.sum() / tokens).item())
            self.last_sampling_logps = sample["logps"] * mask
            logprobs = [row[:len(ids)].tolist() for row, ids in zip(sample["logps"], completion_ids, strict=True)]
            return completion_ids, logprobs

        def _completion_logps(self, prompt_ids, completion_ids) -> dict:
            """Per-token log-probs (B, C) of the completions under the model's current weights, TRL's own way."""
            device = self.accelerator.device
            pad_id = self._tokenizer.pad_token_id
            prompts = pad([torch.tensor(p) for p in prompt_ids], padding_value=pad_id, padding_side="left")
            prompt_mask = pad([torch.ones(len(p), dtype=torch.long) for p in prompt_ids], padding_value=0,
                              padding_side="left")
            completions = pad([torch.tensor(c) for c in completion_ids], padding_value=pad_id, padding_side="right")
            mask = pad([torch.ones(len(c), dtype=torch.long) for c in completion_ids], padding_value=0,
                       padding_side="right")
            ids = torch.cat([prompts, completions], 1).to(device)
            attention = torch.cat([prompt_mask, mask], 1).to(device)
            with torch.no_grad():
                logps, _, _ = self._get_per_token_logps_and_entropies(self.model, ids, attention,
                                                                      completions.size(1))
            return {"logps": logps.float(), "mask": mask.to(device)}

    return StaleGRPOTrainer


def stale_grpo_trainer(model, tokenizer, profile, recipe, output_dir, train_rows, reward_funcs, lag: int,
                       correct: bool = False, mode: str = "sequence_mask", clip_min: float | None = None,
                       clip_max: float = 3.0, **config_overrides):
    """:func:`training.grpo_trainer` with rollouts ``lag`` steps stale, corrected by TRL's code when ``correct``.

    ``mode``, ``clip_min`` and ``clip_max`` are TRL's ``vllm_importance_sampling_mode`` / ``_clip_min`` /
    ``_clip_max`` (its defaults: ``"sequence_mask"``, None, 3.0), the same rule as :func:`losses.sampler_is_weight`.
    """
    from .training import grpo_trainer
    trainer = grpo_trainer(model, tokenizer, profile, recipe, output_dir, train_rows, reward_funcs,
                           trainer_class=stale_grpo_trainer_class(), vllm_importance_sampling_correction=correct,
                           vllm_importance_sampling_mode=mode, vllm_importance_sampling_clip_min=clip_min,
                           vllm_importance_sampling_clip_max=clip_max, **config_overrides)
    trainer.configure_staleness(lag, correct)
    return trainer
