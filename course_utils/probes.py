"""Probes of what training taught a model: a base model's tagged format (notebook 01), SFT's blind spots (notebook 02)
and a reward model's (notebook 03).

Each probe is a small measurement beside the main evaluation (``experiment.evaluate`` for answers,
``evaluation.pair_accuracy`` for a reward model), kept here so a notebook shows the experiment and not
the counting:

* 01, is the tagged answer format already in a base model? The corpus holds a few worked additions marked up with
  tags, as some web pages mark up their solutions. A prompt that *opens* the think block the way those pages did,
  ``question <think>``, may be continued in the tagged format; that is what lets RL start straight from a base model
  (R1-Zero, notebook 08), since every reward is zero unless the format appears sometimes.
  :func:`tagged_prompt_probe` measures how often it does;
* 02, no negative signal: :func:`food_logprobs` and :func:`food_standing` (which food a model puts after a query,
  against the corpus's other foods as controls);
* 02, data quality and overfitting: :func:`subset_accuracy` (accuracy on some question types only) and
  :func:`memorised_share` (how many answers are one of a few memorised sums);
* 03, where a reward model is wrong: :func:`pair_accuracy_by` (per flaw), the probe pairs
  :func:`near_miss_pairs` and :func:`consistent_wrong_pairs`, and :func:`candidate_answers` (one problem's
  answers of every kind, to rank).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from . import data, evaluation, generation, rewards
from .rewards import extract_answer

# ------------------------------------------------------------------ 01: the tagged format in a base model

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


# ------------------------------------------------------------------ 02: what SFT takes from a sentence


def food_logprobs(model, tokenizer, query: str, foods: Sequence[str] = tuple(data.FOODS)) -> dict[str, float]:
    """``log P(" " + food | query)`` under ``model`` for each food (default: the corpus's ten)."""
    return {food: evaluation.continuation_logprob(model, tokenizer, query, " " + food) for food in foods}


def food_standing(logprobs: dict[str, float], food: str) -> dict:
    """Where ``food`` stands among ``logprobs`` (food -> log-prob): its log-prob, its rank (1 = the model's first
    choice), its margin in nats over the best *other* food (positive: first), and that rival's name."""
    ranked = sorted(logprobs, key=logprobs.get, reverse=True)
    rival = next(f for f in ranked if f != food)
    return {"logp": logprobs[food], "rank": ranked.index(food) + 1, "margin": logprobs[food] - logprobs[rival],
            "rival": rival}


def subset_accuracy(samples: Iterable[dict], keep: Callable[[str], bool]) -> float:
    """Greedy accuracy over the samples whose question ``keep`` accepts (samples as ``experiment.Eval.samples``:
    dicts with ``question`` and ``correct``)."""
    rows = [s for s in samples if keep(s["question"])]
    if not rows:
        raise ValueError("no sample's question is kept")
    return sum(s["correct"] for s in rows) / len(rows)


def memorised_share(samples: Sequence[dict], answers: Iterable[str]) -> float:
    """The share of samples whose answer (inside ``<answer>``) is one of ``answers``: the memorised sums of an
    overfitted model, whatever the question."""
    seen = set(answers)
    return sum(extract_answer(s["completion"]) in seen for s in samples) / len(samples)


# ------------------------------------------------------------------ 03: where a reward model is wrong
NEIGHBOURS = (-10, -1, 1, 10)   # off by one digit: the units or the tens


def pair_accuracy_by(rows: Sequence[dict], scores: dict, key: str = "flaw") -> dict[str, float]:
    """Pair accuracy per value of ``rows[i][key]`` (e.g. per flaw), from ``evaluation.pair_accuracy``'s result
    ``scores`` on those very rows (its ``chosen`` and ``rejected`` scores)."""
    if len(rows) != len(scores["chosen"]):
        raise ValueError(f"{len(rows)} rows but {len(scores['chosen'])} scores")
    out = {}
    for value in sorted({r[key] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r[key] == value]
        out[value] = float((scores["chosen"][idx] > scores["rejected"][idx]).float().mean())
    return out


def near_miss_pairs(problems: Sequence[dict]) -> list[dict]:
    """Pairs whose rejected answer contradicts its own think section by one digit: the think ends with the right
    sum, the answer is off by -10, -1, +1 or +10 (in turn). Training mismatches differ in several digits."""
    return [{"prompt": p["question"], "chosen": p["completion"],
             "rejected": data.format_completion(p["a"], p["b"], answer=int(p["answer"]) + NEIGHBOURS[i % 4])}
            for i, p in enumerate(problems)]


def consistent_but_wrong(problem: dict) -> str:
    """A well-formed, self-consistent, wrong answer: the worked sum of a neighbouring problem (``b`` off by -10,
    -1, +1 or +10, chosen by ``a``), i.e. the *chosen* answer of another problem."""
    delta = NEIGHBOURS[problem["a"] % 4]
    return data.format_completion(problem["a"], problem["b"] + delta)


def consistent_wrong_pairs(problems: Sequence[dict]) -> list[dict]:
    """Pairs of the right answer against :func:`consistent_but_wrong`: only the question tells which is right."""
    return [{"prompt": p["question"], "chosen": p["completion"], "rejected": consistent_but_wrong(p)}
            for p in problems]


def candidate_answers(problem: dict) -> dict[str, str]:
    """One problem's answer in six kinds, right, wrong and malformed, to see how a reward model ranks them."""
    a, b, answer = problem["a"], problem["b"], problem["answer"]
    return {"correct": problem["completion"], "consistent but wrong sum": consistent_but_wrong(problem),
            "answer contradicts think": data.format_completion(a, b, answer=int(answer) + 37),
            "near miss (answer + 1)": data.format_completion(a, b, answer=int(answer) + 1),
            "no tags": "The answer is " + str(answer) + ".",
            "answer twice": problem["completion"] + "<answer>" + str(answer) + "</answer>"}
