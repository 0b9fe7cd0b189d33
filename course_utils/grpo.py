"""GRPO (notebook 07): the rows TRL's ``GRPOTrainer`` trains on, and its loss checked against ours.

TRL does the training (built in :mod:`course_utils.training`); this module holds what
the trainer does not:

* :func:`grpo_rows` — ``{"prompt", "answer"}`` rows: the chat prompt the policy sees and
  the reference answer only the reward functions see;
* :func:`batch_logps` — per-token log-probs of a TRL batch's completions under any model;
* :func:`trl_generation_batch` — one generation batch made by TRL's own
  ``_generate_and_score_completions`` (sampling, EOS masking, rewards, advantages,
  old and reference log-probs), with the reward of every completion recorded;
* :func:`trl_parity` — that batch's advantages, per-token log-probs and loss for every
  ``loss_type``, from TRL and from :mod:`course_utils.losses`, side by side.

And what the notebook measures and shows around its runs:

* :func:`methods_table` — PPO (05), DPO (06) and GRPO side by side, from the results files.
"""
from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import torch

from .data import to_messages
from .losses import completion_logps, grpo_advantages, grpo_loss, sampler_is_weight
from .results import before_after, record_value
from .show import markdown_rows


def grpo_rows(problems: list[dict]) -> list[dict]:
    """One conversational row per problem: ``prompt`` (the user message) and the reference ``answer``.

    TRL applies the chat template (the same text as :func:`chat.chat_prompt`), hands
    reward functions each completion as ``[{"role": "assistant", "content": ...}]`` and
    a reward *model* the whole chat, as 03's reward model was trained on it.
    """
    return [{"prompt": to_messages(p["question"]), "answer": str(p["answer"])} for p in problems]


def batch_logps(model, batch: dict, temperature: float = 1.0) -> torch.Tensor:
    """Per-token log-probs ``(B, C)`` of a TRL generation batch's completions under ``model``.

    Joins ``prompt_ids``/``completion_ids`` (and their masks) as TRL's ``_compute_loss``
    does and calls :func:`losses.completion_logps` with TRL's positions (``0 .. T-1``, left
    padding included); 0 on padding. Gradients flow unless
    the caller wraps it in ``torch.no_grad()``.
    """
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    completion_mask = torch.cat([torch.zeros_like(batch["prompt_mask"]), batch["completion_mask"]], 1)
    return completion_logps(model, ids, attention, completion_mask, temperature,   # TRL numbers positions 0..T-1
                            positions="index")[:, -batch["completion_ids"].size(1):]


class _Recorder:
    """Wraps a reward function and keeps the scores of its last call (TRL logs only their mean)."""

    def __init__(self, fn):
        functools.update_wrapper(self, fn)
        self.fn, self.last = fn, None

    def __call__(self, *args, **kwargs):
        self.last = self.fn(*args, **kwargs)
        return self.last


def trl_generation_batch(trainer, n_prompts: int = 4, start: int = 0) -> tuple[dict, torch.Tensor]:
    """One generation batch from TRL, for ``n_prompts`` rows of the trainer's data set.

    Each row is repeated ``num_generations`` times (as TRL's sampler does) and passed
    to ``trainer._generate_and_score_completions``, the code a training step runs.
    Returns TRL's batch (``prompt_ids``, ``completion_ids``, ``completion_mask``,
    ``advantages``, ``num_items_in_batch``, and ``old_per_token_logps`` /
    ``ref_per_token_logps`` when TRL needs them) and the ``(B,)`` total reward of each
    completion (weighted sum over the reward functions), recorded on the way.
    """
    G = trainer.num_generations
    rows = [trainer.train_dataset[i] for i in range(start, start + n_prompts) for _ in range(G)]
    originals = list(trainer.reward_funcs)
    trainer.reward_funcs = [_Recorder(f) if callable(f) and not isinstance(f, torch.nn.Module) else f
                            for f in originals]
    try:
        batch = trainer._generate_and_score_completions(rows)
        per_func = torch.tensor([f.last for f in trainer.reward_funcs], dtype=torch.float32).T   # (B, n_funcs)
    finally:
        trainer.reward_funcs = originals
    weights = trainer.reward_weights.to(per_func.dtype)
    return batch, (per_func * weights).sum(1)


def trl_parity(trainer, n_prompts: int = 4, perturb: float = 1e-2, seed: int = 0,
               loss_types: tuple = ("grpo", "bnpo", "dr_grpo", "dapo"),
               levels: tuple = ("token", "sequence"), sampler_noise: float = 0.0,
               is_mode: str = "sequence_mask", is_clip_min: float | None = None,
               is_clip_max: float | None = 3.0) -> dict:
    """TRL's GRPO advantages, log-probs and loss on one of its own batches, and ours on the same tensors.

    1. :func:`trl_generation_batch` makes a batch; ours: :func:`losses.grpo_advantages`
       on the recorded rewards.
    2. The trainable weights are nudged by Gaussian noise of scale ``perturb`` (on purpose
       far more than one optimizer step moves them), so the policy differs from the one that
       sampled: the ratio is no longer 1 and the clip binds on many tokens, exercising every
       branch of the loss. Ours: :func:`losses.completion_logps`
       for π_θ (and, when TRL did not buffer them, π_old = the unperturbed weights).
    3. For every ``loss_type`` and importance-sampling level, ``trainer._compute_loss``
       against :func:`losses.grpo_loss`.

    With tools (TRL's multi-turn loop), the loss runs over ``completion_mask × tool_mask``, as TRL's does.
    With ``sampler_noise > 0``, the rollouts are treated as drawn by a sampler whose log-probs are π_old's plus
    Gaussian noise of that scale (as vLLM's differ from the trainer's): both losses carry the weight of
    :func:`losses.sampler_is_weight` (``is_mode``, ``is_clip_min``, ``is_clip_max``), TRL's through its own
    ``vllm_importance_sampling_correction`` path of ``_compute_loss``, switched on for the call; ``"is_weight"`` is
    added to the result.
    The weights are restored afterwards. Returns a dict of ``(ours, trl)`` tensor pairs:
    ``"advantages"``, ``"logps"`` and ``"loss/<loss_type>/<level>"``, plus the batch, the rewards
    and the per-token ``"ratio"`` π_θ/π_old of the nudged policy (0 on padding).
    """
    model = trainer.model
    batch, rewards = trl_generation_batch(trainer, n_prompts)
    out = {"batch": batch, "rewards": rewards,
           "advantages": (grpo_advantages(rewards, trainer.num_generations, trainer.scale_rewards),
                          batch["advantages"])}
    C = batch["completion_ids"].size(1)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)          # TRL's own log-prob call needs these
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)

    def ours_logps():
        return batch_logps(model, batch, trainer.temperature)

    with torch.no_grad():
        old = batch.get("old_per_token_logps")
        old = ours_logps() if old is None else old
        trainable = [p for p in model.parameters() if p.requires_grad]
        saved = [p.detach().clone() for p in trainable]
        g = torch.Generator().manual_seed(seed)
        for p in trainable:
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * perturb)
    settings = (trainer.loss_type, trainer.importance_sampling_level)
    vllm_flags = (trainer.use_vllm, trainer.vllm_importance_sampling_correction)
    loss_mask = batch["completion_mask"]   # with tools, TRL's loss skips the tool's tokens: tool_mask is 0 there
    if batch.get("tool_mask") is not None:
        loss_mask = loss_mask * batch["tool_mask"]
    was_training = model.training
    model.train()
    if not hasattr(trainer, "current_gradient_accumulation_steps"):
        trainer.current_gradient_accumulation_steps = 1
    try:
        with torch.no_grad():
            logps = ours_logps()
            trl_logps, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, C)
            out["logps"] = (logps * batch["completion_mask"], trl_logps * batch["completion_mask"])
            out["ratio"] = torch.exp(logps - old) * batch["completion_mask"]          # pi_theta / pi_old per token
            batch_trl = dict(batch, old_per_token_logps=old)      # TRL reads pi_old from the batch when present
            weight = None
            if sampler_noise > 0:
                noise = torch.randn(old.shape, generator=g, dtype=old.dtype) * sampler_noise
                weight = sampler_is_weight(old, old + noise, loss_mask, is_mode, is_clip_min, is_clip_max)
                batch_trl["importance_sampling_ratio"] = weight
                out["is_weight"] = weight
                # TRL applies the weight only on its vLLM path; these two flags are all _compute_loss reads of it
                trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
            for loss_type in loss_types:
                for level in levels:
                    trainer.loss_type, trainer.importance_sampling_level = loss_type, level
                    theirs = trainer._compute_loss(model, batch_trl)
                    ours = grpo_loss(logps, old, batch.get("ref_per_token_logps"), batch["advantages"],
                                     loss_mask, beta=trainer.beta, epsilon_low=trainer.epsilon_low,
                                     epsilon_high=trainer.epsilon_high, loss_type=loss_type,
                                     importance_sampling_level=level,
                                     max_completion_length=trainer.max_completion_length,
                                     use_bias_correction_kl=trainer.args.use_bias_correction_kl, is_weight=weight)
                    out[f"loss/{loss_type}/{level}"] = (ours, theirs.detach())
    finally:
        trainer.loss_type, trainer.importance_sampling_level = settings
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = vllm_flags
        with torch.no_grad():
            for p, s in zip(trainable, saved):
                p.copy_(s)
        model.train(was_training)
    return out


# --------------------------------------------------------------------------- measuring and showing (notebook 07)
def _find(record: Mapping, *paths: tuple):
    """The value at the first of ``paths`` (keys into ``record``) that exists, else None."""
    return next((v for v in (record_value(record, *path) for path in paths) if v is not None), None)


def methods_table(records: Mapping[str, Mapping], before: Mapping, after: Mapping, memory_mib: Mapping[str, float],
                  peak_ram_mb: float) -> str:
    """Markdown: PPO (05, against the verifier), DPO (06, self-generated pairs) and GRPO from the same ``sft_cold``.

    ``records``: results files by notebook (``results.load_results()``, one seed); a missing notebook gets a row that
    says to run it. ``before`` / ``after``: this notebook's run-log rows of ``sft_cold`` and of the GRPO run
    (``accuracy``, ``pass_at_1``; ``seconds`` of the run), ``peak_ram_mb`` its process's peak so far.
    ``memory_mib``: the bytes each method keeps for its models, by method (``"PPO"``, ``"DPO"``, ``"GRPO"``).
    Training seconds are read where the other notebooks record them (a dash where they do not).
    """
    methods = (
        ("PPO", "05_ppo", "PPO (05, verifier)", "policy, critic, reference (+ reward model or verifier)",
         (("extra", "verifier_seconds"),)),
        ("DPO", "06_dpo", "DPO (06, self-generated pairs)", "policy, reference",
         (("extra", "runs", "(b) self-generated pairs", "seconds"),)),
    )
    rows = []
    for method, notebook, name, models, seconds_at in methods:
        record = records.get(notebook)
        if record is None:
            rows.append((name, models, f"{memory_mib[method]:.1f}",
                         f"*{notebook}'s results are missing: run it with this seed*", "", "", ""))
            continue
        seconds = _find(record, *seconds_at)
        rows.append((name, models, f"{memory_mib[method]:.1f}", before_after(record, "accuracy"),
                     before_after(record, "pass_at_1"), "–" if seconds is None else f"{seconds:.0f}",
                     f"{record.get('peak_ram_mb', float('nan')):.0f}"))
    grpo = {"metrics": {key: {"before": before[key], "after": after[key]} for key in ("accuracy", "pass_at_1")}}
    rows.append(("GRPO (07, section 5)", "policy with LoRA (reference = adapter off)", f"{memory_mib['GRPO']:.1f}",
                 before_after(grpo, "accuracy"), before_after(grpo, "pass_at_1"), f"{after['seconds']:.0f}",
                 f"{peak_ram_mb:.0f} (so far)"))
    headers = ("method", "models in memory", "model memory (MiB)", "greedy accuracy", "pass@1", "training seconds",
               "notebook peak RAM (MiB)")
    return markdown_rows(headers, rows)
