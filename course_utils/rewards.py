"""Verifiable rewards for the course's ``<think>…</think><answer>…</answer>`` format.

Every function here accepts *any* model output (str, None, a TRL chat message
list, bytes, numbers…) and never raises; parsing uses ``str.find`` rather than
regular expressions, so there is no catastrophic backtracking and the cost is
linear in the text length.

Reward functions follow TRL's signature ``f(completions, **kwargs) -> list[float]``
so they plug into ``GRPOTrainer(reward_funcs=[...])`` unchanged.
"""
from __future__ import annotations

from typing import Any

from .data import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN

MAX_ANSWER_CHARS = 32  # a longer "answer" is not a number we would accept


def completion_text(completion: Any) -> str:
    """Plain text of a completion in any of the shapes TRL hands reward functions.

    A string is returned as is; a chat list ``[{"role": "assistant", "content": ...}]``
    gives its last message's content; anything else becomes ``""`` or ``str(x)``.
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, bytes):
        return completion.decode("utf-8", errors="replace")
    if isinstance(completion, dict):
        return completion_text(completion.get("content", ""))
    if isinstance(completion, (list, tuple)):
        return completion_text(completion[-1]) if completion else ""
    try:
        return str(completion)
    except Exception:  # a hostile __str__ must not crash training
        return ""


def _between(text: str, open_tag: str, close_tag: str) -> str | None:
    start = text.find(open_tag)
    if start < 0:
        return None
    start += len(open_tag)
    end = text.find(close_tag, start)
    return None if end < 0 else text[start:end]


def extract_answer(completion: Any) -> str | None:
    """The stripped text inside the first ``<answer>…</answer>``, or None."""
    inner = _between(completion_text(completion), ANSWER_OPEN, ANSWER_CLOSE)
    if inner is None:
        return None
    inner = inner.strip()
    return inner if inner and len(inner) <= MAX_ANSWER_CHARS else None


def extract_think(completion: Any) -> str | None:
    """The text inside the first ``<think>…</think>``, or None."""
    return _between(completion_text(completion), THINK_OPEN, THINK_CLOSE)


def is_well_formatted(completion: Any) -> bool:
    """True for exactly ``<think>X</think><answer>Y</answer>`` (outer spaces allowed).

    One of each tag, think before answer, nothing between or after them.
    """
    text = completion_text(completion).strip()
    tags = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)
    if any(text.count(t) != 1 for t in tags):
        return False
    if not text.startswith(THINK_OPEN) or not text.endswith(ANSWER_CLOSE):
        return False
    think_end = text.find(THINK_CLOSE)
    return text.find(ANSWER_OPEN) == think_end + len(THINK_CLOSE) and extract_answer(text) is not None


def parse_int(text: str | None) -> int | None:
    """An integer written plainly (optional sign, digits, commas), else None."""
    if text is None:
        return None
    s = text.strip().replace(",", "")
    body = s[1:] if s[:1] in "+-" else s
    if not body or len(body) > 18 or not body.isascii() or not body.isdigit():
        return None
    return int(s)


def is_correct(completion: Any, answer: Any) -> bool:
    """Whether the completion's ``<answer>`` equals the reference ``answer`` as a number."""
    got = parse_int(extract_answer(completion))
    want = parse_int(completion_text(answer)) if not isinstance(answer, int) else answer
    return got is not None and want is not None and got == want


def accuracy_reward(completions: list, answer: list | None = None, **kwargs) -> list[float]:
    """1.0 where the ``<answer>`` is the right number, else 0.0 (TRL reward signature).

    ``answer`` (the data set's column of reference answers) is required: without it
    every completion would score 0 and training would silently optimise nothing, which
    is what happens when a trainer drops the column (TRL's ``remove_unused_columns=True``).
    """
    if answer is None:
        raise ValueError("accuracy_reward needs the reference answers (keyword `answer`): the data set must have "
                         "an 'answer' column and the trainer must keep it (GRPOConfig(remove_unused_columns=False))")
    if len(answer) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(answer)} answers")
    return [1.0 if is_correct(c, a) else 0.0 for c, a in zip(completions, answer)]


def format_reward(completions: list, **kwargs) -> list[float]:
    """1.0 for a well formatted ``<think>…</think><answer>…</answer>``, else 0.0."""
    return [1.0 if is_well_formatted(c) else 0.0 for c in completions]
