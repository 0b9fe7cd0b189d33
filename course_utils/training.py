"""Trainer set-ups: the 🤗 / TRL trainers each stage uses, built from its recipe.

A notebook shows its recipe (``recipes.show``), builds its trainer here and trains;
``stages`` calls the same functions with the same recipe object to rebuild a missing
checkpoint. Arguments that differ between CPU and GPU come from
``Profile.trainer_kwargs``; the training knobs come from the recipe alone.

TRL's Triton log-prob kernel has no CPU build: every function that builds a TRL
trainer first calls :func:`course_utils.compat.install_trl_cpu_fallback` (a no-op
where Triton exists), so importing ``course_utils`` never imports TRL.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

from . import generation
from .compat import install_trl_cpu_fallback
from .data import load_jsonl, preference_rows, sft_rows
from .evaluation import evaluate_arithmetic
from .run_config import Profile
from .recipes import DistillRecipe, DPORecipe, GRPORecipe, PretrainRecipe, RewardRecipe, SFTRecipe


def log_every(logging_steps: int, steps: int) -> int:
    """``logging_steps``, but at most half of ``steps`` (at least 1), so a short run still logs twice.

    A run of a few steps (the smoke scale's) logging every 10 would leave an empty log, and the
    notebooks' curves and late-run means read it. The course's full-scale runs are long enough to
    keep their own ``logging_steps``.
    """
    return max(1, min(logging_steps, steps // 2))


def _schedule(recipe, logging_steps: int) -> dict:
    """The schedule every course recipe shares: 5% warm-up, then the recipe's decay."""
    scheduler = {"cosine": "cosine", "constant": "constant_with_warmup"}[recipe.schedule]
    return dict(max_steps=recipe.steps, per_device_train_batch_size=recipe.batch_size,
                learning_rate=recipe.learning_rate, lr_scheduler_type=scheduler,
                warmup_steps=max(1, recipe.steps // 20), logging_steps=log_every(logging_steps, recipe.steps))


def pack_corpus(tokenizer, split: str, block_size: int = PretrainRecipe.block_size):
    """The corpus as one token stream cut into equal blocks: a LongTensor (N, block_size).

    Documents are joined with EOS between them and the stream is cut every
    ``block_size`` tokens (the tail is dropped). Packing wastes no compute on
    padding; a block may span two documents, and EOS tells the model where one ends.
    """
    import torch
    texts = [r["text"] + tokenizer.eos_token for r in load_jsonl("corpus", split)]
    stream = [t for ids in tokenizer(texts, add_special_tokens=False)["input_ids"] for t in ids]
    n_blocks = len(stream) // block_size
    if n_blocks == 0:
        raise ValueError(f"corpus split {split!r} has fewer than {block_size} tokens")
    return torch.tensor(stream[:n_blocks * block_size]).view(n_blocks, block_size)


def corpus_dataset(tokenizer, split: str, block_size: int = PretrainRecipe.block_size):
    """Packed corpus blocks as a ``datasets.Dataset`` with an ``input_ids`` column."""
    from datasets import Dataset
    return Dataset.from_dict({"input_ids": pack_corpus(tokenizer, split, block_size).tolist()})


def packed_blocks_collator(rows: list[dict]) -> dict:
    """Stack packed blocks of equal length as inputs and next-token labels (the model shifts them); a tokenizer
    needs no pad token for it, as ``DataCollatorForLanguageModeling`` does."""
    import torch
    ids = torch.tensor([r["input_ids"] for r in rows])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def pretrain_trainer(model, tokenizer, profile: Profile, recipe: PretrainRecipe, output_dir: str | Path) -> Trainer:
    """A ``transformers.Trainer`` set up for next-token pretraining on the packed corpus.

    A tokenizer without a pad token (a base model of another family, :mod:`course_tools.base_model`) gets
    :func:`packed_blocks_collator`; the course's own keeps ``DataCollatorForLanguageModeling``.
    """
    args = TrainingArguments(
        output_dir=str(output_dir),
        **profile.trainer_kwargs(
            **_schedule(recipe, logging_steps=max(1, recipe.eval_every // 2)), per_device_eval_batch_size=64,
            weight_decay=recipe.weight_decay, eval_strategy="steps", eval_steps=recipe.eval_every))
    return Trainer(
        model=model, args=args, train_dataset=corpus_dataset(tokenizer, "train", recipe.block_size),
        eval_dataset=corpus_dataset(tokenizer, "validation", recipe.block_size),
        data_collator=(DataCollatorForLanguageModeling(tokenizer, mlm=False) if tokenizer.pad_token is not None
                       else packed_blocks_collator))


def sft_trainer(model, tokenizer, profile: Profile, recipe: SFTRecipe, output_dir: str | Path,
                train_rows: list[dict] | None = None, logging_steps: int = 20, **config_overrides):
    """TRL ``SFTTrainer`` on chat data, loss on the assistant's tokens only.

    ``train_rows`` are ``{"messages": [...]}`` rows (default: the first
    ``recipe.n_examples`` problems of the arithmetic train split, all if None).
    ``assistant_only_loss=True`` uses the chat template's ``{% generation %}`` marks
    (TRL patches them into known hub templates such as Qwen3's). ``config_overrides`` go to ``SFTConfig``
    (e.g. ``warmup_steps=10``).
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer
    install_trl_cpu_fallback()
    rows = sft_rows("train", n=recipe.n_examples) if train_rows is None else train_rows
    kwargs = {**_schedule(recipe, logging_steps), "assistant_only_loss": True, "max_length": recipe.max_length,
              **config_overrides}
    args = SFTConfig(output_dir=str(output_dir), **profile.trainer_kwargs(**kwargs))
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    if recipe.stop_at_accuracy is not None:  # the cold start: stop at a target accuracy (see recipes)
        trainer.add_callback(AccuracyCallback(tokenizer, every=recipe.check_every, max_new_tokens=profile.max_new_tokens,
                                              stop_at=recipe.stop_at_accuracy))
    return trainer


def hub_rows(dataset: str, kind: str) -> list[dict]:
    """GPU path: the train split of a hub data set (or of a local folder ``datasets.load_dataset`` reads) as rows
    for :func:`sft_trainer` or :func:`reward_trainer`.

    ``kind="chat"``: ``{"messages"}`` rows (the set needs a ``messages`` column, e.g. ``trl-lib/Capybara``).
    ``kind="preference"``: ``{"prompt", "chosen", "rejected"}`` rows (e.g. ``trl-lib/ultrafeedback_binarized``);
    a set whose prompt is implicit (the shared user turns repeated at the start of ``chosen`` and ``rejected``)
    is split with TRL's ``maybe_extract_prompt``. Other columns are dropped.
    """
    from datasets import load_dataset
    from trl.data_utils import maybe_extract_prompt
    if kind not in ("chat", "preference"):
        raise ValueError(f"kind must be 'chat' or 'preference', got {kind!r}")
    rows = load_dataset(dataset, split="train")
    if kind == "chat":
        return list(rows.select_columns(["messages"]))
    rows = rows.select_columns([c for c in ("prompt", "chosen", "rejected") if c in rows.column_names])
    return [maybe_extract_prompt(row) for row in rows]


def reward_trainer(model, tokenizer, profile: Profile, recipe: RewardRecipe, output_dir: str | Path,
                   train_rows: list[dict] | None = None, logging_steps: int = 10):
    """TRL ``RewardTrainer``: Bradley-Terry loss on (prompt, chosen, rejected) chats.

    ``model`` is a sequence classifier with one output (``num_labels=1``).
    """
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer
    install_trl_cpu_fallback()
    rows = preference_rows("train") if train_rows is None else train_rows
    args = RewardConfig(
        output_dir=str(output_dir),
        **profile.trainer_kwargs(**_schedule(recipe, logging_steps), max_length=recipe.max_length))
    return RewardTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)


def dpo_trainer(model, ref_model, tokenizer, profile: Profile, recipe: DPORecipe, output_dir: str | Path,
                train_rows: list[dict], logging_steps: int = 10, precompute_reference: bool = True):
    """TRL ``DPOTrainer`` on ``(prompt, chosen, rejected)`` chats, with ``recipe.loss_type`` and ``recipe.beta``.

    ``ref_model`` is a frozen copy of the starting policy. Its log-probs of every pair never change, so TRL
    computes them once before training (``precompute_ref_log_probs=True``) instead of at every step: one
    forward pass per pair instead of one per pair per visit, the same loss to the last bit (tested). Run (b) of
    notebook 06 sees each of its pairs about four times, so most of its reference passes go. (With
    ``ref_model=None`` TRL scores the untrained policy instead, and keeps no second model in memory; the course
    keeps one, to measure the KL after training.) The scores are also kept for the rest of the process
    (:func:`dpo_trainer_class`), so a second run on the same pairs against the same reference reuses them: 06's
    comparison runs share one set of pairs and one reference.
    ``precompute_reference=False``: the reference scores each batch at every step, as TRL does by default.
    """
    from datasets import Dataset
    from trl import DPOConfig
    install_trl_cpu_fallback()
    if recipe.loss_type == "simpo":
        raise ValueError("SimPO has no reference model: build it with simpo_trainer")
    args = DPOConfig(
        output_dir=str(output_dir),
        **profile.trainer_kwargs(**_schedule(recipe, logging_steps), beta=recipe.beta, loss_type=[recipe.loss_type],
                                 max_length=recipe.max_length,
                                 precompute_ref_log_probs=precompute_reference))
    return dpo_trainer_class()(model=model, ref_model=ref_model, args=args, train_dataset=Dataset.from_list(train_rows),
                               processing_class=tokenizer)


_REFERENCE_LOGPS: dict[tuple, dict] = {}
"""precomputed reference log-probs by (reference weights' hash, tokenized pairs' hash, batch size, the pass's
settings): see :func:`dpo_trainer_class`"""


def dpo_trainer_class():
    """TRL's ``DPOTrainer``, whose precomputed reference log-probs are reused within the process.

    With ``precompute_ref_log_probs=True`` TRL scores every pair under the reference before training and caches the
    scores in a file named after the dataset's fingerprint; a dataset built in memory gets a random fingerprint, so
    a second trainer on the same pairs scores them all again. This subclass keys the scores by what determines them:
    the reference's weights (TRL's own hash of them), the tokenized pairs in their order, the batch size (which
    fixes each batch's padding), and the settings the pass reads (LD-DPO's ``ld_alpha``, bf16/fp16 autocast). A hit
    returns the very numbers the first pass computed (tested), so training runs as it would have; a miss is TRL's
    pass unchanged. The pass's data loader takes one number from torch's global generator, so after a hit the
    process's random stream lacks that draw: what is sampled later (a KL estimate, say) is another draw of the same
    estimate.
    """
    import hashlib

    from datasets import Dataset, concatenate_datasets
    from trl import DPOTrainer

    class CourseDPOTrainer(DPOTrainer):
        __doc__ = dpo_trainer_class.__doc__

        def _precompute_ref_logps(self, dataset, name, batch_size):
            digest = hashlib.sha1()
            for column in sorted(dataset.column_names):
                digest.update(column.encode())
                for value in dataset[column]:                  # token ids, texts: repr is exact for both
                    digest.update(repr(value).encode() + b"|")
            key = (self._precompute_model_hash, digest.hexdigest(), batch_size,   # and how the pass scores them:
                   getattr(self, "ld_alpha", None), self.args.bf16, self.args.fp16)   # LD-DPO, precision
            kept = _REFERENCE_LOGPS.get(key)
            if kept is not None:
                return concatenate_datasets([dataset, Dataset.from_dict(kept["columns"], features=kept["features"])],
                                            axis=1)
            scored = super()._precompute_ref_logps(dataset, name, batch_size)
            columns = ["ref_chosen_logps", "ref_rejected_logps"]
            _REFERENCE_LOGPS[key] = {"columns": {c: scored[c] for c in columns},
                                     "features": scored.select_columns(columns).features}
            return scored

    return CourseDPOTrainer


def simpo_trainer(model, tokenizer, profile: Profile, recipe: DPORecipe, output_dir: str | Path,
                  train_rows: list[dict], logging_steps: int = 10):
    """SimPO with TRL's ``CPOTrainer`` (``trl.experimental.cpo``): ``loss_type="simpo"``, ``cpo_alpha=0``.

    CPO adds a negative log-likelihood term on the chosen answers (``cpo_alpha``);
    SimPO is CPO's loss with length-normalised log-probs, a target margin
    ``simpo_gamma`` and no such term. No reference model: one model in memory.
    """
    import warnings

    from datasets import Dataset
    install_trl_cpu_fallback()
    with warnings.catch_warnings():   # "experimental API" notice
        warnings.simplefilter("ignore")
        from trl.experimental.cpo import CPOConfig, CPOTrainer
    args = CPOConfig(
        output_dir=str(output_dir),
        **profile.trainer_kwargs(**_schedule(recipe, logging_steps), beta=recipe.beta, loss_type="simpo",
                                 simpo_gamma=recipe.simpo_gamma, cpo_alpha=0.0, max_length=recipe.max_length,
                                 remove_unused_columns=False))   # its collator needs the tokenized columns
    return CPOTrainer(model=model, args=args, train_dataset=Dataset.from_list(train_rows), processing_class=tokenizer)


def grpo_trainer(model, tokenizer, profile: Profile, recipe: GRPORecipe, output_dir: str | Path, train_rows: list[dict],
                 reward_funcs: list, logging_steps: int = 5, reward_processing_classes: list | None = None,
                 tools: list | None = None, trainer_class=None, **config_overrides):
    """TRL ``GRPOTrainer`` with a PEFT LoRA adapter (``recipe.lora_r`` > 0) on ``{"prompt", "answer"}`` rows.

    ``remove_unused_columns=False`` is what lets TRL hand the ``answer`` column to the
    reward functions (with the default ``True`` it is dropped before they see it).
    With LoRA and ``beta > 0`` the reference model is the same network with the adapter
    disabled: no second copy in memory. ``per_device_train_batch_size`` counts
    *completions*, so it is ``prompts_per_step * num_generations``. A reward function may
    be a reward model (``AutoModelForSequenceClassification``); pass its tokenizer in
    ``reward_processing_classes`` (one entry per reward function, None for plain functions).
    ``tools``: functions the policy may call (TRL's multi-turn tool loop, notebook 12), each with a Google-style
    docstring; the tokenizer needs a chat template that renders them and a ``response_template`` that reads a call.
    ``trainer_class``: a subclass of :func:`grpo_trainer_class` to build instead (e.g. notebook 12's run without the
    tool mask). ``config_overrides`` go to ``GRPOConfig`` (e.g. ``reward_weights=[1.0, 0.0]``). Dropout is
    switched off (``disable_dropout=True``; TRL's default keeps it): the course's Qwen3 has none,
    a hub model such as GPT-2 would otherwise score its own samples with noise.
    """
    from datasets import Dataset
    from trl import GRPOConfig
    install_trl_cpu_fallback()
    peft_config = None
    if recipe.lora_r:
        from peft import LoraConfig
        peft_config = LoraConfig(r=recipe.lora_r, lora_alpha=recipe.lora_alpha, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    kwargs = dict(
        max_steps=recipe.steps, per_device_train_batch_size=recipe.prompts_per_step * recipe.num_generations,
        num_generations=recipe.num_generations, learning_rate=recipe.learning_rate, beta=recipe.beta,
        loss_type=recipe.loss_type, scale_rewards=recipe.scale_rewards, epsilon=recipe.epsilon,
        epsilon_high=recipe.epsilon_high, importance_sampling_level=recipe.importance_sampling_level,
        num_iterations=recipe.num_iterations, temperature=recipe.temperature,
        max_completion_length=recipe.max_completion_length, logging_steps=log_every(logging_steps, recipe.steps),
        remove_unused_columns=False, disable_dropout=True)   # TRL's default keeps a hub model's dropout
    kwargs.update(config_overrides)
    args = GRPOConfig(output_dir=str(output_dir), **profile.trainer_kwargs(**kwargs))
    return (trainer_class or grpo_trainer_class())(model=model, reward_funcs=list(reward_funcs), args=args,
                       train_dataset=Dataset.from_list(train_rows), processing_class=tokenizer,
                       reward_processing_classes=reward_processing_classes, peft_config=peft_config,
                       tools=tools)


@functools.cache
def grpo_trainer_class():
    """TRL's ``GRPOTrainer``, sampling with the course's decoder wherever that draws ``generate``'s very tokens.

    Everything but the sampling is TRL's: the batch, rewards, advantages, log-probs, loss
    and logs. TRL's regular (non-vLLM) path left-pads the prompts, calls ``model.generate``
    and masks each completion after its first EOS; this subclass does the same with
    :func:`engine.decode` (the same ``torch.multinomial`` draws on the same probabilities:
    ``tests/test_grpo.py`` compares the completions and a two-step run's logs; the probabilities
    agree to float rounding, so a draw that lands within rounding of a boundary could differ),
    because on the tiny CPU model ``generate``'s per-token bookkeeping costs more than the model.
    Where :func:`engine.supports_sampling` says no (a GPU, bf16 weights, top-k, min-p, a penalty,
    dropout, gradient checkpointing, env ``COURSE_FAST_DECODE=0``), where the generation config
    stops at other EOS ids than the trainer masks with, or with vLLM, continuous batching,
    DeepSpeed/FSDP, images or tools' images, it is TRL's own path unchanged. It plays the role
    vLLM plays on a GPU: a faster sampler, the same trainer.
    """
    import torch
    from trl import GRPOTrainer
    from trl.models import unwrap_model_for_generation
    from trl.trainer.utils import pad

    from . import engine

    class CourseGRPOTrainer(GRPOTrainer):
        __doc__ = grpo_trainer_class.__doc__

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                                  has_tool_images=False):
            model = self.accelerator.unwrap_model(self.model_wrapped)
            stop = self.generation_config.eos_token_id           # where generate stops (generation_kwargs may set it)
            stop = set(stop if isinstance(stop, (list, tuple)) else [stop])
            if (self.use_vllm or self.use_transformers_continuous_batching or images is not None or multimodal_fields
                    or has_tool_images or self.is_deepspeed_enabled or self.is_fsdp_enabled
                    or stop != set(self.eos_token_ids) or not engine.supports_sampling(model, self.generation_config)):
                return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                     has_tool_images)
            device = self.accelerator.device
            pad_id = self._tokenizer.pad_token_id
            prompts = [torch.tensor(ids) for ids in prompt_ids]   # left-padded with TRL's own helper, as its path does
            padded = pad(prompts, padding_value=pad_id, padding_side="left").to(device)
            mask = pad([torch.ones_like(t) for t in prompts], padding_value=0, padding_side="left").to(device)
            with unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                             gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                                             generation_kwargs=self.generation_kwargs) as unwrapped:
                completion_ids = engine.decode(unwrapped, padded, mask, self.generation_config.max_new_tokens,
                                               list(self.eos_token_ids), pad_id, self.generation_config.temperature)
            keep = generation.completion_mask_after_eos(completion_ids, list(self.eos_token_ids)).bool()
            return [c[m].tolist() for c, m in zip(completion_ids.cpu(), keep.cpu(), strict=True)], None

    return CourseGRPOTrainer


def gkd_trainer(student, teacher, tokenizer, profile: Profile, recipe: DistillRecipe, output_dir: str | Path,
                train_rows: list[dict], steps: int, lmbda: float, learning_rate: float, temperature: float = 1.0,
                logging_steps: int = 10):
    """TRL ``GKDTrainer`` (``trl.experimental.gkd``): logit distillation of ``teacher`` into ``student``.

    Each step, with probability ``lmbda``, the student samples the batch's answers at
    ``temperature`` (on-policy); otherwise the rows' own answers are used (off-policy).
    The loss is ``recipe.beta``'s generalised JSD between teacher and student over every
    answer token and the whole vocabulary, at temperature 1 (GKD's ``temperature`` only
    samples). ``train_rows`` are ``{"messages"}`` chats; for on-policy steps only their
    prompts matter. TRL 1.15's stable ``DistillationTrainer`` computes its loss with a
    Triton kernel (on a CPU, :class:`compat.DenseDivergenceFunction` stands in) and is
    on-policy only; GKD here, for λ.
    """
    import os
    from datasets import Dataset
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # GKD lives in trl.experimental, which warns on import
    from trl.experimental.gkd import GKDConfig, GKDTrainer
    install_trl_cpu_fallback()
    args = GKDConfig(
        output_dir=str(output_dir),
        **profile.trainer_kwargs(max_steps=steps, per_device_train_batch_size=recipe.batch_size,
                                 learning_rate=learning_rate, lr_scheduler_type="cosine",
                                 warmup_steps=max(1, steps // 20), logging_steps=log_every(logging_steps, steps)),
        lmbda=lmbda, beta=recipe.beta, temperature=temperature, max_new_tokens=recipe.max_new_tokens)
    return GKDTrainer(model=student, teacher_model=teacher, args=args, train_dataset=Dataset.from_list(train_rows),
                      processing_class=tokenizer)


def distillation_trainer(student, teacher, tokenizer, profile: Profile, output_dir: str | Path,
                         prompt_rows: list[dict], steps: int, learning_rate: float, batch_size: int,
                         max_completion_length: int, beta: float = 1.0, temperature: float = 1.0,
                         logging_steps: int = 10, **config_overrides):
    """TRL's stable ``DistillationTrainer``: on-policy distillation of ``teacher`` into ``student``.

    Every step the student samples one answer per prompt of ``prompt_rows`` (``{"prompt": [messages]}`` rows) at
    ``temperature``, the teacher scores every token of it, and the loss is the generalised JSD at ``beta`` (1: the
    reverse KL(student || teacher), TRL's default) over the answer tokens and the whole vocabulary, at the same
    ``temperature``. Its loss kernel is Triton's; on a CPU :class:`compat.DenseDivergenceFunction` stands in.
    ``config_overrides`` go to ``DistillationConfig`` (e.g. ``lr_scheduler_type="constant_with_warmup"``).
    """
    from datasets import Dataset
    from trl import DistillationConfig, DistillationTrainer
    install_trl_cpu_fallback()
    kwargs = dict(max_steps=steps, per_device_train_batch_size=batch_size, learning_rate=learning_rate,
                  logging_steps=log_every(logging_steps, steps), beta=beta, temperature=temperature,
                  max_completion_length=max_completion_length, disable_dropout=True)
    kwargs.update(config_overrides)
    args = DistillationConfig(output_dir=str(output_dir), **profile.trainer_kwargs(**kwargs))
    return DistillationTrainer(model=student, teacher_model=teacher, args=args,
                               train_dataset=Dataset.from_list(prompt_rows), processing_class=tokenizer)


class TimedCurveCallback(TrainerCallback):
    """A run measured against the seconds it has trained: runs of different methods compared at equal wall time.

    ``measure(model) -> float`` is called at the start, every ``every`` optimizer steps and at the end; ``curve`` holds
    ``(training seconds, step, value)``. The clock counts only training (sampling included, for on-policy methods):
    the time ``measure`` takes is left out. The steps are fixed, so the values are the same on every machine and only
    the seconds differ; give each method the number of steps that takes it about the same time, and a learning-rate
    schedule under which a point of the curve is what stopping there would give (constant after a short warm-up).
    """

    def __init__(self, every: int, measure):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.every, self.measure = every, measure
        self.curve: list[tuple[float, int, float]] = []

    def _record(self, step: int, model) -> None:
        import time
        now = time.perf_counter()
        self.curve.append((now - self._start - self._paused, step, float(self.measure(model))))
        self._paused += time.perf_counter() - now

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        import time
        self._start, self._paused = time.perf_counter(), 0.0
        self._record(0, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self._record(state.global_step, model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        if self.curve and self.curve[-1][1] != state.global_step:   # the last step is not a multiple of every
            self._record(state.global_step, model)

    @property
    def seconds_trained(self) -> float:
        return self.curve[-1][0] if self.curve else 0.0


class CriterionCallback(TrainerCallback):
    """Train a skill to a criterion: every ``every`` steps, measure it on held-out data and keep the curve.

    ``measure(model) -> float`` is the skill (a share on validation problems, say); ``curve`` is a list of ``(step,
    value)``, starting with step 0 (before training). With ``stop_at``, training stops at the first measurement that
    reaches it, and ``stopped_at`` is that step (else None). :meth:`require` then fails loudly where the trainer's
    step cap came first: a later stage never receives a model without the skill it needs.
    """

    def __init__(self, measure: Callable, *, every: int, stop_at: float | None = None, name: str = "the skill"):
        self.measure, self.every, self.stop_at, self.name = measure, every, stop_at, name
        self.stopped_at = None
        self.curve: list[tuple[int, float]] = []

    def _measure(self, step, model) -> float:
        value = float(self.measure(model))
        self.curve.append((step, value))
        return value

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._measure(0, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            value = self._measure(state.global_step, model)
            if self.stop_at is not None and value >= self.stop_at and self.stopped_at is None:
                self.stopped_at = state.global_step
                control.should_training_stop = True

    def require(self, why: str = "", strict: bool = True) -> int | None:
        """The step the criterion was reached at; where training ended without it, a RuntimeError naming the skill,
        the best value and ``why`` (what a later stage needs it for). ``strict=False`` (a smoke run of random
        weights, say) prints the message instead."""
        if self.stop_at is None or self.stopped_at is not None:
            return self.stopped_at
        best_step, best = max(self.curve, key=lambda point: point[1]) if self.curve else (0, float("nan"))
        message = (f"{self.name} did not reach {self.stop_at:.0%} within the step cap: best {best:.1%} at step "
                   f"{best_step} (measured every {self.every} steps: {self.curve}). {why}")
        if strict:
            raise RuntimeError(message)
        print("NOT REACHED: " + message)
        return None


class AccuracyCallback(CriterionCallback):
    """Every ``every`` steps, measure held-out greedy accuracy (validation split) and keep the curve.

    ``curve`` is a list of ``(step, accuracy)``, starting with step 0 (before training).
    With ``stop_at``, training stops at the first check whose accuracy reaches it;
    ``stopped_at`` is then that step (else None). ``max_new_tokens``: the profile's (no default).
    """

    def __init__(self, tokenizer, every: int = 50, n: int = 200, split: str = "validation", *, max_new_tokens: int,
                 stop_at: float | None = None):
        self.tokenizer, self.n, self.split, self.max_new_tokens = tokenizer, n, split, max_new_tokens
        super().__init__(self._accuracy, every=every, stop_at=stop_at, name="held-out accuracy")

    def _accuracy(self, model) -> float:
        return evaluate_arithmetic(model, self.tokenizer, split=self.split, n=self.n,
                                   max_new_tokens=self.max_new_tokens)["accuracy"]
