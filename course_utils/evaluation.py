"""Held-out evaluation: greedy accuracy, sampled pass@k, failure breakdown, pair accuracy.

Every training notebook measures its effect with :func:`evaluate_arithmetic` on the
fixed ``test`` split (300 problems: a 5-point change is about 1.5 standard errors
at worst, and the before/after gaps the course asserts are far larger).
:func:`pass_at_k` adds sampled accuracy (pass@1 and pass@k), and
:func:`failure_breakdown` says *how* wrong answers are wrong, so a preference
method can show which behaviour it changed.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from .chat import chat_prompt
from .data import everyday_sentences, load_jsonl, to_messages
from .generation import eval_mode, generate, logps_under, sample_completions
from .losses import completion_logps, kl_estimate, sft_loss
from .run_config import MIN_EVAL_SIZE
from .rewards import extract_answer, extract_think, is_correct, is_well_formatted, parse_int

FAILURE_KINDS = ("correct", "format error", "answer contradicts think", "wrong sum")


def heldout_problems(split: str = "test", n: int = 300) -> list[dict]:
    """The first ``n`` problems of ``split``, refusing evaluation sets too small to trust."""
    if n < MIN_EVAL_SIZE:
        raise ValueError(f"n={n} is too small to trust: use at least {MIN_EVAL_SIZE} problems")
    problems = load_jsonl("arithmetic", split, n=n)
    if len(problems) < n:
        raise ValueError(f"split {split!r} has only {len(problems)} problems, asked for {n}")
    return problems


def think_conclusion(completion) -> int | None:
    """The number the think section concludes with (its last integer), or None."""
    think = extract_think(completion)
    if think is None:
        return None
    tokens = think.replace(",", " ").split()
    for token in reversed(tokens):
        value = parse_int(token.rstrip("."))
        if value is not None:
            return value
    return None


def classify_failure(completion, answer) -> str:
    """One of :data:`FAILURE_KINDS` for a completion and the reference answer.

    ``correct``: the ``<answer>`` holds the right number (as accuracy counts it).
    ``format error``: otherwise, when the text is not exactly ``<think>…</think><answer>…</answer>``.
    ``answer contradicts think``: well formed, but the answer differs from the number the think concludes.
    ``wrong sum``: well formed and self-consistent, and wrong.
    """
    if is_correct(completion, answer):
        return "correct"
    if not is_well_formatted(completion):
        return "format error"
    if parse_int(extract_answer(completion)) != think_conclusion(completion):
        return "answer contradicts think"
    return "wrong sum"


def right_off_working(completion, answer) -> bool:
    """A right answer whose think section concludes a different number (``<think>… so 49</think><answer>58</answer>``
    for 23 + 35): a verifier that reads only the ``<answer>`` pays for it although the working does not support it.
    An answer without a think section (or one without a number) is not counted here: the format rate sees it."""
    if not is_correct(completion, answer):
        return False
    concluded = think_conclusion(completion)
    return concluded is not None and parse_int(extract_answer(completion)) != concluded


def failure_breakdown(completions: list, answers: list) -> dict[str, float]:
    """Share of each of :data:`FAILURE_KINDS` (they sum to 1)."""
    if len(completions) != len(answers) or not completions:
        raise ValueError(f"need as many completions as answers (got {len(completions)} and {len(answers)})")
    counts = Counter(classify_failure(c, a) for c, a in zip(completions, answers))
    return {kind: counts[kind] / len(completions) for kind in FAILURE_KINDS}


def evaluate_arithmetic(model, tokenizer, split: str = "test", *, n: int, max_new_tokens: int,
                        batch_size: int = 100, return_samples: bool = False) -> dict:
    """Greedy-decode ``n`` held-out problems; report accuracy, format rate and failures.

    ``n`` and ``max_new_tokens`` have no default: pass the profile's (``profile.eval_size``,
    ``profile.max_new_tokens``), so that a hub model's longer answers are never cut at a tiny budget.

    Returns ``{"accuracy", "format_rate", "n", "stderr", "failures", "right_off_working_rate"}`` (fractions in
    [0, 1]; ``failures`` is :func:`failure_breakdown`; the last is the share of answers that are right although
    their working concludes another number, :func:`right_off_working`), plus ``"samples"`` (question,
    completion, answer, correct) if asked.
    """
    problems = heldout_problems(split, n)
    prompts = [chat_prompt(tokenizer, p["question"]) for p in problems]
    completions = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size)
    answers = [p["answer"] for p in problems]
    correct = [is_correct(c, a) for c, a in zip(completions, answers)]
    formatted = [is_well_formatted(c) for c in completions]
    acc = sum(correct) / n
    result = {"accuracy": acc, "format_rate": sum(formatted) / n, "n": n,
              "stderr": math.sqrt(max(acc * (1 - acc), 1e-12) / n),
              "failures": failure_breakdown(completions, answers),
              "right_off_working_rate": sum(map(right_off_working, completions, answers)) / n}
    if return_samples:
        result["samples"] = [
            {"question": p["question"], "completion": c, "answer": p["answer"], "correct": ok}
            for p, c, ok in zip(problems, completions, correct)]
    return result


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (better than p +- 2 SE near 0 or 1)."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_at_k_estimator(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k from ``num_correct`` right answers among ``num_samples`` (Chen et al., 2021).

    .. math:: \text{pass@}k = 1 - \binom{n - c}{k} \Big/ \binom{n}{k}

    the probability that at least one of ``k`` answers drawn without replacement from
    the ``n`` is right. (``1 - (1 - c/n)^k`` would be biased.)
    """
    if not 0 <= num_correct <= num_samples or not 1 <= k <= num_samples:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n; got n={num_samples}, c={num_correct}, k={k}")
    if num_samples - num_correct < k:
        return 1.0
    # the product form of C(n-c, k) / C(n, k), stable for large n
    return 1.0 - float(np.prod(1.0 - k / np.arange(num_samples - num_correct + 1, num_samples + 1)))


def pass_at_k(model, tokenizer, k: int, temperature: float = 1.0, *, n: int, max_new_tokens: int,
              num_samples: int | None = None, split: str = "test", greedy: bool = True, batch_size: int = 128) -> dict:
    """Sampled accuracy on ``n`` held-out problems: pass@1 and pass@k, next to greedy accuracy.

    ``n`` and ``max_new_tokens`` have no default: pass the profile's (as :func:`evaluate_arithmetic`).

    Draws ``num_samples`` (default ``k``) answers per problem at ``temperature``.
    ``pass@1`` is the mean share of right samples; ``pass@k`` uses
    :func:`pass_at_k_estimator`. Returns ``{"pass@1", "pass@k", "k", "num_samples",
    "temperature", "n", "greedy_accuracy", "greedy_format_rate"}`` (the last two only if ``greedy``).
    """
    num_samples = k if num_samples is None else num_samples
    problems = heldout_problems(split, n)
    prompts = [chat_prompt(tokenizer, p["question"]) for p in problems]
    samples = sample_completions(model, tokenizer, prompts, num_samples=num_samples, temperature=temperature,
                                 max_new_tokens=max_new_tokens, batch_size=batch_size)
    right = np.array([is_correct(text, problems[i // num_samples]["answer"])
                      for i, text in enumerate(samples.texts)]).reshape(n, num_samples)
    result = {"pass@1": float(right.mean()),
              "pass@k": float(np.mean([pass_at_k_estimator(num_samples, int(c), k) for c in right.sum(1)])),
              "k": k, "num_samples": num_samples, "temperature": temperature, "n": n}
    if greedy:
        greedy_eval = evaluate_arithmetic(model, tokenizer, split, n=n, max_new_tokens=max_new_tokens)
        result["greedy_accuracy"], result["greedy_format_rate"] = greedy_eval["accuracy"], greedy_eval["format_rate"]
    return result


@torch.no_grad()
def mean_token_loss(model, tokenizer, texts: list[str], batch_size: int = 64, max_length: int = 256) -> float:
    """Average next-token cross-entropy (nats/token) of ``model`` over ``texts``.

    Each text is followed by EOS, as in pretraining; pads are ignored.
    """
    device = next(model.parameters()).device
    total, count = 0.0, 0
    with eval_mode(model, tokenizer, padding_side="right"):
        for start in range(0, len(texts), batch_size):
            chunk = [t + tokenizer.eos_token for t in texts[start:start + batch_size]]
            enc = tokenizer(chunk, return_tensors="pt", padding=True, truncation=True,
                            max_length=max_length, add_special_tokens=False).to(device)
            mask = enc["attention_mask"].clone()
            mask[:, 0] = 0  # the first token has no prediction
            logps = completion_logps(model, enc["input_ids"], enc["attention_mask"], mask)   # (B, T)
            total -= logps.sum().item()
            count += mask.sum().item()
    return total / max(count, 1)


def everyday_loss(model, tokenizer, split: str = "validation") -> float:
    """Mean token loss (nats/token) on the corpus's held-out everyday sentences: the non-reasoning skill of 08.

    The pretrained model's own skill (plain text, as in pretraining), so a later stage
    that forgets it shows a higher loss than the ``pretrain`` stage.
    """
    return mean_token_loss(model, tokenizer, everyday_sentences(split))


@torch.no_grad()
def packed_loss(model, blocks: torch.Tensor, batch_size: int = 64) -> float:
    """Mean next-token loss (nats/token) over packed blocks ``(N, block_size)``: the ``Trainer``'s eval loss.

    Every block is full, so this is the mean over all predicted tokens; unlike
    :func:`mean_token_loss` a block may span two documents (joined by EOS).
    """
    device = next(model.parameters()).device
    total = 0.0
    with eval_mode(model):
        for start in range(0, len(blocks), batch_size):
            x = blocks[start:start + batch_size].to(device)
            total += sft_loss(model(input_ids=x).logits, x).item() * len(x)
    return total / len(blocks)


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
    mask = torch.tensor([[0] * len(prefix_ids) + [1] * len(cont_ids)], device=device)
    with eval_mode(model):
        return float(completion_logps(model, ids, torch.ones_like(ids), mask).sum())


@torch.no_grad()
def per_token_losses(model, tokenizer, messages: list[dict]) -> tuple[list[str], list[float], list[int]]:
    """Tokens, next-token losses and assistant mask of one chat, for plotting what SFT averages."""
    enc = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    ids = torch.tensor([enc["input_ids"]], device=next(model.parameters()).device)
    every_token = torch.ones_like(ids)
    with eval_mode(model):
        losses = (-completion_logps(model, ids, every_token, every_token))[0].tolist()  # position 0 gets 0
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
    device = next(reward_model.parameters()).device
    scores = []
    with eval_mode(reward_model, tokenizer, padding_side="right"):
        for start in range(0, len(questions), batch_size):
            texts = [tokenizer.apply_chat_template(to_messages(q, c), tokenize=False)
                     for q, c in zip(questions[start:start + batch_size], completions[start:start + batch_size])]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            scores.append(reward_model(**enc).logits[:, 0].float().cpu())
    return torch.cat(scores)


class RewardModelScorer:
    """A learned reward model as the ``scorer`` of ``experiment.evaluate``: ``scorer(questions, completions)``.

    Each (question, completion) chat is scored as TRL's trainers score it (:func:`score_completions`: the chat
    template, right padding, the head's one logit), the scores PPO trains on (``ppo.reward_model_scores``), so
    ``Eval.score`` is the reward model's mean score of the very greedy answers whose accuracy the ``Eval`` reports.
    The ``(N,)`` tensor of the latest call's scores, one per answer in the order of ``Eval.samples``, stays in
    ``last`` (for :func:`top_scored_wrong`, and for a mean computed in float32 as the tensor's own ``mean()``).
    """

    def __init__(self, reward_model, tokenizer):
        self.reward_model, self.tokenizer = reward_model, tokenizer
        self.last: torch.Tensor | None = None

    def __call__(self, questions: list[str], completions: list[str]) -> list[float]:
        self.last = score_completions(self.reward_model, self.tokenizer, questions, completions)
        return self.last.tolist()


def pair_accuracy(reward_model, tokenizer, rows: list[dict]) -> dict:
    """Share of preference rows whose chosen completion out-scores the rejected one.

    ``rows`` have ``prompt``, ``chosen``, ``rejected`` (strings, as in ``data/preferences_*.jsonl``).
    Returns ``{"accuracy", "chosen", "rejected"}`` (scores as tensors).
    """
    questions = [r["prompt"] for r in rows]
    chosen = score_completions(reward_model, tokenizer, questions, [r["chosen"] for r in rows])
    rejected = score_completions(reward_model, tokenizer, questions, [r["rejected"] for r in rows])
    return {"accuracy": float((chosen > rejected).float().mean()), "chosen": chosen, "rejected": rejected}


@torch.no_grad()
def kl_to_reference(model, reference, tokenizer, *, n: int, max_new_tokens: int, num_samples: int = 2,
                    split: str = "test", batch_size: int = 128) -> dict:
    """KL(pi || pi_ref) per answer on held-out prompts, estimated from the model's own samples.

    .. math:: \\mathrm{KL} = \\mathbb{E}_{y \\sim \\pi}\\Big[\\sum_t \\log\\pi(y_t \\mid \\cdot) - \\log\\pi_{ref}(y_t \\mid \\cdot)\\Big]

    Samples ``num_samples`` answers per problem at temperature 1 and averages the
    summed log-ratio (the k1 estimator: unbiased, noisy per sample, so the standard
    error is reported too). This is the quantity the KL-regularised objective keeps
    small, measured on whole answers. ``n`` and ``max_new_tokens``: the profile's.
    Returns ``{"kl", "stderr", "n_samples"}``.
    """
    problems = heldout_problems(split, n)
    prompts = [chat_prompt(tokenizer, p["question"]) for p in problems]
    out = sample_completions(model, tokenizer, prompts, num_samples=num_samples, temperature=1.0,
                             max_new_tokens=max_new_tokens, batch_size=batch_size, return_logps=True)
    ref_logps = logps_under(reference, out, batch_size=batch_size).float().cpu()
    per_answer = (kl_estimate(out.logps, ref_logps, "k1") * out.completion_mask).sum(1).double()
    return {"kl": per_answer.mean().item(), "stderr": (per_answer.std() / math.sqrt(len(per_answer))).item(),
            "n_samples": len(per_answer)}


def top_scored_wrong(samples: Sequence[Mapping], scores, k: int = 5) -> list[tuple[float, Mapping]]:
    """The ``k`` wrong answers with the highest scores, best first, as ``(score, sample)`` pairs.

    ``samples``: ``Eval.samples`` (dicts with ``correct``; ``experiment.evaluate(..., keep_samples=True)``);
    ``scores``: one per sample, in the same order (an ``evaluation.RewardModelScorer``'s ``last``). Ties keep the
    samples' order.
    """
    if len(samples) != len(scores):
        raise ValueError(f"{len(samples)} samples but {len(scores)} scores")
    wrong = [(float(score), sample) for score, sample in zip(scores, samples) if not sample["correct"]]
    return sorted(wrong, key=lambda pair: -pair[0])[:k]
