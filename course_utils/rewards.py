"""Verifiable rewards in TRL's protocol, for the course's ``<think>…</think><answer>…</answer>`` format.

Every reward function takes ``completions`` (strings, or TRL chat lists
``[{"role": "assistant", "content": ...}]``) plus data-set columns as keyword
arguments, and returns one float per completion, so it plugs into
``GRPOTrainer(reward_funcs=[...])`` unchanged.

Two promises:

* **Never raise on model output, never hang.** Any completion (str, None, bytes,
  numbers, a chat list, 100k characters of garbage) gets a finite float. Parsing
  uses ``str.find``/``str.count`` and anchored regular expressions on at most
  :data:`MAX_ANSWER_CHARS` characters, so the cost is linear in the text length;
  numbers are exact ``Fraction``s with a bounded exponent, so ``1e999999999``
  cannot allocate a huge integer and ``nan``/``inf`` are simply not numbers.
* **A missing required column is a programming error** and raises ``ValueError``
  at once. (TRL passes data-set columns to reward functions only when
  ``GRPOConfig(remove_unused_columns=False)``; otherwise an accuracy reward that
  defaulted to 0 would silently train on format alone.)

Tags are configurable with :class:`Tags`: :data:`COURSE_TAGS` is the course's own,
:data:`SEED_TAGS` the ``<start_working_out>…<end_working_out><SOLUTION>…</SOLUTION>``
style of the capstone; :func:`with_tags` makes a TRL-ready reward for other tags.
"""
from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from .data import ANSWER_CLOSE, ANSWER_OPEN, THINK_CLOSE, THINK_OPEN

MAX_ANSWER_CHARS = 32    # a longer "answer" is not a number we would accept
MAX_EXPONENT = 100       # 1e100 is parsed exactly; 1e101 is not a number here (no giant integers)


@dataclass(frozen=True)
class Tags:
    """The four tags of a reasoning format: think block, then answer block."""

    think_open: str = THINK_OPEN
    think_close: str = THINK_CLOSE
    answer_open: str = ANSWER_OPEN
    answer_close: str = ANSWER_CLOSE

    def all(self) -> tuple[str, str, str, str]:
        return self.think_open, self.think_close, self.answer_open, self.answer_close


COURSE_TAGS = Tags()
SEED_TAGS = Tags("<start_working_out>", "<end_working_out>", "<SOLUTION>", "</SOLUTION>")


# --------------------------------------------------------------------------- reading a completion
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


def raw_answer(completion: Any, tags: Tags = COURSE_TAGS) -> str | None:
    """The text inside the first answer block exactly as written (not stripped), or None."""
    return _between(completion_text(completion), tags.answer_open, tags.answer_close)


def extract_answer(completion: Any, tags: Tags = COURSE_TAGS) -> str | None:
    """The stripped text inside the first answer block, or None (also when empty or absurdly long)."""
    inner = raw_answer(completion, tags)
    if inner is None:
        return None
    inner = inner.strip()
    return inner if inner and len(inner) <= MAX_ANSWER_CHARS else None


def extract_think(completion: Any, tags: Tags = COURSE_TAGS) -> str | None:
    """The text inside the first think block, or None."""
    return _between(completion_text(completion), tags.think_open, tags.think_close)


def chain_of_thought(completion: Any, tags: Tags = COURSE_TAGS) -> str:
    """The reasoning of a completion, tags removed: the think block's text.

    An unclosed think block runs to the answer tag (or the end); a completion with no think
    tag has its reasoning outside the answer block, so that text is returned.
    """
    text = completion_text(completion)
    start = text.find(tags.think_open)
    if start >= 0:
        start += len(tags.think_open)
        end = text.find(tags.think_close, start)
        if end < 0:
            end = text.find(tags.answer_open, start)
        text = text[start:] if end < 0 else text[start:end]
    else:
        answer = _between(text, tags.answer_open, tags.answer_close)
        if answer is not None:
            text = text.replace(tags.answer_open + answer + tags.answer_close, " ", 1)
    for tag in tags.all():
        text = text.replace(tag, " ")
    return text


def is_well_formatted(completion: Any, tags: Tags = COURSE_TAGS) -> bool:
    """True for exactly ``<think>X</think><answer>Y</answer>`` (outer spaces allowed).

    One of each tag, think before answer, nothing between or after them.
    """
    text = completion_text(completion).strip()
    if any(text.count(t) != 1 for t in tags.all()):
        return False
    if not text.startswith(tags.think_open) or not text.endswith(tags.answer_close):
        return False
    think_end = text.find(tags.think_close)
    return (text.find(tags.answer_open) == think_end + len(tags.think_close)
            and extract_answer(text, tags) is not None)


# --------------------------------------------------------------------------- reading a number
def parse_int(text: str | None) -> int | None:
    """An integer written plainly (optional sign, ASCII digits, commas), else None."""
    if text is None:
        return None
    s = text.strip().replace(",", "")
    body = s[1:] if s[:1] in "+-" else s
    if not body or len(body) > 18 or not body.isascii() or not body.isdigit():
        return None
    return int(s)


_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d{1,4})?")
_GROUPED = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")          # 1,234,567.5: thousands separators
_BOXED = re.compile(r"\\boxed\{(.*)\}")
_FRAC = re.compile(r"\\d?frac\{([^{}]*)\}\{([^{}]*)\}")
_MINUS = {"\u2212": "-", "\u2012": "-", "\u2013": "-", "\ufe63": "-", "\uff0d": "-"}


def _ascii_digits(text: str) -> str:
    """Full-width and other Unicode decimal digits (Arabic-Indic, Devanagari, …) to ASCII."""
    text = unicodedata.normalize("NFKC", text)            # full-width ０-９ and ，→ ASCII
    out = []
    for ch in text:
        if ch in _MINUS:
            out.append(_MINUS[ch])
        elif not ch.isascii() and unicodedata.category(ch) == "Nd":
            out.append(str(unicodedata.digit(ch)))
        elif ch == "\u066c":                               # Arabic thousands separator
            out.append(",")
        elif ch == "\u066b":                               # Arabic decimal separator
            out.append(".")
        else:
            out.append(ch)
    return "".join(out)


def _plain_number(s: str) -> Fraction | None:
    if _GROUPED.fullmatch(s):
        s = s.replace(",", "")
    m = _DECIMAL.fullmatch(s)
    if m is None:
        return None
    if m.group(2) and abs(int(m.group(2)[1:])) > MAX_EXPONENT:
        return None
    return Fraction(s)


def parse_number(text: Any) -> Fraction | None:
    """The exact value of a number written in one of the usual ways, else None.

    Integers, decimals, ``3/4``, ``\\frac{3}{4}``, ``\\boxed{…}``, ``$…$``, thousands
    separators (``1,024``, ``1{,}024``), scientific notation up to ``1e100``, and
    full-width or Arabic-Indic digits. ``nan``, ``inf`` and anything longer than
    :data:`MAX_ANSWER_CHARS` characters is not a number. Never ``eval``; never raises.
    """
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, int):
        return Fraction(text)
    s = completion_text(text)
    if not s or len(s) > 4 * MAX_ANSWER_CHARS:
        return None
    s = _ascii_digits(s).strip().strip("$").strip()
    for _ in range(2):                                      # \boxed{\frac{1}{2}}: peel at most twice
        m = _BOXED.fullmatch(s)
        if m:
            s = m.group(1).strip()
    s = s.replace("{,}", ",").replace("\\!", "")
    m = _FRAC.fullmatch(s)
    if m:
        s = f"{m.group(1)}/{m.group(2)}"
    if len(s) > MAX_ANSWER_CHARS:
        return None
    if s.count("/") == 1:
        num, den = (_plain_number(part) for part in s.split("/"))
        return None if num is None or not den else num / den
    return _plain_number(s)


def answers_equal(got: Any, want: Any) -> bool:
    """Whether two answers are the same number (``0.5`` = ``1/2``); non-numbers compare as stripped text."""
    g, w = parse_number(got), parse_number(want)
    if w is None:
        return g is None and got is not None and completion_text(got).strip() == completion_text(want).strip() != ""
    return g is not None and g == w


def is_correct(completion: Any, answer: Any, tags: Tags = COURSE_TAGS) -> bool:
    """Whether the completion's answer block holds the reference ``answer`` (mathematically equal)."""
    got = extract_answer(completion, tags)
    return got is not None and answers_equal(got, answer)


# --------------------------------------------------------------------------- reward functions (TRL protocol)
def _required(name: str, column: Any, completions: list, fn: str) -> list:
    if column is None:
        raise ValueError(f"{fn} needs the column `{name}`: the data set must have a column named '{name}' and the "
                         f"trainer must pass it (GRPOConfig(remove_unused_columns=False))")
    if len(column) != len(completions):
        raise ValueError(f"{fn}: {len(completions)} completions but {len(column)} values of `{name}`")
    return list(column)


def accuracy_reward(completions: list, answer: list | None = None, tags: Tags = COURSE_TAGS,
                    **kwargs) -> list[float]:
    """1.0 where the answer block equals the reference mathematically, else 0.0.

    The answer is the stripped text of the *first* block between ``tags.answer_open`` and ``tags.answer_close``
    (none, empty or longer than ``MAX_ANSWER_CHARS``: 0.0), compared by value (``answers_equal``: ``0.5`` = ``1/2``,
    ``1,024`` = ``1024``). A completion may be a string or a chat list (``completion_text``); nothing a model writes
    makes it raise. ``answer`` (the data set's column of reference answers, one per completion) is required: without
    it every completion would score 0 and training would silently optimise nothing, which is what happens when a
    trainer drops the column (TRL's ``remove_unused_columns=True``); a missing or mismatched column raises ValueError.
    """
    answer = _required("answer", answer, completions, "accuracy_reward")
    return [1.0 if is_correct(c, a, tags) else 0.0 for c, a in zip(completions, answer)]


def format_reward(completions: list, tags: Tags = COURSE_TAGS, **kwargs) -> list[float]:
    """1.0 for exactly a think block followed by an answer block (outer whitespace allowed), else 0.0."""
    return [1.0 if is_well_formatted(c, tags) else 0.0 for c in completions]


def tag_count_reward(completions: list, tags: Tags = COURSE_TAGS, count_think_open: bool = True,
                     present: float = 0.5, absent: float = -1.0, **kwargs) -> list[float]:
    """Partial credit for the format: ``present`` per tag that occurs exactly once, ``absent`` per other tag.

    The seed's "approximate format" reward. It gives a signal before any completion
    is perfectly formatted (a format reward of 0 everywhere has zero-variance groups
    and no gradient). ``count_think_open=False`` leaves out the opening think tag
    when the chat template already writes it into the prompt.
    """
    counted = tags.all() if count_think_open else tags.all()[1:]
    scores = []
    for c in completions:
        text = completion_text(c)
        scores.append(sum(present if text.count(t) == 1 else absent for t in counted))
    return scores


TIERS = {"exact": 5.0, "equal": 3.5, "within_10pct": 2.0, "within_20pct": 1.5, "wrong": -2.5,
         "unparseable": -4.5, "missing": -4.5}
"""Scores of :func:`tiered_answer_reward`, best first."""


def answer_tier(completion: Any, answer: Any, tags: Tags = COURSE_TAGS) -> str:
    """Which of :data:`TIERS` a completion falls in for the reference ``answer``."""
    raw = raw_answer(completion, tags)
    if raw is None or not raw.strip():
        return "missing"
    want = completion_text(answer)
    if raw == want:
        return "exact"
    if raw.strip() == want.strip() or answers_equal(raw.strip(), want):
        return "equal"
    g, w = parse_number(raw.strip()), parse_number(want)
    if g is None:
        return "unparseable"
    if w is None or w == 0:        # no relative closeness to a non-number or to 0 (the seed divides by it)
        return "wrong"
    err = abs(g - w) / abs(w)
    if err <= Fraction(1, 10):
        return "within_10pct"
    if err <= Fraction(1, 5):
        return "within_20pct"
    return "wrong"


def tiered_answer_reward(completions: list, answer: list | None = None, tags: Tags = COURSE_TAGS,
                         **kwargs) -> list[float]:
    """The seed's graded answer check: exact > equal after stripping (or as a number) > within 10% >
    within 20% > wrong > unparseable = missing (scores in :data:`TIERS`).

    Unlike the seed, no answer scores below a wrong one (the seed gave -2.0 for a
    missing answer and -2.5 for a wrong one, which pays the model to say nothing),
    and a reference of 0 is safe (the seed divides by the reference).
    """
    answer = _required("answer", answer, completions, "tiered_answer_reward")
    return [TIERS[answer_tier(c, a, tags)] for c, a in zip(completions, answer)]


def _script(ch: str) -> str | None:
    """The script of a letter (``LATIN``, ``CJK``, ``ARABIC``, …), None for digits, punctuation, spaces."""
    if not ch.isalpha():
        return None
    if ch.isascii():
        return "LATIN"
    try:
        name = unicodedata.name(ch)
    except ValueError:
        return "UNKNOWN"
    first = name.split(" ", 1)[0]
    if first in ("HIRAGANA", "KATAKANA"):
        return "CJK"      # written together with Han characters
    return first


def dominant_script(text: Any) -> str | None:
    """The script most letters of ``text`` are written in, or None when it has no letters."""
    counts: dict[str, int] = {}
    for ch in unicodedata.normalize("NFKC", completion_text(text)):
        s = _script(ch)
        if s:
            counts[s] = counts.get(s, 0) + 1
    return max(counts, key=counts.get) if counts else None


def script_share(text: Any, script: str) -> float:
    """The share of the letters of ``text`` written in ``script`` (1.0 when it has no letters)."""
    total = same = 0
    for ch in unicodedata.normalize("NFKC", completion_text(text)):
        s = _script(ch)
        if s:
            total += 1
            same += s == script
    return same / total if total else 1.0


def language_consistency_reward(completions: list, prompts: list | None = None, target_script: str | None = None,
                                tags: Tags = COURSE_TAGS, **kwargs) -> list[float]:
    """The share of the letters of each completion's chain of thought written in its prompt's script (DeepSeek-R1's reward).

    R1 added it because reasoning RL mixed languages in the chain of thought, and scored the
    chain of thought only (:func:`chain_of_thought`: the think block; the answer is not
    counted). Here a "language" is a Unicode script (Latin, CJK, Arabic, …): a cheap proxy
    that needs no word lists. The format's tags are left out (their letters are not the
    model's language), digits and punctuation are neutral, and a chain of thought with no
    letters scores 1.0. ``target_script`` (e.g. ``"LATIN"``) overrides the prompt's script;
    otherwise ``prompts`` (TRL always passes them) is required.
    """
    if target_script is None:
        prompts = _required("prompts", prompts, completions, "language_consistency_reward")
        targets = [dominant_script(p) for p in prompts]
    else:
        targets = [target_script] * len(completions)
    scores = []
    for c, t in zip(completions, targets):
        scores.append(1.0 if t is None else script_share(chain_of_thought(c, tags), t))
    return scores


def with_tags(reward_func: Callable, tags: Tags) -> Callable:
    """``reward_func`` bound to other tags, keeping its ``__name__`` (TRL logs rewards by it)."""
    bound = functools.partial(reward_func, tags=tags)
    functools.update_wrapper(bound, reward_func)
    return bound


# --------------------------------------------------------------------------- readability in a one-language world
# DeepSeek-R1's language-consistency reward scores the share of the chain of thought
# written in the prompt's language. The course's world has one language, but its
# corpus has two registers: the column-addition steps of the worked solutions, and
# story prose ("Anna walked to the park with Ben."). A think block that drifts into
# prose is the tiny model's version of a chain of thought that drifts into another
# language, so the analogue scores the share of the think block written in steps.
_STEP_CLAUSE = re.compile(r"\d{1,6} \+ \d{1,6}( \+ \d{1,6})? = \d{1,7}|so \d{1,7}")


def step_language_share(completion: Any, tags: Tags = COURSE_TAGS) -> float:
    """Share of the think block's comma-separated clauses that are column-addition steps.

    A step is ``"9 + 6 = 15"``, ``"2 + 4 + 1 = 7"`` or the closing ``"so 75"``; anything
    else (a stray question, a story sentence, a broken equation) is off-language. No
    think block, or an empty one, scores 0.0. Whether the steps are *right* is not
    looked at: that is the accuracy reward's job.
    """
    think = extract_think(completion, tags)
    if think is None:
        return 0.0
    clauses = [c.strip() for c in think.split(",")]
    clauses = [c for c in clauses if c]
    if not clauses:
        return 0.0
    return sum(bool(_STEP_CLAUSE.fullmatch(c)) for c in clauses) / len(clauses)


def step_language_reward(completions: list, tags: Tags = COURSE_TAGS, **kwargs) -> list[float]:
    """:func:`step_language_share` of each completion: the course's language-consistency reward (notebook 08)."""
    return [step_language_share(c, tags) for c in completions]


def with_prefix(reward_func: Callable, prefix: str) -> Callable:
    """``reward_func`` scoring ``prefix + completion``, keeping its ``__name__`` (TRL logs rewards by it).

    For prompts that end inside the format, e.g. R1-Zero's ``"... <think>"``: the policy
    never writes the opening tag, so the reward must put it back before checking.
    """
    @functools.wraps(reward_func)
    def prefixed(completions, **kwargs):
        return reward_func([prefix + completion_text(c) for c in completions], **kwargs)
    return prefixed
