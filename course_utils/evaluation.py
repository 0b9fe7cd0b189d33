"""Held-out evaluation: batched generation, answer accuracy, format compliance.

Every training notebook measures its effect with :func:`evaluate_arithmetic` on the
fixed ``test`` split (300 problems: a 5-point change is about 1.5 standard errors
at worst, and the before/after gaps the course asserts are far larger).
"""
from __future__ import annotations

import math

import torch
from tqdm.auto import tqdm

from .data import load_jsonl, to_messages
from .losses import selective_log_softmax
from .rewards import is_correct, is_well_formatted

MIN_EVAL_SIZE = 200


def chat_prompt(tokenizer, question: str) -> str:
    """The chat-formatted prompt for one user question, ending where the assistant speaks."""
    return tokenizer.apply_chat_template(to_messages(question), tokenize=False, add_generation_prompt=True)


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], max_new_tokens: int = 48, batch_size: int = 64,
             do_sample: bool = False, temperature: float = 1.0, progress: bool = False) -> list[str]:
    """Complete each prompt; returns only the new text, special tokens removed.

    Prompts are left-padded so every row's continuation starts at the same column.
    Greedy by default, which makes evaluation deterministic.
    """
    if not isinstance(prompts, (list, tuple)) or not all(isinstance(p, str) for p in prompts):
        raise TypeError("prompts must be a list of strings")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    outputs: list[str] = []
    try:
        batches = range(0, len(prompts), batch_size)
        for start in tqdm(batches, desc="generate", disable=not progress, leave=False):
            chunk = list(prompts[start:start + batch_size])
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            gen_kwargs = dict(max_new_tokens=max_new_tokens, do_sample=do_sample,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            if do_sample:
                gen_kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
            out = model.generate(**enc, **gen_kwargs)
            new_tokens = out[:, enc["input_ids"].shape[1]:]
            outputs += tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
    finally:
        tokenizer.padding_side = old_side
        model.train(was_training)
    return outputs


def evaluate_arithmetic(model, tokenizer, split: str = "test", n: int = 300, max_new_tokens: int = 48,
                        batch_size: int = 100, return_samples: bool = False) -> dict:
    """Greedy-decode ``n`` held-out problems; report accuracy and format rate.

    Returns ``{"accuracy", "format_rate", "n", "stderr"}`` (fractions in [0, 1]),
    plus ``"samples"`` (question, completion, answer, correct) if asked.
    """
    if n < MIN_EVAL_SIZE:
        raise ValueError(f"n={n} is too small to trust: use at least {MIN_EVAL_SIZE} problems")
    problems = load_jsonl("arithmetic", split, n=n)
    if len(problems) < n:
        raise ValueError(f"split {split!r} has only {len(problems)} problems, asked for {n}")
    prompts = [chat_prompt(tokenizer, p["question"]) for p in problems]
    completions = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size)
    correct = [is_correct(c, p["answer"]) for c, p in zip(completions, problems)]
    formatted = [is_well_formatted(c) for c in completions]
    acc = sum(correct) / n
    result = {"accuracy": acc, "format_rate": sum(formatted) / n, "n": n,
              "stderr": math.sqrt(max(acc * (1 - acc), 1e-12) / n)}
    if return_samples:
        result["samples"] = [
            {"question": p["question"], "completion": c, "answer": p["answer"], "correct": ok}
            for p, c, ok in zip(problems, completions, correct)]
    return result


@torch.no_grad()
def mean_token_loss(model, tokenizer, texts: list[str], batch_size: int = 64, max_length: int = 256) -> float:
    """Average next-token cross-entropy (nats/token) of ``model`` over ``texts``.

    Each text is followed by EOS, as in pretraining; pads are ignored.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for start in range(0, len(texts), batch_size):
        chunk = [t + tokenizer.eos_token for t in texts[start:start + batch_size]]
        enc = tokenizer(chunk, return_tensors="pt", padding=True, truncation=True,
                        max_length=max_length, add_special_tokens=False).to(device)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        logits = model(**enc).logits[:, :-1].float()
        target = labels[:, 1:]
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=-100, reduction="sum")
        total += loss.item()
        count += (target != -100).sum().item()
    model.train(was_training)
    return total / max(count, 1)


def unigram_baseline_loss(tokenizer, train_texts: list[str], eval_texts: list[str]) -> float:
    """Cross-entropy (nats/token) of the best context-free model: token frequencies.

    Counts tokens (each text + EOS, as :func:`mean_token_loss` scores them) on
    ``train_texts`` with add-one smoothing and scores the next-token targets of
    ``eval_texts`` (every token but the first). A language model that learned
    anything about context must beat this.
    """
    vocab = len(tokenizer)
    counts = torch.ones(vocab, dtype=torch.float64)  # add-one smoothing
    for ids in tokenizer([t + tokenizer.eos_token for t in train_texts], add_special_tokens=False)["input_ids"]:
        counts += torch.bincount(torch.tensor(ids), minlength=vocab).double()
    logp = (counts / counts.sum()).log()
    total, count = 0.0, 0
    for ids in tokenizer([t + tokenizer.eos_token for t in eval_texts], add_special_tokens=False)["input_ids"]:
        targets = torch.tensor(ids[1:])
        total -= logp[targets].sum().item()
        count += len(targets)
    return total / max(count, 1)


@torch.no_grad()
def continuation_logprob(model, tokenizer, prefix: str, continuation: str) -> float:
    """``log P(continuation | prefix)`` under ``model``: the sum over the continuation's tokens."""
    prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    cont_ids = tokenizer(prefix + continuation, add_special_tokens=False)["input_ids"][len(prefix_ids):]
    if not cont_ids:
        raise ValueError(f"continuation {continuation!r} adds no tokens to {prefix!r}")
    device = next(model.parameters()).device
    ids = torch.tensor([prefix_ids + cont_ids], device=device)
    logps = selective_log_softmax(model(input_ids=ids).logits[:, :-1].float(), ids[:, 1:])[0]  # (T-1,)
    return float(logps[-len(cont_ids):].sum())


@torch.no_grad()
def per_token_losses(model, tokenizer, messages: list[dict]) -> tuple[list[str], list[float], list[int]]:
    """Tokens, next-token losses and assistant mask of one chat, for plotting what SFT averages."""
    enc = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    ids = torch.tensor([enc["input_ids"]], device=next(model.parameters()).device)
    logps = selective_log_softmax(model(input_ids=ids).logits[:, :-1].float(), ids[:, 1:])[0]  # (T-1,)
    losses = [0.0] + (-logps).tolist()
    return tokenizer.convert_ids_to_tokens(enc["input_ids"]), losses, list(enc["assistant_masks"])


@torch.no_grad()
def score_completions(reward_model, tokenizer, questions: list[str], completions: list[str],
                      batch_size: int = 64) -> torch.Tensor:
    """Reward-model scores, shape (N,), of each (question, completion) chat.

    Texts are built as TRL's ``RewardTrainer`` builds them: the chat template over
    ``[user, assistant]`` messages, tokenized without extra special tokens, right-padded.
    """
    if len(questions) != len(completions):
        raise ValueError(f"{len(questions)} questions but {len(completions)} completions")
    was_training = reward_model.training
    reward_model.eval()
    device = next(reward_model.parameters()).device
    old_side = tokenizer.padding_side
    tokenizer.padding_side = "right"
    scores = []
    try:
        for start in range(0, len(questions), batch_size):
            texts = [tokenizer.apply_chat_template(to_messages(q, c), tokenize=False)
                     for q, c in zip(questions[start:start + batch_size], completions[start:start + batch_size])]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            scores.append(reward_model(**enc).logits[:, 0].float().cpu())
    finally:
        tokenizer.padding_side = old_side
        reward_model.train(was_training)
    return torch.cat(scores)


def pair_accuracy(reward_model, tokenizer, rows: list[dict]) -> dict:
    """Share of preference rows whose chosen completion out-scores the rejected one.

    ``rows`` have ``prompt``, ``chosen``, ``rejected`` (strings, as in ``data/preferences_*.jsonl``).
    Returns ``{"accuracy", "chosen", "rejected"}`` (scores as tensors).
    """
    questions = [r["prompt"] for r in rows]
    chosen = score_completions(reward_model, tokenizer, questions, [r["chosen"] for r in rows])
    rejected = score_completions(reward_model, tokenizer, questions, [r["rejected"] for r in rows])
    return {"accuracy": float((chosen > rejected).float().mean()), "chosen": chosen, "rejected": rejected}
