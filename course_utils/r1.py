"""The DeepSeek-R1 recipe (notebook 08): R1-Zero's prompts and the data each later stage is made of.

TRL's ``GRPOTrainer`` and ``SFTTrainer`` do the training (built in
:mod:`course_utils.training`); this module holds what the trainers do not:

* :data:`R1_ZERO_SYSTEM` and :func:`zero_prompt` — R1-Zero's template, and the corpus-style
  prompt the tiny base model can follow; both end inside the think block;
* :func:`zero_rows` / :func:`zero_evaluate` — GRPO rows and held-out measurements for a
  policy prompted that way (plain text, no chat template: a base model has none);
* :func:`rejection_sample` — sample several answers per problem, keep the verified ones,
  break ties with a reward model: the cold-start set (from R1-Zero) and the second SFT's
  reasoning data (from the reasoning-RL model) are both made by it;
* :func:`evaluate_stage` / :func:`add_stage` — one stage on the held-out problems, prompted
  either way (chat template or R1-Zero's plain prompt), with the two figures only 08 needs:
  the step language of the answers and the everyday loss; :data:`STAGE_COLUMNS` tabulates them.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from . import experiment
from .data import THINK_OPEN, to_messages
from .chat import chat_prompt
from .evaluation import everyday_loss, failure_breakdown, heldout_problems, score_completions
from .generation import generate, sample_completions
from .rewards import extract_think, is_correct, is_well_formatted, step_language_reward, step_language_share

# The template of the DeepSeek-R1 paper (its Table 1), with the user's question and the
# opening think tag appended by :func:`zero_prompt`.
R1_ZERO_SYSTEM = ("A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
                  "The assistant first thinks about the reasoning process in the mind and then provides the user "
                  "with the answer. The reasoning process and answer are enclosed within <think> </think> and "
                  "<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> "
                  "<answer> answer here </answer>.")
# The same request in one sentence, short enough for the tiny model's 64-token pretraining blocks (the paper's
# text is 229 tokens there: with an answer it runs past the 256 positions the model has).
INSTRUCTION = "Think inside <think> </think>, then answer inside <answer> </answer>."
ZERO_TEMPLATES = ("r1", "instruction", "corpus")


def zero_prompt(question: str, template: str = "corpus") -> str:
    """A plain-text R1-Zero prompt that ends inside the think block.

    ``"r1"``: the paper's system text, ``User: <question> Assistant: <think>`` (the paper
    stops at ``Assistant:`` and lets the model open the think block; open reproductions
    prefill it, as here). ``"instruction"``: the same with a one-sentence system text.
    ``"corpus"``: ``<question> <think>``, the way the course's corpus writes its tagged
    worked problems (:func:`data.tagged_solution`), which is all the tiny base has read.
    """
    if template == "r1":
        return f"{R1_ZERO_SYSTEM} User: {question} Assistant: {THINK_OPEN}"
    if template == "instruction":
        return f"{INSTRUCTION} User: {question} Assistant: {THINK_OPEN}"
    if template == "corpus":
        return f"{question} {THINK_OPEN}"
    raise ValueError(f"unknown template {template!r}; choose one of {ZERO_TEMPLATES}")


def zero_rows(problems: list[dict], template: str = "corpus") -> list[dict]:
    """``{"prompt", "answer"}`` rows for ``GRPOTrainer`` with plain-text (non-chat) prompts.

    The completions start inside the think block, so the reward functions must score
    ``"<think>" + completion`` (:func:`rewards.with_prefix`).
    """
    return [{"prompt": zero_prompt(p["question"], template), "answer": str(p["answer"])} for p in problems]


def zero_evaluate(model, tokenizer, problems: list[dict], template: str = "corpus", num_samples: int = 0,
                  temperature: float = 1.0, max_new_tokens: int = 48) -> dict:
    """Held-out measurements of a policy prompted with :func:`zero_prompt`.

    Greedy when ``num_samples`` is 0, else ``num_samples`` samples per problem at
    ``temperature``. Returns ``{"accuracy", "format_rate", "step_language", "texts"}``:
    fractions over all answers, ``step_language`` the mean
    :func:`rewards.step_language_share`; ``texts`` include the opening think tag.
    """
    prompts = [zero_prompt(p["question"], template) for p in problems]
    if num_samples:
        raw = sample_completions(model, tokenizer, prompts, num_samples=num_samples, temperature=temperature,
                                 max_new_tokens=max_new_tokens, batch_size=256).texts
    else:
        raw, num_samples = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens), 1
    texts = [THINK_OPEN + t for t in raw]
    answers = [p["answer"] for p in problems for _ in range(num_samples)]
    n = len(texts)
    return {"accuracy": sum(is_correct(t, a) for t, a in zip(texts, answers)) / n,
            "format_rate": sum(map(is_well_formatted, texts)) / n,
            "step_language": sum(map(step_language_share, texts)) / n, "texts": texts}


@torch.no_grad()
def rejection_sample(model, tokenizer, problems: list[dict], num_samples: int = 4, temperature: float = 0.8,
                     template: str | None = None, require_steps: bool = True, reward_model=None,
                     rm_tokenizer=None, max_new_tokens: int = 48, batch_size: int = 256) -> tuple[list[dict], dict]:
    """Verified SFT rows from the model's own answers: at most one per problem.

    For each problem sample ``num_samples`` answers and keep those that are right
    (:func:`rewards.is_correct`), well formatted, and — with ``require_steps`` — written
    wholly in steps (:func:`rewards.step_language_share` = 1: the readability filter
    DeepSeek applied by hand). Among the kept answers of a problem, the reward model
    (if given) picks the one it scores highest; otherwise the first is taken.

    ``template`` None samples with the chat template (a chat model); ``"corpus"`` or
    ``"r1"`` with :func:`zero_prompt` (R1-Zero), whose answers get their opening tag back.
    Returns ``(rows, stats)``: ``{"messages"}`` chat rows (question, kept answer), and
    ``{"problems", "samples", "sample_accuracy", "kept", "several_kept", "with_choice", "rm_changed",
    "wrong_steps"}``: ``several_kept`` counts problems with two or more kept answers,
    ``with_choice`` those among them whose kept answers differ, ``rm_changed`` those where the
    reward model picked another answer than the first, and ``wrong_steps`` the kept rows whose
    think block is not the true working of the problem's reference ``completion`` (if it has one):
    verified means the *answer* is right, not the reasoning.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}")
    if (reward_model is None) != (rm_tokenizer is None):
        raise ValueError("pass reward_model and rm_tokenizer together")
    if template is None:
        prompts, prefix = [chat_prompt(tokenizer, p["question"]) for p in problems], ""
    else:
        prompts, prefix = [zero_prompt(p["question"], template) for p in problems], THINK_OPEN
    out = sample_completions(model, tokenizer, prompts, num_samples=num_samples, temperature=temperature,
                             max_new_tokens=max_new_tokens, batch_size=batch_size)
    texts = [prefix + t for t in out.texts]
    scores = None
    if reward_model is not None:
        questions = [p["question"] for p in problems for _ in range(num_samples)]
        scores = score_completions(reward_model, rm_tokenizer, questions, texts).tolist()
    rows, n_right, several, with_choice, rm_changed, wrong_steps = [], 0, 0, 0, 0, 0
    for i, problem in enumerate(problems):
        idx = range(i * num_samples, (i + 1) * num_samples)
        right = [j for j in idx if is_correct(texts[j], problem["answer"])]
        n_right += len(right)
        kept = [j for j in right if is_well_formatted(texts[j])
                and (not require_steps or step_language_share(texts[j]) == 1.0)]
        if not kept:
            continue
        best = kept[0] if scores is None else max(kept, key=lambda j: scores[j])
        several += len(kept) > 1
        with_choice += len({texts[j] for j in kept}) > 1
        rm_changed += texts[best] != texts[kept[0]]
        if "completion" in problem:   # the data set's reference answer: its think block is the true working
            wrong_steps += extract_think(texts[best]) != extract_think(problem["completion"])
        rows.append({"messages": to_messages(problem["question"], texts[best])})
    n = len(problems)
    stats = {"problems": n, "samples": n * num_samples, "sample_accuracy": n_right / max(n * num_samples, 1),
             "kept": len(rows), "several_kept": several, "with_choice": with_choice, "rm_changed": rm_changed,
             "wrong_steps": wrong_steps}
    return rows, stats


# the columns of 08's stage tables: ``runs.show(r1.STAGE_COLUMNS, names)``
STAGE_COLUMNS = {"accuracy": "greedy accuracy", "pass_at_1": "pass@1", "format_rate": "format",
                 "mean_tokens": "length (tokens)", "step_language": "step language", "everyday_loss": "everyday loss",
                 "seconds": "seconds"}


def evaluate_stage(model, tokenizer, profile, template: str | None = None) -> tuple[experiment.Eval, dict]:
    """One stage of the pipeline on ``profile.eval_size`` held-out problems with ``profile.max_new_tokens`` new tokens.

    ``template`` None: the chat template, measured by :func:`experiment.evaluate` (``k=1``: one sample per
    problem at temperature 1 for pass@1). ``"corpus"`` (or another of :data:`ZERO_TEMPLATES`): R1-Zero's plain
    prompt (:func:`zero_prompt`), for the base model and R1-Zero, which have no chat template; their answers are
    scored, and their length counted, with the opening think tag the prompt ends in.

    Returns ``(ev, figures)``: the :class:`experiment.Eval` (greedy accuracy and format, pass@1, mean length in
    tokens of the greedy answers) and ``{"step_language", "everyday_loss"}``: the mean
    :func:`rewards.step_language_share` of the greedy answers and :func:`evaluation.everyday_loss` (the
    non-reasoning skill). Log them with ``runs.add(name, ev, **figures)`` (:func:`add_stage` does).
    """
    if template is None:
        ev = experiment.evaluate(model, tokenizer, profile, k=1, keep_samples=True)
        texts = [s["completion"] for s in ev.samples]
    else:
        problems = heldout_problems("test", profile.eval_size)
        greedy = zero_evaluate(model, tokenizer, problems, template, max_new_tokens=profile.max_new_tokens)
        sampled = zero_evaluate(model, tokenizer, problems, template, num_samples=1,
                                max_new_tokens=profile.max_new_tokens)
        texts, answers = greedy["texts"], [p["answer"] for p in problems]
        correct = [is_correct(t, a) for t, a in zip(texts, answers)]
        n, accuracy = len(problems), greedy["accuracy"]
        lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
        ev = experiment.Eval(accuracy=accuracy, format_rate=greedy["format_rate"], n=n,
                             stderr=math.sqrt(max(accuracy * (1 - accuracy), 1e-12) / n),
                             failures=failure_breakdown(texts, answers), mean_tokens=sum(lengths) / n,
                             pass_at_1=sampled["accuracy"], pass_at_k=sampled["accuracy"], k=1, temperature=1.0,
                             correct=tuple(correct),
                             samples=tuple({"question": p["question"], "completion": t, "answer": p["answer"],
                                            "correct": ok} for p, t, ok in zip(problems, texts, correct)))
    figures = {"step_language": float(np.mean(step_language_reward(texts))),
               "everyday_loss": everyday_loss(model, tokenizer)}
    return ev, figures


def add_stage(runs: experiment.Runs, name: str, model, tokenizer, profile, template: str | None = None) -> dict:
    """Measure one stage (:func:`evaluate_stage`) and log it in ``runs`` under ``name`` (its line is printed, its
    seconds are those of ``runs.timed(name)`` if that timed it); returns its row."""
    ev, figures = evaluate_stage(model, tokenizer, profile, template)
    return runs.add(name, ev, **figures)
