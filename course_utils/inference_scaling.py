"""Inference-time scaling (notebook 10): spend more compute per question, change no weight.

Three families, each a few small functions:

* **Many answers, one pick** — :func:`majority_vote` (self-consistency),
  :func:`best_of_n` (the highest score of a reward model wins),
  :func:`weighted_vote`, and :func:`paraphrase_questions`, which asks the same sum in
  other words and with its operands swapped, so that the answers' mistakes stop agreeing
  (:func:`vote_over_wordings` answers the wordings and votes). :func:`curve` turns a
  ``(problems, N)`` table of answers into accuracy at ``N = 1, 2, 4, ...``
  (``evaluation.wilson_interval`` gives each point its 95% interval); :func:`at_n` and
  :func:`at_n_columns` put a curve into an ``experiment.Runs`` log and its tables.
* **A process reward model in miniature** — the answers are column-addition steps,
  so :func:`step_spans` can cut one into steps and :func:`step_labels` can label each
  step automatically against the true working. :func:`prm_training_rows` writes
  answers with the policy's typical mistakes, :func:`prm_trainer` trains
  transformers' token classifier on them, :func:`prm_step_scores` reads one
  probability per step, and :func:`prm_beam_search` searches step by step with it.
* **A generative reward model, DeepSeek-GRM style** — :func:`grm_critique` writes the
  principled critique and verdict the judge learns to write, :func:`grm_judgements`
  samples ``k`` of them per answer (``GRM_STYLES``: with principles, with the check alone, or a bare verdict),
  :func:`verdict_scores` turns them into scores with or without a meta reward model's filter,
  :func:`pair_judgement_accuracy` and :func:`judgement_curve` score a judge on preference pairs,
  :func:`verdict_rates` its single critiques, :func:`meta_rm_rows` builds (right critique, wrong
  critique) pairs for the meta reward model and :func:`meta_rm_scores` scores every
  critique with it.
"""
from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .data import ANSWER_CLOSE, ANSWER_OPEN, QUESTION_TEMPLATES, NAMES, THINGS, THINK_CLOSE, THINK_OPEN, \
    column_steps, format_completion, to_messages
from .chat import chat_prompt
from .evaluation import score_completions, think_conclusion
from .generation import eval_mode, generate, sample_completions
from .rewards import extract_answer, extract_think, is_well_formatted, parse_int

NS = (1, 2, 4, 8, 16, 32)


# --------------------------------------------------------------------------- many answers, one pick
def majority_vote(answers: list) -> int | None:
    """The most common answer, ignoring ``None`` (unparsable); ties go to the one seen first."""
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == best)


def weighted_vote(answers: list, weights) -> int | None:
    """The answer with the largest summed weight (a reward model's vote); ties go to the one seen first."""
    total: dict = defaultdict(float)
    for a, w in zip(answers, weights):
        if a is not None:
            total[a] += float(w)
    if not total:
        return None
    best = max(total.values())
    return next(a for a in answers if a is not None and total[a] == best)


def best_of_n(answers: list, scores) -> int | None:
    """The answer of the highest-scoring sample (first one on a tie)."""
    if len(answers) == 0:
        return None
    return answers[int(np.argmax(np.asarray(scores, dtype=float)))]


def curve(answers, truth, pick, scores=None, ns=NS) -> dict[int, float]:
    """Accuracy of ``pick`` over the first ``n`` answers of each problem, for each ``n`` in ``ns``.

    ``answers``: ``(problems, N)`` nested list of ints or None; ``truth``: the right ints;
    ``pick(answers_n)`` or, with ``scores``, ``pick(answers_n, scores_n)`` returns one answer.
    """
    out = {}
    for n in ns:
        if n > len(answers[0]):
            break
        right = [(pick(a[:n]) if scores is None else pick(a[:n], s[:n])) == t
                 for a, s, t in zip(answers, scores if scores is not None else answers, truth)]
        out[n] = float(np.mean(right))
    return out


def pass_curve(correct, ns=NS) -> dict[int, float]:
    """pass@n from a ``(problems, N)`` boolean table (the first ``n`` samples): the oracle verifier's best-of-n."""
    correct = np.asarray(correct, dtype=bool)
    return {n: float(correct[:, :n].any(1).mean()) for n in ns if n <= correct.shape[1]}


def at_n(points: dict[int, float]) -> dict[str, float]:
    """A curve's points as the figures of one run of an ``experiment.Runs`` log: ``{1: 0.25, 8: 0.31}`` ->
    ``{"at_1_accuracy": 0.25, "at_8_accuracy": 0.31}`` (``Runs.table`` prints ``*_accuracy`` as percentages)."""
    return {f"at_{n}_accuracy": float(a) for n, a in sorted(points.items())}


def at_n_columns(ns, label: str = "N") -> dict[str, str]:
    """The ``Runs.table`` columns of :func:`at_n`'s figures: ``[1, 8]`` -> ``{"at_1_accuracy": "N = 1", ...}``."""
    return {f"at_{n}_accuracy": f"{label} = {n}" for n in ns}


def answers_of(completions: list[str]) -> list[int | None]:
    """The integer in each completion's answer tags (None when missing or not a number)."""
    return [parse_int(extract_answer(c)) for c in completions]


def paraphrase_questions(problem: dict, n: int, rng: random.Random, swap_operands: bool = True) -> list[str]:
    """``n`` wordings of the same sum: every question template once (in random order), then at random.

    Names and things are drawn afresh, so no two wordings need be the same text. With
    ``swap_operands`` every second wording asks ``b + a`` instead of ``a + b`` (the same sum):
    the tiny model's commonest mistake is misreading a digit of the question, and which digit it
    misreads depends on where the number stands, so the swapped wordings' mistakes disagree with the
    others' more often than those of rewording alone (notebook 10 measures both, and :func:`vote_over_wordings`
    votes over either). This is the course's stand-in for prompt ensembles: more answers whose mistakes disagree.
    """
    order = rng.sample(range(len(QUESTION_TEMPLATES)), len(QUESTION_TEMPLATES))
    picks = [order[i] if i < len(order) else rng.randrange(len(QUESTION_TEMPLATES)) for i in range(n)]
    wordings = []
    for i, t in enumerate(picks):
        a, b = (problem["b"], problem["a"]) if swap_operands and i % 2 == 1 else (problem["a"], problem["b"])
        wordings.append(QUESTION_TEMPLATES[t].format(n=rng.choice(NAMES), a=a, b=b, t=rng.choice(THINGS)))
    return wordings


@dataclass(frozen=True)
class WordingVote:
    """The greedy answers to several wordings of each question, and the vote over them.

    ``curve``: accuracy of the majority vote over the first ``N`` wordings (:func:`curve`); ``right``: a
    ``(problems, wordings)`` boolean array, each wording's own answer right or not; ``texts``: the completions, the
    wordings of problem 0 first.
    """
    curve: dict[int, float]
    right: np.ndarray
    texts: list[str]


def vote_over_wordings(policy, tokenizer, wordings: list[list[str]], truth: list[int], max_new_tokens: int,
                       batch_size: int = 512) -> WordingVote:
    """Answer every wording of every question greedily (``wordings``: one list of ``N`` per problem, as
    :func:`paraphrase_questions` writes them) and vote over each problem's answers; ``truth``: the right sums."""
    if len(wordings) != len(truth):
        raise ValueError(f"{len(wordings)} problems' wordings but {len(truth)} right answers")
    n = len(wordings[0]) if wordings else 0
    if any(len(w) != n for w in wordings):
        raise ValueError("every problem needs the same number of wordings")
    texts = generate(policy, tokenizer, [chat_prompt(tokenizer, q) for qs in wordings for q in qs],
                     max_new_tokens=max_new_tokens, batch_size=batch_size)
    answers = [answers_of(texts[i * n:(i + 1) * n]) for i in range(len(wordings))]
    right = np.array([[a == t for a in row] for row, t in zip(answers, truth)], dtype=bool).reshape(len(wordings), n)
    return WordingVote(curve(answers, truth, majority_vote), right, texts)


# --------------------------------------------------------------------------- process rewards
def reference_steps(a: int, b: int) -> list[str]:
    """The four steps of the true working of ``a + b``: ones column, tens column, conclusion, answer."""
    return column_steps(a, b).split(", ") + [f"so {a + b}", f"{ANSWER_OPEN}{a + b}{ANSWER_CLOSE}"]


def step_spans(completion: str) -> list[tuple[int, str]]:
    """Cut a completion into steps: ``[(end character, step text)]``.

    The think block splits at ``", "``; what follows ``</think>`` is the last step. A
    think block not closed yet (a partial answer, in a step-level search) gives only its
    pieces; a completion that does not open with ``<think>`` is one step.
    """
    if not completion.startswith(THINK_OPEN):
        return [(len(completion), completion)]
    close = completion.find(THINK_CLOSE)
    body = completion[len(THINK_OPEN):] if close < 0 else completion[len(THINK_OPEN):close]
    spans, pos = [], len(THINK_OPEN)
    for piece in body.split(", "):
        spans.append((pos + len(piece), piece))
        pos += len(piece) + 2
    if close >= 0:
        spans.append((len(completion), completion[close + len(THINK_CLOSE):]))
    return spans


def step_labels(completion: str, a: int, b: int) -> list[int]:
    """1 for each step that is right *and* follows only right steps, else 0 (one label per :func:`step_spans`).

    A step is right when it equals the true working's step; once one step is wrong,
    every later step is labelled 0 (the prefix can no longer be completed correctly
    by honest steps). The last step is right only if the completion has exactly the
    true working's four steps.
    """
    ref, ok, labels = reference_steps(a, b), True, []
    spans = step_spans(completion)
    for i, (_, text) in enumerate(spans):
        last = i == len(spans) - 1
        ok = ok and i < len(ref) and text == ref[i] and (not last or len(spans) == len(ref))
        labels.append(int(ok))
    return labels


def first_wrong_step(completion: str, a: int, b: int) -> str:
    """Where a completion first leaves the true working, in words.

    ``"right"`` if no step is wrong; ``"format"`` if it does not have the four steps;
    for a column step, whether its digits are the question's (``"added wrongly"``) or
    not (``"misread a digit"`` — a wrong carry lands here too); else which later step
    contradicts the working.
    """
    labels = step_labels(completion, a, b)
    if all(labels):
        return "right"
    i = labels.index(0)
    spans = step_spans(completion)
    if len(spans) != 4:
        return "format"
    if i < 2:
        got, want = spans[i][1].split(" = ")[0], reference_steps(a, b)[i].split(" = ")[0]
        return ["ones", "tens"][i] + (" column: added wrongly" if got == want else " column: misread a digit")
    return ["conclusion", "answer"][i - 2] + " contradicts the working"


def misread_completion(a: int, b: int, rng: random.Random) -> str:
    """The working of a sum with one digit of ``a`` or ``b`` misread, carried through consistently.

    This is the policy's commonest mistake (measured in notebook 10): the steps add
    up, but one of the numbers they add is not the question's.
    """
    while True:
        digit, x, y = rng.randint(0, 9), a, b
        which = rng.randrange(4)
        if which == 0:
            x = a // 10 * 10 + digit
        elif which == 1:
            x = digit * 10 + a % 10
        elif which == 2:
            y = b // 10 * 10 + digit
        else:
            y = digit * 10 + b % 10
        if (x, y) != (a, b) and 10 <= x <= 99 and 10 <= y <= 99:
            return format_completion(x, y)


def prm_training_rows(problems: list[dict], seed: int, right_share: float = 0.4) -> list[dict]:
    """One labelled answer per problem: right, misread, an arithmetic slip, or a contradicting answer.

    Returns ``{"question", "completion", "labels"}`` rows, labels from :func:`step_labels`.
    The mix (40% right, 40% misread, 10% slip, 10% contradiction) gives the PRM balanced
    step labels; the wrong kinds are the ones the policy makes.
    """
    rng, rows = random.Random(seed), []
    for p in problems:
        a, b, r = p["a"], p["b"], rng.random()
        if r < right_share:
            text = format_completion(a, b)
        elif r < right_share + (1 - right_share) * 2 / 3:
            text = misread_completion(a, b, rng)
        elif r < right_share + (1 - right_share) * 5 / 6:   # slip in the ones column, carried on
            ones = rng.choice([o for o in range(19) if o != a % 10 + b % 10])
            tens = a // 10 + b // 10 + ones // 10
            total = tens * 10 + ones % 10
            text = (f"{THINK_OPEN}{a % 10} + {b % 10} = {ones}, {a // 10} + {b // 10} + {ones // 10} = {tens}, "
                    f"so {total}{THINK_CLOSE}{ANSWER_OPEN}{total}{ANSWER_CLOSE}")
        else:
            text = format_completion(a, b, answer=rng.choice([n for n in range(20, 199) if n != a + b]))
        rows.append({"question": p["question"], "completion": text, "labels": step_labels(text, a, b)})
    return rows


def encode_steps(tokenizer, question: str, completion: str, labels: list[int] | None = None) -> dict:
    """Token ids of the chat prompt + completion, with each step's label on the step's last token.

    Every other position gets -100 (ignored by the loss), as token classification
    expects. Without ``labels`` the step ends are marked 1, to find them at scoring time.
    """
    prompt = chat_prompt(tokenizer, question)
    enc = tokenizer(prompt + completion, add_special_tokens=False, return_offsets_mapping=True)
    spans = step_spans(completion)
    labels = [1] * len(spans) if labels is None else labels
    if len(labels) != len(spans):
        raise ValueError(f"{len(labels)} labels for {len(spans)} steps")
    out = [-100] * len(enc["input_ids"])
    for (end, _), label in zip(spans, labels):
        char = len(prompt) + max(end, 1) - 1     # the step's last character
        for t, (s, e) in enumerate(enc["offset_mapping"]):
            if s <= char < e:
                out[t] = label
                break
    return {"input_ids": enc["input_ids"], "labels": out}


def prm_trainer(model, tokenizer, profile, rows: list[dict], output_dir: str | Path, steps: int,
                learning_rate: float, batch_size: int = 32, logging_steps: int = 25):
    """transformers ``Trainer`` for a token-classification PRM (2 labels: wrong / right step).

    ``model`` is an ``AutoModelForTokenClassification`` with ``num_labels=2``; ``rows``
    come from :func:`prm_training_rows`. TRL 1.15 ships no PRM trainer, and none is
    needed: a PRM is a token classifier whose labels sit on the steps' last tokens.
    """
    from datasets import Dataset
    from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

    from .training import log_every
    data = Dataset.from_list([encode_steps(tokenizer, r["question"], r["completion"], r["labels"]) for r in rows])
    args = TrainingArguments(output_dir=str(output_dir), **profile.trainer_kwargs(
        max_steps=steps, per_device_train_batch_size=batch_size, learning_rate=learning_rate,
        lr_scheduler_type="cosine", warmup_steps=max(1, steps // 20), logging_steps=log_every(logging_steps, steps)))
    return Trainer(model=model, args=args, train_dataset=data,
                   data_collator=DataCollatorForTokenClassification(tokenizer))


@torch.no_grad()
def prm_step_scores(prm, tokenizer, questions: list[str], completions: list[str],
                    batch_size: int = 128) -> list[list[float]]:
    """P(step is right) for every step of every completion, from a 2-label token classifier."""
    if len(questions) != len(completions):
        raise ValueError(f"{len(questions)} questions but {len(completions)} completions")
    device = next(prm.parameters()).device
    out = []
    with eval_mode(prm):
        for start in range(0, len(questions), batch_size):
            encs = [encode_steps(tokenizer, q, c) for q, c in
                    zip(questions[start:start + batch_size], completions[start:start + batch_size])]
            width = max(len(e["input_ids"]) for e in encs)
            ids = torch.full((len(encs), width), tokenizer.pad_token_id)
            mask = torch.zeros((len(encs), width), dtype=torch.long)
            for i, e in enumerate(encs):
                ids[i, :len(e["input_ids"])] = torch.tensor(e["input_ids"])
                mask[i, :len(e["input_ids"])] = 1
            probs = prm(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float().softmax(-1)[..., 1]
            for i, e in enumerate(encs):
                ends = [t for t, label in enumerate(e["labels"]) if label != -100]
                out.append(probs[i, ends].cpu().tolist())
    return out


def _next_step(prefix: str, continuation: str) -> tuple[str, bool]:
    """Cut ``prefix + continuation`` at the end of the next step: (the text so far, finished).

    A kept prefix stops *before* its separator (``", "`` or ``</think>``), so the policy
    writes the separator itself and its tokens stay the ones it was trained on (a prompt
    ending in a bare space would not be). Once the think block is closed, the answer
    step runs to the end.
    """
    text, start = prefix + continuation, len(prefix)
    if text.startswith(", ", start):
        start += 2
    if THINK_CLOSE in text[:start + len(THINK_CLOSE)]:      # the think block is (being) closed: the answer step
        return text, True
    cuts = [i for i in (text.find(", ", start), text.find(THINK_CLOSE, start)) if i >= 0]
    if not cuts:                                              # ended (or ran out of tokens) without a boundary
        return text, True
    return text[:min(cuts)], False


@torch.no_grad()
def prm_beam_search(policy, prm, tokenizer, questions: list[str], beams: int = 2, expand: int = 2,
                    temperature: float = 0.8, max_step_tokens: int = 16, max_rounds: int = 4,
                    batch_size: int = 512) -> tuple[list[str], float]:
    """Step-level beam search: extend each kept partial answer by one step, keep the ``beams`` the PRM likes best.

    Round 1 samples ``beams * expand`` first steps per question; every later round
    samples ``expand`` continuations of each kept beam, cuts each at the end of its next
    step (:func:`_next_step`), scores the new step with the PRM (its probability that the
    answer so far is right) and keeps the ``beams`` best. Finished answers compete with
    unfinished ones and are not extended. Returns the best answer per question and the
    mean tokens generated per question (the search's compute).
    """
    frontier = [[("", False, 1.0)] for _ in questions]             # (text, finished, score) per question
    generated = 0
    for round_ in range(max_rounds):
        jobs = [(qi, text) for qi, row in enumerate(frontier) for text, done, _ in row if not done]
        if not jobs:
            break
        n = beams * expand if round_ == 0 else expand
        prompts = [chat_prompt(tokenizer, questions[qi]) + text for qi, text in jobs]
        out = sample_completions(policy, tokenizer, prompts, num_samples=n, temperature=temperature,
                                 max_new_tokens=max_step_tokens, batch_size=batch_size)
        generated += int(out.completion_mask.sum())
        candidates = [[(t, d, s) for t, d, s in row if d] for row in frontier]   # finished answers stay in
        cut = [_next_step(jobs[i // n][1], c) for i, c in enumerate(out.texts)]
        scores = prm_step_scores(prm, tokenizer, [questions[jobs[i // n][0]] for i in range(len(cut))],
                                 [text for text, _ in cut])
        for i, ((text, done), steps) in enumerate(zip(cut, scores)):
            candidates[jobs[i // n][0]].append((text, done, steps[-1] if steps else 0.0))
        frontier = [sorted(row, key=lambda c: -c[2])[:beams] for row in candidates]
    best = [max(row, key=lambda c: c[2])[0] for row in frontier]
    return best, generated / len(questions)


def aggregate_steps(step_scores: list[list[float]], how: str = "min") -> np.ndarray:
    """One score per answer from its step scores: the weakest step (``"min"``) or all of them (``"prod"``)."""
    if how not in ("min", "prod"):
        raise ValueError(f"how must be 'min' or 'prod', got {how!r}")
    agg = min if how == "min" else (lambda s: float(np.prod(s)))
    return np.array([agg(s) if s else 0.0 for s in step_scores])


# --------------------------------------------------------------------------- generative reward model
def grm_question(question: str, completion: str) -> str:
    """The judge's user message: the question and the answer to judge."""
    return f"Judge the answer.\n{question}\n{completion}"


GRM_STYLES = ("verdict", "critique", "principles")
"""What a judge writes before its verdict (:func:`grm_critique`): nothing, the check, or principles and their checks."""
GRM_MAX_NEW_TOKENS = {"verdict": 8, "critique": 18, "principles": 32}
"""Enough new tokens for each style's longest judgement (three-digit numbers) and the end of text."""


def grm_critique(completion: str, style: str = "critique") -> str:
    """The judgement a judge should write about ``completion``: what it checked, then a verdict, in the course's tags.

    DeepSeek-GRM writes principles, then a critique against them, then a score. Ours has two fixed principles (the
    tags are in order; the answer equals the working's result), and ``style`` says how much of that is written out:

    * ``"critique"`` (the notebook's judge): the check itself, ``<think>58 and 61</think>`` (the working's result and
      the answer, side by side) or ``<think>tags</think>`` when the tags are broken, then ``<answer>good</answer>`` or
      ``<answer>bad</answer>``;
    * ``"principles"``: each principle named before its check, ``<think>tags: ok; sum: 58 and 61</think>`` or
      ``<think>tags: broken</think>``, then the verdict;
    * ``"verdict"``: the verdict alone, ``<answer>bad</answer>``: nothing written before it.
    """
    if style not in GRM_STYLES:
        raise ValueError(f"unknown judgement style {style!r}: one of {GRM_STYLES}")
    if not is_well_formatted(completion):
        good, check = False, {"critique": "tags", "principles": "tags: broken"}.get(style)
    else:
        worked, answered = think_conclusion(completion), parse_int(extract_answer(completion))
        good = worked is not None and worked == answered
        check = {"critique": f"{worked} and {answered}",
                 "principles": f"tags: ok; sum: {worked} and {answered}"}.get(style)
    verdict = f"{ANSWER_OPEN}{'good' if good else 'bad'}{ANSWER_CLOSE}"
    return verdict if check is None else f"{THINK_OPEN}{check}{THINK_CLOSE}{verdict}"


def grm_rows(preference_rows: list[dict], style: str = "critique") -> list[dict]:
    """SFT chats that teach the judge: one per chosen and one per rejected answer (flat ``prompt/chosen/rejected``
    rows), the judgement written in ``style`` (:func:`grm_critique`)."""
    rows = []
    for r in preference_rows:
        for answer in (r["chosen"], r["rejected"]):
            rows.append({"messages": to_messages(grm_question(r["prompt"], answer)) +
                         [{"role": "assistant", "content": grm_critique(answer, style)}]})
    return rows


def parse_verdict(critique: str) -> float | None:
    """1.0 for a ``good`` verdict, 0.0 for ``bad``, None when the critique has no readable verdict."""
    verdict = extract_answer(critique or "")
    return {"good": 1.0, "bad": 0.0}.get((verdict or "").strip())


def grm_judgements(judge, tokenizer, questions: list[str], completions: list[str], k: int,
                   temperature: float = 1.0, max_new_tokens: int = 18, batch_size: int = 512) -> list[list[str]]:
    """``k`` sampled critiques per (question, answer): a ``len(questions) x k`` nested list of texts."""
    prompts = [chat_prompt(tokenizer, grm_question(q, c)) for q, c in zip(questions, completions)]
    out = sample_completions(judge, tokenizer, prompts, num_samples=k, temperature=temperature,
                             max_new_tokens=max_new_tokens, batch_size=batch_size)
    return [out.texts[i * k:(i + 1) * k] for i in range(len(prompts))]


def verdict_scores(critiques: list[list[str]], k: int, meta_scores=None, keep: int | None = None) -> np.ndarray:
    """Each answer's score: the mean verdict of its first ``k`` critiques (a vote).

    With ``meta_scores`` (same shape as ``critiques``) only the ``keep`` critiques the
    meta reward model trusts most vote. A critique without a verdict counts 0.5.
    """
    scores = []
    for i, row in enumerate(critiques):
        verdicts = [parse_verdict(c) for c in row[:k]]
        verdicts = [0.5 if v is None else v for v in verdicts]
        if meta_scores is not None and keep is not None:
            order = np.argsort(-np.asarray(meta_scores[i][:k], dtype=float), kind="stable")[:keep]
            verdicts = [verdicts[j] for j in order]
        scores.append(float(np.mean(verdicts)))
    return np.array(scores)


def verdict_rates(crit_chosen: list[list[str]], crit_rejected: list[list[str]]) -> dict[str, float]:
    """How usable single judgements are: the share with a readable verdict, and the share whose verdict is right
    (``good`` for a chosen answer, ``bad`` for a rejected one), over every critique of both lists."""
    verdicts = [(parse_verdict(c), want) for crits, want in ((crit_chosen, 1.0), (crit_rejected, 0.0))
                for row in crits for c in row]
    if not verdicts:
        raise ValueError("no critiques to rate")
    return {"readable_rate": float(np.mean([v is not None for v, _ in verdicts])),
            "right_verdict_rate": float(np.mean([v == want for v, want in verdicts]))}


def judgement_curve(crit_chosen: list[list[str]], crit_rejected: list[list[str]], ks, meta_chosen=None,
                    meta_rejected=None, keep: int | None = None) -> dict[int, float]:
    """Pair accuracy of the vote over each answer's first ``k`` critiques, for each ``k`` in ``ks``
    (:func:`verdict_scores`, :func:`pair_judgement_accuracy`); with the meta RM's scores, only its best
    ``min(k, keep)`` critiques vote."""
    def scores(crits, meta, k):
        return verdict_scores(crits, k, meta, None if meta is None else min(k, keep))
    return {k: pair_judgement_accuracy(scores(crit_chosen, meta_chosen, k), scores(crit_rejected, meta_rejected, k))
            for k in ks}


def meta_rm_scores(meta, tokenizer, questions: list[str], completions: list[str], critiques: list[list[str]],
                   batch_size: int = 256) -> np.ndarray:
    """The meta reward model's score of every critique: a ``len(questions) x k`` array.

    Critique ``critiques[i][j]`` is scored as the answer to the judge's prompt for ``(questions[i], completions[i])``
    (:func:`grm_question`), the chat the judge wrote it for; :func:`verdict_scores` then lets the best ones vote.
    """
    if not len(questions) == len(completions) == len(critiques):
        raise ValueError(f"{len(questions)} questions, {len(completions)} answers, {len(critiques)} rows of critiques")
    k = len(critiques[0]) if critiques else 0
    if any(len(row) != k for row in critiques):
        raise ValueError("every answer needs the same number of critiques")
    flat_q = [grm_question(q, c) for q, c in zip(questions, completions) for _ in range(k)]
    flat_c = [crit for row in critiques for crit in row]
    return score_completions(meta, tokenizer, flat_q, flat_c, batch_size=batch_size).numpy().reshape(len(questions), k)


def pair_judgement_accuracy(chosen_scores, rejected_scores) -> float:
    """Share of pairs the judge orders right; a tie counts one half (a coin flip would break it)."""
    c, r = np.asarray(chosen_scores, dtype=float), np.asarray(rejected_scores, dtype=float)
    return float(np.mean((c > r) + 0.5 * (c == r)))


def wrong_critique(completion: str, rng: random.Random) -> str:
    """A critique of ``completion`` that gets it wrong: flipped verdict, or a misreported number."""
    right = grm_critique(completion)
    verdict = extract_answer(right)
    flipped = {"good": "bad", "bad": "good"}[verdict]
    numbers = re.findall(r"\d+", extract_think(right) or "")
    if numbers and rng.random() < 0.5:   # misreport one number, keep the verdict
        fake = str(rng.choice([n for n in range(20, 199) if str(n) not in numbers]))
        think = extract_think(right).replace(rng.choice(numbers), fake, 1)
        return f"{THINK_OPEN}{think}{THINK_CLOSE}{ANSWER_OPEN}{verdict}{ANSWER_CLOSE}"
    return right.replace(f"{ANSWER_OPEN}{verdict}", f"{ANSWER_OPEN}{flipped}")


def meta_rm_rows(preference_rows: list[dict], seed: int) -> list[dict]:
    """(right critique, wrong critique) pairs for a meta reward model, in TRL's preference format.

    The prompt is the judge's question about one answer; chosen is the critique of
    :func:`grm_critique`, rejected a wrong one (:func:`wrong_critique`).
    """
    rng, rows = random.Random(seed), []
    for r in preference_rows:
        answer = r["chosen"] if rng.random() < 0.5 else r["rejected"]
        rows.append({"prompt": to_messages(grm_question(r["prompt"], answer)),
                     "chosen": [{"role": "assistant", "content": grm_critique(answer)}],
                     "rejected": [{"role": "assistant", "content": wrong_critique(answer, rng)}]})
    return rows
