"""Training recipes: the 🤗 / TRL trainers each stage uses, set up once.

A notebook shows the recipe (``inspect.getsource``), builds its trainer here and
trains; ``stages`` calls the same functions to rebuild a missing checkpoint. All
arguments that differ between CPU and GPU come from ``Profile.trainer_kwargs``.
"""
from __future__ import annotations

from pathlib import Path

from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

from .data import load_jsonl, preference_rows, sft_rows
from .profile import Profile

PRETRAIN_STEPS, PRETRAIN_BATCH, PRETRAIN_LR = 900, 32, 3e-3
SFT_STEPS, SFT_BATCH, SFT_LR = 400, 32, 1e-3
REWARD_STEPS, REWARD_BATCH, REWARD_LR = 250, 32, 1e-3


BLOCK_SIZE = 64


def pack_corpus(tokenizer, split: str, block_size: int = BLOCK_SIZE):
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


def corpus_dataset(tokenizer, split: str, block_size: int = BLOCK_SIZE):
    """Packed corpus blocks as a ``datasets.Dataset`` with an ``input_ids`` column."""
    from datasets import Dataset
    return Dataset.from_dict({"input_ids": pack_corpus(tokenizer, split, block_size).tolist()})


def pretrain_trainer(model, tokenizer, profile: Profile, output_dir: str | Path,
                     steps: int = PRETRAIN_STEPS, eval_every: int = 100) -> Trainer:
    """A ``transformers.Trainer`` set up for next-token pretraining on the corpus."""
    args = TrainingArguments(
        output_dir=str(output_dir),
        **profile.trainer_kwargs(
            max_steps=steps, per_device_train_batch_size=PRETRAIN_BATCH, per_device_eval_batch_size=64,
            learning_rate=PRETRAIN_LR, lr_scheduler_type="cosine", warmup_steps=max(1, steps // 20),
            weight_decay=0.1, logging_steps=max(1, eval_every // 2), eval_strategy="steps",
            eval_steps=eval_every))
    return Trainer(
        model=model, args=args, train_dataset=corpus_dataset(tokenizer, "train"),
        eval_dataset=corpus_dataset(tokenizer, "validation"),
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))


def sft_trainer(model, tokenizer, profile: Profile, output_dir: str | Path, train_rows: list[dict] | None = None,
                steps: int = SFT_STEPS, learning_rate: float = SFT_LR, logging_steps: int = 20):
    """TRL ``SFTTrainer`` on chat data, loss on the assistant's tokens only.

    ``train_rows`` are ``{"messages": [...]}`` rows (default: the arithmetic train
    split via :func:`course_utils.data.sft_rows`). ``assistant_only_loss=True`` uses
    the chat template's ``{% generation %}`` marks (TRL patches them into known hub
    templates such as Qwen3's).
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer
    rows = sft_rows("train") if train_rows is None else train_rows
    args = SFTConfig(
        output_dir=str(output_dir),
        **profile.trainer_kwargs(
            max_steps=steps, per_device_train_batch_size=SFT_BATCH, learning_rate=learning_rate,
            lr_scheduler_type="cosine", warmup_steps=max(1, steps // 20), logging_steps=logging_steps,
            assistant_only_loss=True, max_length=256 if profile.is_cpu else 1024))
    return SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)


def reward_trainer(model, tokenizer, profile: Profile, output_dir: str | Path, train_rows: list[dict] | None = None,
                   steps: int = REWARD_STEPS, learning_rate: float = REWARD_LR, logging_steps: int = 10):
    """TRL ``RewardTrainer``: Bradley-Terry loss on (prompt, chosen, rejected) chats.

    ``model`` is a sequence classifier with one output (``num_labels=1``).
    """
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer
    rows = preference_rows("train") if train_rows is None else train_rows
    args = RewardConfig(
        output_dir=str(output_dir),
        **profile.trainer_kwargs(
            max_steps=steps, per_device_train_batch_size=REWARD_BATCH, learning_rate=learning_rate,
            lr_scheduler_type="cosine", warmup_steps=max(1, steps // 20), logging_steps=logging_steps,
            max_length=256 if profile.is_cpu else 1024))
    return RewardTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)


class AccuracyCallback(TrainerCallback):
    """Every ``every`` steps, measure held-out accuracy (validation split) and keep the curve.

    ``curve`` is a list of ``(step, accuracy)``, starting with step 0 (before training).
    """

    def __init__(self, tokenizer, every: int = 50, n: int = 200, split: str = "validation", max_new_tokens: int = 48):
        self.tokenizer, self.every, self.n, self.split, self.max_new_tokens = tokenizer, every, n, split, max_new_tokens
        self.curve: list[tuple[int, float]] = []

    def _measure(self, step, model):
        from .evaluation import evaluate_arithmetic
        acc = evaluate_arithmetic(model, self.tokenizer, split=self.split, n=self.n,
                                  max_new_tokens=self.max_new_tokens)["accuracy"]
        self.curve.append((step, acc))

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._measure(0, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self._measure(state.global_step, model)
