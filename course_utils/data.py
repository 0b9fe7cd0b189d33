"""The course's tiny world: data generation and loading.

Everything the CPU path trains on is generated here, deterministically, and
committed under ``data/`` so a learner can read it. ``python -m course_utils.data``
regenerates the files; ``tests/test_data.py`` checks they come out byte for byte.

The world
---------
* **Arithmetic word problems** with a verifiable answer: every pair ``(a, b)`` with
  ``10 <= a, b <= 99``. A completion is written R1-style::

      <think>23 + 45 = 68</think><answer>68</answer>

* **Pretraining corpus**: short English documents about people, what they like
  (including "likes Y most / least", used in 02 to show that SFT has no negative
  signal), places, counting, and arithmetic facts. Arithmetic facts use only
  *train* pairs, so no held-out test problem ``a + b`` appears in any training text
  (the split is by ordered pair: the swapped ``b + a`` of most test pairs is in train).
* **Preference pairs** (prompt / chosen / rejected): chosen is a correct, well
  formatted answer; rejected breaks the format or contradicts its own reasoning
  (think says 68, answer says 61). A tiny reward model can learn these; it cannot
  learn "wrong sum" negatives (measured), so the data avoids asking it to.

Splits are by ``(a, b)`` pair and fixed: ``test`` (300 pairs, the evaluation set
of every notebook), ``validation`` (300), ``train`` (the rest).
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Iterable

from .paths import data_dir

# Bump when the generator changes; data/README.md and the tests quote it.
GENERATOR_VERSION = 4
GENERATOR_SEED = 20261129  # fixed on purpose: the data is part of the course, not of a run
SPLITS = ("train", "validation", "test")
N_TEST_PAIRS = 300
N_VALIDATION_PAIRS = 300
LOW, HIGH = 10, 99

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

NAMES = ["Anna", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivan", "Jo",
         "Kai", "Lena", "Milo", "Nina", "Omar", "Pia", "Raj", "Sara", "Tom", "Uma"]
THINGS = ["apples", "books", "coins", "stamps", "shells", "pens", "cards", "eggs",
          "marbles", "stones", "cups", "keys"]
FOODS = ["tea", "rice", "soup", "bread", "plums", "cheese", "figs", "noodles", "milk", "honey"]
PLACES = ["the park", "the market", "the river", "school", "the library", "the farm",
          "the beach", "the station"]
ANIMALS = ["cat", "dog", "bird", "horse", "fox", "goat", "duck", "owl"]
VERBS_PAST = ["walked to", "ran to", "drove to", "went to", "looked at"]
COLOURS = ["red", "blue", "green", "yellow", "white", "black"]

# Question templates: {n} name, {a} {b} numbers, {t} thing.
QUESTION_TEMPLATES = [
    "{n} has {a} {t} and gets {b} more. How many {t} does {n} have now?",
    "{n} had {a} {t}. A friend gave {n} {b} {t}. How many {t} does {n} have?",
    "There are {a} {t} in one box and {b} {t} in another. How many {t} are there in total?",
    "What is {a} plus {b}?",
    "{n} found {a} {t} on Monday and {b} {t} on Tuesday. How many {t} did {n} find?",
    "Add {a} and {b}.",
]


# --------------------------------------------------------------------------- splits
def all_pairs() -> list[tuple[int, int]]:
    """Every ``(a, b)`` with ``LOW <= a, b <= HIGH``, in a fixed order."""
    return [(a, b) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)]


def split_pairs() -> dict[str, list[tuple[int, int]]]:
    """The fixed train / validation / test split of the addition pairs."""
    pairs = all_pairs()
    random.Random(GENERATOR_SEED).shuffle(pairs)
    test = sorted(pairs[:N_TEST_PAIRS])
    val = sorted(pairs[N_TEST_PAIRS:N_TEST_PAIRS + N_VALIDATION_PAIRS])
    train = sorted(pairs[N_TEST_PAIRS + N_VALIDATION_PAIRS:])
    return {"train": train, "validation": val, "test": test}


# --------------------------------------------------------------------------- problems
def column_steps(a: int, b: int) -> str:
    """Column addition written out, ones first, carry explicit: ``9 + 6 = 15, 2 + 4 + 1 = 7``."""
    ones = a % 10 + b % 10
    tens = a // 10 + b // 10 + ones // 10
    return f"{a % 10} + {b % 10} = {ones}, {a // 10} + {b // 10} + {ones // 10} = {tens}"


def format_completion(a: int, b: int, answer: int | None = None) -> str:
    """The reference completion for ``a + b``: column steps and their result in think, the sum in answer.

    ``<think>9 + 6 = 15, 2 + 4 + 1 = 7, so 75</think><answer>75</answer>``. ``answer``
    overrides the number in ``<answer>`` (to build think/answer mismatches).
    """
    shown = a + b if answer is None else answer
    return f"{THINK_OPEN}{column_steps(a, b)}, so {a + b}{THINK_CLOSE}{ANSWER_OPEN}{shown}{ANSWER_CLOSE}"


def make_problem(a: int, b: int, rng: random.Random, split: str, index: int) -> dict:
    template = rng.choice(QUESTION_TEMPLATES)
    question = template.format(n=rng.choice(NAMES), a=a, b=b, t=rng.choice(THINGS))
    return {
        "id": f"{split}-{index:05d}",
        "a": a,
        "b": b,
        "question": question,
        "answer": str(a + b),
        "completion": format_completion(a, b),
    }


def generate_problems() -> dict[str, list[dict]]:
    """Arithmetic problems per split; one problem per pair, order shuffled."""
    out = {}
    for split, pairs in split_pairs().items():
        rng = random.Random(f"{GENERATOR_SEED}-problems-{split}")
        pairs = list(pairs)
        rng.shuffle(pairs)
        out[split] = [make_problem(a, b, rng, split, i) for i, (a, b) in enumerate(pairs)]
    return out


# --------------------------------------------------------------------------- sums of several numbers, for the tool (12)
TOOL_TERMS = (3, 4, 5)   # addends per sum, each two-digit (LOW..HIGH), equally often
TOOL_SPLIT_SIZES = {"train": 3000, "validation": 300, "test": 300}
TOOL_COUNT_WORDS = {3: "three", 4: "four", 5: "five"}
# {n} name, {t} thing, {k} the number of addends in words; {listed} "23, 45 and 67", {expr} "23 + 45 + 67",
# {first} the first addend and {rest} the others listed.
TOOL_TEMPLATES = [
    "What is {expr}?",
    "Add {listed}.",
    "What is the sum of {listed}?",
    "{n} has {first} {t} and gets {rest} more. How many {t} does {n} have now?",
    "There are {listed} {t} in {k} boxes. How many {t} are there in total?",
    "{n} found {listed} {t} on {k} days. How many {t} did {n} find?",
]


def _listed(terms: list[int]) -> str:
    return ", ".join(map(str, terms[:-1])) + f" and {terms[-1]}"


def tool_question(terms: list[int], rng: random.Random) -> str:
    """One of :data:`TOOL_TEMPLATES` filled with ``terms``."""
    return rng.choice(TOOL_TEMPLATES).format(
        n=rng.choice(NAMES), t=rng.choice(THINGS), k=TOOL_COUNT_WORDS[len(terms)], listed=_listed(terms),
        expr=" + ".join(map(str, terms)), first=terms[0], rest=_listed(terms[1:]))


def generate_tool_problems() -> dict[str, list[dict]]:
    """Sums of three to five two-digit numbers (:data:`TOOL_TERMS`), asked with :data:`TOOL_TEMPLATES`, for
    notebook 12's calculator.

    No list of addends appears twice, in a split or across splits. Every other sum of the course's data has two
    operands, so the model never learned to add three or more numbers and fails these alone; the numbers themselves
    are the two-digit ones it reads and writes everywhere, so copying them into a call is within its reach. Rows:
    ``id``, ``terms``, ``question``, ``answer`` (12's demonstrations are built by ``agentic.demo_row`` and
    ``direct_row``).
    """
    rng = random.Random(f"{GENERATOR_SEED}-tool")
    lists, seen = [], set()
    while len(lists) < sum(TOOL_SPLIT_SIZES.values()):
        terms = tuple(rng.randint(LOW, HIGH) for _ in range(TOOL_TERMS[len(lists) % len(TOOL_TERMS)]))
        if terms not in seen:
            seen.add(terms)
            lists.append(terms)
    rng.shuffle(lists)
    out, start = {}, 0
    for split in ("test", "validation", "train"):
        chunk = lists[start:start + TOOL_SPLIT_SIZES[split]]
        start += len(chunk)
        out[split] = [{"id": f"{split}-{i:05d}", "terms": list(terms), "question": tool_question(list(terms), rng),
                       "answer": str(sum(terms))} for i, terms in enumerate(chunk)]
    return {split: out[split] for split in SPLITS}


# --------------------------------------------------------------------------- corpus
def _sentence(rng: random.Random, pairs: list[tuple[int, int]]) -> str:
    """One corpus sentence: 40% everyday language, 60% arithmetic (train pairs only)."""
    n, m = rng.sample(NAMES, 2)
    kind = rng.randrange(10)
    if kind == 0:
        f1, f2 = rng.sample(FOODS, 2)
        return rng.choice([f"{n} likes {f1}.", f"{n} likes {f1} most and {f2} least."])
    if kind == 1:
        return f"{n} {rng.choice(VERBS_PAST)} {rng.choice(PLACES)} with {m}."
    if kind == 2:
        return rng.choice([f"The {rng.choice(COLOURS)} {rng.choice(ANIMALS)} sat near {rng.choice(PLACES)}.",
                           f"{n} gave {m} a {rng.choice(COLOURS)} {rng.choice(ANIMALS)} toy."])
    if kind == 3:
        start = rng.randint(1, 90)
        return "Counting: " + " ".join(str(start + i) for i in range(rng.randint(3, 6))) + "."
    # kinds 4-9: arithmetic, from train pairs only: facts, column additions, worked word problems
    a, b = rng.choice(pairs)
    if kind <= 5:
        return rng.choice([f"{a} + {b} = {a + b}.", f"{a} plus {b} is {a + b}.", f"The sum of {a} and {b} is {a + b}."])
    if kind == 6:
        return f"To add {a} and {b}: {column_steps(a, b)}, so {a} + {b} = {a + b}."
    question = rng.choice(QUESTION_TEMPLATES).format(n=n, a=a, b=b, t=rng.choice(THINGS))
    if rng.random() < TAGGED_SHARE:
        return tagged_solution(question, a, b, rng)
    return f"{question} {column_steps(a, b)}, so {a + b}."


# A small share of the worked problems are written with the reasoning tags, as a forum
# post or a textbook might mark them up. Real base models have seen such markup on the
# web; without it, RL straight from the base (R1-Zero, notebook 08) never sees a reward.
# About 1 sentence in 30 is tagged, half of them in the exact format the rewards accept.
TAGGED_SHARE = 0.12


def tagged_solution(question: str, a: int, b: int, rng: random.Random) -> str:
    """A worked problem marked up with the tags, in the strict format or a looser one."""
    steps, total = column_steps(a, b), a + b
    if rng.random() < 0.5:
        return f"{question} {THINK_OPEN}{steps}, so {total}{THINK_CLOSE}{ANSWER_OPEN}{total}{ANSWER_CLOSE}"
    return f"{question} {THINK_OPEN}{steps}{THINK_CLOSE} The answer is {ANSWER_OPEN}{total}{ANSWER_CLOSE}."


def generate_corpus(n_train: int = 8000, n_validation: int = 400) -> dict[str, list[dict]]:
    """Pretraining documents (1-3 sentences each) for train and validation."""
    pairs = split_pairs()["train"]
    out = {}
    for split, n_docs in (("train", n_train), ("validation", n_validation)):
        rng = random.Random(f"{GENERATOR_SEED}-corpus-{split}")
        out[split] = [{"text": " ".join(_sentence(rng, pairs) for _ in range(rng.randint(1, 3)))}
                      for _ in range(n_docs)]
    return out


# --------------------------------------------------------------------------- preferences
# Mismatch pairs differ from chosen in two or three digits only, while the format flaws
# change the text's shape, so mismatch gets most of the pairs. Its wrong answer is any
# other number up to 198: near misses (off by 1 or 10) are far harder for a tiny reward
# model to catch than random wrong numbers. 03 shows both.
FLAW_WEIGHTS = {"mismatch": 0.6, "no_tags": 0.1, "no_think": 0.1, "unclosed": 0.1, "answer_first": 0.1}


def _rejected(a: int, b: int, rng: random.Random) -> tuple[str, str]:
    """A bad completion and the kind of flaw it has."""
    total = a + b
    kind = rng.choices(list(FLAW_WEIGHTS), weights=list(FLAW_WEIGHTS.values()))[0]
    if kind == "mismatch":  # the answer contradicts the reasoning's conclusion
        wrong = rng.choice([n for n in range(199) if n != total])
        return format_completion(a, b, answer=wrong), kind
    if kind == "no_tags":
        return f"{column_steps(a, b)}. The answer is {total}.", kind
    if kind == "no_think":
        return f"{ANSWER_OPEN}{total}{ANSWER_CLOSE}", kind
    if kind == "unclosed":
        return f"{THINK_OPEN}{column_steps(a, b)}, so {total}{ANSWER_OPEN}{total}", kind
    return f"{ANSWER_OPEN}{total}{ANSWER_CLOSE}{THINK_OPEN}{column_steps(a, b)}, so {total}{THINK_CLOSE}", kind


def generate_preferences() -> dict[str, list[dict]]:
    """Preference pairs built on the arithmetic problems of each split."""
    out = {}
    for split, problems in generate_problems().items():
        rng = random.Random(f"{GENERATOR_SEED}-prefs-{split}")
        rows = []
        for p in problems:
            rejected, kind = _rejected(p["a"], p["b"], rng)
            rows.append({"id": p["id"], "prompt": p["question"], "chosen": p["completion"],
                         "rejected": rejected, "flaw": kind})
        out[split] = rows
    return out


# --------------------------------------------------------------------------- files
def _dump_jsonl(rows: Iterable[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)


def generated_files() -> dict[str, str]:
    """File name -> exact text of every file under ``data/`` the generator owns."""
    files = {}
    for prefix, tables in (("arithmetic", generate_problems()), ("corpus", generate_corpus()),
                           ("preferences", generate_preferences()), ("tool_arithmetic", generate_tool_problems())):
        for split, rows in tables.items():
            files[f"{prefix}_{split}.jsonl"] = _dump_jsonl(rows)
    return files


def write_data(out_dir: str | Path | None = None) -> list[Path]:
    """Write every generated file to ``out_dir`` (default: the repo's ``data/``)."""
    out = Path(out_dir) if out_dir is not None else data_dir(must_exist=False)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in generated_files().items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


DATASETS = ("arithmetic", "corpus", "preferences", "tool_arithmetic")


def load_jsonl(name: str, split: str, n: int | None = None) -> list[dict]:
    """Rows of ``data/<name>_<split>.jsonl``; the first ``n`` if given.

    >>> load_jsonl("arithmetic", "test", n=1)[0]["answer"]  # doctest: +SKIP
    '68'
    """
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; choose one of {DATASETS}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    path = data_dir() / f"{name}_{split}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"data file {path} is missing: it ships with the course; restore it with "
            f"`git checkout data/` or regenerate it with `python -m course_utils.data`")
    with path.open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return rows[:n] if n is not None else rows


# --------------------------------------------------------------------------- chat views
def to_messages(question: str, completion: str | None = None) -> list[dict]:
    """A problem as chat messages: the user's question, then the assistant's completion if given."""
    msgs = [{"role": "user", "content": question}]
    if completion is not None:
        msgs.append({"role": "assistant", "content": completion})
    return msgs


def sft_rows(split: str = "train", n: int | None = None, problems: list[dict] | None = None) -> list[dict]:
    """``{"messages": [...]}`` rows for TRL's ``SFTTrainer`` (conversational format)."""
    problems = load_jsonl("arithmetic", split, n=n) if problems is None else problems
    return [{"messages": to_messages(p["question"], p["completion"])} for p in problems]


def preference_rows(split: str = "train", n: int | None = None) -> list[dict]:
    """``{"prompt", "chosen", "rejected"}`` chat rows for TRL's ``RewardTrainer`` / ``DPOTrainer``."""
    return [{"prompt": to_messages(r["prompt"]),
             "chosen": [{"role": "assistant", "content": r["chosen"]}],
             "rejected": [{"role": "assistant", "content": r["rejected"]}]}
            for r in load_jsonl("preferences", split, n=n)]


def corrupt_answers(problems: list[dict], fraction: float, seed: int) -> list[dict]:
    """A noisy copy: ``fraction`` of the problems get a consistently wrong sum.

    The wrong sum (off by 1 or 10) appears in both think and answer, as a careless
    annotator would write it. Used in 02 to show that SFT copies its data's mistakes.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    rng = random.Random(seed)
    out = []
    for p in problems:
        if rng.random() < fraction:
            wrong = p["a"] + p["b"] + rng.choice([-10, -1, 1, 10])
            p = dict(p, completion=format_completion(p["a"], p["b"], answer=wrong))
        out.append(p)
    return out


def forget_carry(problems: list[dict], templates: tuple[int, ...] = (3, 5)) -> list[dict]:
    """A systematically wrong copy: problems asked with ``QUESTION_TEMPLATES[i]`` for ``i`` in
    ``templates`` were labelled by an annotator who forgets the carry (29 + 46 -> 65).

    Random noise averages out; an error tied to something the model can see (the wording
    of the question) is learned as faithfully as the truth. Used in 02.
    """
    prefixes = tuple(QUESTION_TEMPLATES[i].split("{")[0] for i in templates)
    out = []
    for p in problems:
        if p["question"].startswith(prefixes):
            a, b = p["a"], p["b"]
            ones = a % 10 + b % 10
            wrong_tens = a // 10 + b // 10  # the forgotten carry
            shown = int(f"{wrong_tens}{ones % 10}")
            steps = f"{a % 10} + {b % 10} = {ones}, {a // 10} + {b // 10} + 0 = {wrong_tens}, so {shown}"
            p = dict(p, completion=f"{THINK_OPEN}{steps}{THINK_CLOSE}{ANSWER_OPEN}{shown}{ANSWER_CLOSE}")
        out.append(p)
    return out


# --------------------------------------------------------------------------- non-reasoning data
# DeepSeek-R1's second SFT mixed ~600k reasoning samples with ~200k non-reasoning ones
# (writing, factual QA, ...) so that the model kept its general abilities. The course's
# world has one general ability besides arithmetic: the corpus's everyday sentences.
def everyday_sentences(split: str = "train") -> list[str]:
    """The corpus's everyday-language sentences of ``split``: no digits, no tags (the story register)."""
    docs = load_jsonl("corpus", split)
    return [s for d in docs for s in re.split(r"(?<=\.) ", d["text"]) if s and not re.search(r"[\d<]", s)]


def everyday_chat(sentence: str) -> dict:
    """A non-reasoning chat row: "Tell me about <the sentence's subject>." answered by the sentence."""
    words = sentence.split()
    subject = f"the {words[2]}" if words[0] == "The" and len(words) > 2 else words[0]
    return {"messages": to_messages(f"Tell me about {subject}.", sentence)}


def everyday_rows(n: int, seed: int, split: str = "train") -> list[dict]:
    """``n`` non-reasoning chat rows (:func:`everyday_chat`), drawn without replacement with ``seed``."""
    pool = everyday_sentences(split)
    if not 0 <= n <= len(pool):
        raise ValueError(f"n must be in [0, {len(pool)}] (everyday sentences in {split!r}), got {n}")
    return [everyday_chat(s) for s in random.Random(seed).sample(pool, n)]


if __name__ == "__main__":
    for p in write_data():
        print("wrote", p)
