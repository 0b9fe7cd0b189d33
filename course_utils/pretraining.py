"""Notebook 01's probe of a base model: is the tagged answer format already in it?

The corpus holds a few worked additions marked up with tags, as some web pages mark up their solutions
(``<think>…</think><answer>…</answer>``). A pretrained model has never seen the chat markup, but a prompt that
*opens* the think block the way those pages did, ``question <think>``, may be continued in the tagged format. That
is what lets RL start straight from a base model (R1-Zero, notebook 08): every reward is zero unless the format
appears sometimes. :func:`tagged_prompt_probe` measures how often it does.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import generation, rewards

THINK, END_ANSWER = "<think>", "</answer>"


def cut_at_answer(continuation: str) -> str:
    """The completion a stop string at ``</answer>`` would leave: ``<think>`` (the prompt's last tag) plus the
    continuation up to and including its first ``</answer>``; the whole continuation if it has none."""
    end = continuation.find(END_ANSWER)
    return THINK + (continuation if end < 0 else continuation[:end + len(END_ANSWER)])


@dataclass(frozen=True)
class TaggedProbe:
    """How a model continues ``question <think>`` prompts: ``format_rate`` and ``accuracy`` are fractions of the
    ``n`` samples in the strict format (:func:`rewards.is_well_formatted`) and with the right answer
    (:func:`rewards.is_correct`); ``texts`` are the samples, cut by :func:`cut_at_answer`, ``num_samples`` per
    problem in the problems' order."""

    format_rate: float
    accuracy: float
    n: int
    texts: tuple[str, ...]


def tagged_prompt_probe(model, tokenizer, problems: list[dict], *, num_samples: int, temperature: float,
                        max_new_tokens: int) -> TaggedProbe:
    """Sample ``num_samples`` continuations of ``question + " <think>"`` for each problem (a dict with
    ``question`` and ``answer``, as ``data.load_jsonl("arithmetic", ...)`` gives), cut each at its first
    ``</answer>`` and score format and answer."""
    prompts = [p["question"] + " " + THINK for p in problems]
    sampled = generation.sample_completions(model, tokenizer, prompts, num_samples=num_samples,
                                            temperature=temperature, max_new_tokens=max_new_tokens)
    texts = [cut_at_answer(t) for t in sampled.texts]
    answers = [problems[i // num_samples]["answer"] for i in range(len(texts))]
    return TaggedProbe(format_rate=sum(map(rewards.is_well_formatted, texts)) / len(texts),
                       accuracy=sum(rewards.is_correct(t, a) for t, a in zip(texts, answers)) / len(texts),
                       n=len(texts), texts=tuple(texts))
