"""The course map and the English-Chinese glossary.

``NOTEBOOKS`` is the single source of the notebook names, built and planned: the README's
map and notebook 00 render it with :func:`notebook_table`, ``plotting.plot_pipeline`` labels
its boxes from it, ``stages`` names artifacts folders with :func:`notebook_name`, and
``tests/test_repo.py`` checks it against ``notebooks/`` and the README.
``GLOSSARY`` holds the English-Chinese glossary, read from ``glossary.json`` (data, not code):
each term has a short id, its English and Chinese terms (as in the seed notes) and a one-line
meaning; notebooks show theirs with ``glossary_table(["sft", "loss-mask", ...])``. Both tables are
``show.markdown_table``'s, which escapes ``|`` (as in ``π(a|s)``) so it does not split a cell in two.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .show import markdown_rows, markdown_table


@dataclass(frozen=True)
class NotebookInfo:
    """One notebook of the course, built or planned.

    Attributes:
        number: two digits, ``"02"``; the order of the course.
        slug: the rest of the file stem, ``"sft"``.
        title: the title in the notebook map.
        short: the label of its box in :func:`course_utils.plotting.plot_pipeline`.
        learn: what it teaches, one line.
        cpu_minutes: wall time on 2 CPU cores, rounded up; ``None`` where not measured yet
            (a planned notebook) or where it needs a GPU.
        built: True where ``notebooks/<name>.ipynb`` exists; False for a planned notebook.
    """

    number: str
    slug: str
    title: str
    short: str
    learn: str
    cpu_minutes: float | None
    built: bool = True

    @property
    def name(self) -> str:
        """``"02_sft"``: the notebook's file stem, also its artifacts folder."""
        return f"{self.number}_{self.slug}"

    @property
    def filename(self) -> str:
        return f"{self.name}.ipynb"


# cpu_minutes: measured wall time on 2 CPU cores, rounded up (see build/RESULTS.md);
# None for the planned notebooks until they exist and are measured.
NOTEBOOKS = [
    NotebookInfo("00", "setup_and_map", "Setup and course map", "Setup",
                 "check the environment, the pipeline Pretrain -> SFT -> RLHF, the glossary", 0.5),
    NotebookInfo("01", "pretrain", "Pretraining a tiny Qwen3", "Pretrain",
                 "tokenizer, Qwen3 config, next-token loss from scratch and with Trainer", 4),
    NotebookInfo("02", "sft", "Supervised fine-tuning", "SFT",
                 "chat template, loss mask, SFTTrainer, the cold start, why SFT is not enough", 5),
    NotebookInfo("03", "reward_model", "Reward model", "Reward model",
                 "backbone + scalar head, Bradley-Terry loss, RewardTrainer", 3),
    NotebookInfo("04", "rl_foundations", "RL foundations", "RL foundations",
                 "on/off-policy, importance sampling, Monte Carlo, MCTS/UCT, detach, advantage", 2),
    NotebookInfo("05", "ppo", "PPO: proximal policy optimisation", "PPO",
                 "policy, reference, reward model and critic; clipped ratio, GAE, KL penalty, reward hacking", 5),
    NotebookInfo("06", "dpo", "DPO: direct preference optimisation", "DPO",
                 "the DPO loss from the KL-regularised objective; offline vs self-generated pairs, IPO, SimPO, "
                 "what goes wrong", 9),
    NotebookInfo("07", "grpo", "GRPO: group relative policy optimisation", "GRPO",
                 "group-relative advantages without a critic, verifiable rewards, GRPOTrainer + LoRA; Dr. GRPO, DAPO, "
                 "GSPO; reward hacking; stale rollouts and TRL's importance-sampling correction; troubleshooting", 13),
    NotebookInfo("08", "r1_pipeline", "The DeepSeek-R1 recipe, every stage run", "R1 pipeline",
                 "R1-Zero from the base; cold start, reasoning RL with a consistency reward, rejection sampling, SFT "
                 "with non-reasoning data, RL again; what R1 dropped", 8),
    NotebookInfo("09", "distillation", "Distillation: a student a sixth the teacher's size", "Distillation",
                 "soft and hard labels, temperature, T²·KL and the generalised JSD; sequence-level (R1-Distill), "
                 "logit (GKD, off- and on-policy) and hidden-state distillation; on-policy distillation with "
                 "DistillationTrainer against SFT and GRPO at equal time", 8),
    NotebookInfo("10", "inference_scaling", "Inference-time scaling", "Inference scaling",
                 "spending compute at test time: pass@N, majority vote, best-of-N with a reward model, votes over "
                 "paraphrases, a process reward model in miniature, a DeepSeek-GRM-style generative judge with a meta RM, "
                 "and whether writing principles before its verdict helps", 4),
    NotebookInfo("11", "qwen3_grpo_unsloth_vllm", "Qwen3 GRPO with unsloth and vLLM", "Qwen3 GRPO (GPU)",
                 "the seed's recipe completed: unsloth + vLLM on a GPU (the tiny Qwen3 with TRL + PEFT on a CPU), "
                 "reasoning-tag template, format priming, GRPO on the seed's rewards, API drift, scripts and "
                 "accelerate configs for many GPUs", 5),
    NotebookInfo("12", "agentic_rl", "Agentic RL: a model that learns to call a tool", "Agentic RL",
                 "a tool-calling chat template, a cold start with and without the tool, the multi-turn rollout and its "
                 "tool mask from scratch and against TRL's loop, GRPO that learns when to call, what goes wrong",
                 9),
    NotebookInfo("13", "when_rl_goes_wrong", "When RL goes wrong: make it fail, see it, fix it", "When RL goes wrong",
                 "a step too large with no KL anchor, a cold start without the skill, a reward that rewards nothing, a "
                 "sampler that is not the trainer, evaluation that misleads: each caused on purpose, read in the "
                 "panels, diagnosed and fixed; entropy collapse, clip-higher, high-entropy tokens, DAPO's overlong "
                 "penalty, importance weights",
                 6),
]


COURSE_REPO_ENV = "COURSE_REPO"
"""the environment variable that overrides :data:`COURSE_REPO` (an install cell reads it too)"""
COURSE_REPO = ""
"""The course's public git repository as ``owner/name`` on GitHub, the one setting the hosted entry points read: every
notebook's install cell (:func:`course_tools.book.install_cell`) clones it, and the book and the README link each chapter to a hosted
notebook service with it. Empty while the course has no fixed public home: set it when you publish a copy, then run
``python -m course_tools.book --sync-install-cells`` (a test checks the cells against it); env ``COURSE_REPO``
overrides it for a notebook's install and for ``make book``."""


HOSTED_URL = "https://colab.research.google.com/github/{repo}/blob/main/notebooks/{filename}"
"""a hosted notebook service that opens a notebook straight from a GitHub repository (``owner/name``)"""


def course_repo() -> str:
    """The course's GitHub repository as ``owner/name``: env ``COURSE_REPO`` (a URL is cut to ``owner/name``), else
    :data:`COURSE_REPO` (empty while the course has no fixed public home)."""
    value = (os.environ.get(COURSE_REPO_ENV) or COURSE_REPO).strip().removesuffix(".git").rstrip("/")
    match = re.search(r"github\.com[/:]([^/]+/[^/]+)$", value)
    return match.group(1) if match else value


def hosted_url(nb: NotebookInfo, repo: str | None = None) -> str | None:
    """The link that opens ``nb`` on a hosted notebook service, or None without a repository (:func:`course_repo`)."""
    repo = course_repo() if repo is None else repo
    return HOSTED_URL.format(repo=repo, filename=nb.filename) if repo else None


def install_extra(number: str) -> str:
    """The optional dependency group notebook ``number``'s install cell adds: ``"gpu"`` (unsloth, vLLM) for 11."""
    return "gpu" if number == "11" else ""


def needs_gpu(nb: NotebookInfo) -> bool:
    """True for the notebook whose real path wants a GPU on a hosted service (it installs the ``gpu`` extra)."""
    return install_extra(nb.number) == "gpu"


def notebook_name(number: str) -> str:
    """The name (file stem) of notebook ``number``: ``notebook_name("02") == "02_sft"``."""
    for nb in NOTEBOOKS:
        if nb.number == number:
            return nb.name
    raise ValueError(f"no notebook {number!r}; notebooks: {[nb.number for nb in NOTEBOOKS]}")


def notebook_table(link_prefix: str = "notebooks/", planned: bool = True) -> str:
    """The notebook map as a Markdown table.

    The last column says which runtime a hosted notebook service needs (a free CPU one for all but 11) and, where
    :func:`course_repo` names the course's repository, links to the notebook there.

    Args:
        link_prefix: the path from the page showing the table to the notebooks: ``"notebooks/"``
            in the README, ``""`` in a notebook (notebook 00).
        planned: also list the planned notebooks, without a link and marked *coming*.
    """
    rows = []
    for nb in NOTEBOOKS:
        if nb.built:
            title = f"[{nb.title}]({link_prefix}{nb.filename})"
        elif planned:
            title = f"{nb.title} *(coming)*"
        else:
            continue
        minutes = "–" if nb.cpu_minutes is None else f"{nb.cpu_minutes:g}"
        runtime = "GPU" if needs_gpu(nb) else "CPU"
        url = hosted_url(nb) if nb.built else None
        hosted = f"[{runtime}]({url})" if url else (runtime if nb.built else "–")
        rows.append((nb.number, title, nb.learn, minutes, hosted))
    return markdown_rows(("#", "notebook", "what you learn", "CPU min", "hosted"), rows)


GLOSSARY_FILE = Path(__file__).with_name("glossary.json")


@dataclass(frozen=True)
class Term:
    """One glossary entry: a short ``id`` to look it up by, the English term, its Chinese term, a one-line meaning."""

    id: str
    en: str
    zh: str
    meaning: str


def load_glossary(path: Path = GLOSSARY_FILE) -> dict[str, Term]:
    """The glossary file as ``{id: Term}``, in the file's order; ids must be unique short slugs."""
    terms = [Term(**t) for t in json.loads(path.read_text(encoding="utf-8"))["terms"]]
    ids = [t.id for t in terms]
    bad = [i for i in ids if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i)]
    if bad or len(set(ids)) != len(ids):
        raise ValueError(f"glossary ids must be unique lower-case slugs: bad {bad}, "
                         f"repeated {sorted({i for i in ids if ids.count(i) > 1})}")
    return {t.id: t for t in terms}


GLOSSARY: dict[str, Term] = load_glossary()


def glossary_table(ids: list[str] | None = None) -> str:
    """The glossary (or the terms with these ``ids``) as a Markdown table."""
    keys = list(GLOSSARY) if ids is None else ids
    unknown = [k for k in keys if k not in GLOSSARY]
    if unknown:
        raise KeyError(f"not in the glossary: {unknown}; terms are looked up by id, e.g. 'sft' "
                       f"(course_utils/glossary.json)")
    terms = [GLOSSARY[k] for k in keys]
    return markdown_table({"English": [t.en for t in terms], "中文": [t.zh for t in terms],
                           "meaning": [t.meaning for t in terms]})
