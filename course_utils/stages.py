"""Stage checkpoints: each notebook saves one or two, later notebooks load them.

The stage table is declarative: each :class:`Stage` names the notebook that owns it,
the stage it starts from, the model class it is saved as and the trainer that runs
its recipe (``recipes``). One generic :func:`build_stage` trains any of them.

===========  ========  ==========  ==========================================
stage        notebook  parent      what it is
===========  ========  ==========  ==========================================
pretrain     01        (none)      the tiny Qwen3 pretrained on the corpus
sft          02        pretrain    SFT on all 7,500 arithmetic chats
sft_cold     02        pretrain    SFT on a few demonstrations (the RL start)
reward       03        sft         a scalar head on the SFT backbone
===========  ========  ==========  ==========================================

Checkpoints live in ``artifacts/<notebook>/<profile slug>/<stage>/``: the slug names
the profile and its base model (``cpu-tiny``, ``gpu-Qwen--Qwen3-0.6B``), so a CPU
checkpoint is never returned to a GPU run or to another base model.

``load_stage(name, profile)`` returns ``(model, tokenizer)``; when the checkpoint is
missing it *builds* it with the owning notebook's default recipe (and says so), so
every notebook also runs on its own on a fresh clone. With a base model named
(``Params(model_id=...)``, env ``COURSE_MODEL``, or the ``gpu`` profile's Qwen3-0.6B) the
``pretrain`` stage is that model itself, adapted to the course's chat format: nobody
pretrains a 0.6B model in a course, so 01's tiny run is the CPU path's stand-in for it.
"""
from __future__ import annotations

import json
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from . import training
from .adapt import adapt
from .course import notebook_name
from .modeling import (build_model, check_safetensors_dir, course_model_shape, save_checkpoint, train_tokenizer,
                       transformers_errors_only)
from .paths import artifacts_dir
from .run_config import Profile, get_profile, seed_everything
from .recipes import recipe_for


@dataclass(frozen=True)
class Stage:
    """One row of the stage table."""

    name: str
    notebook: str              # the owning notebook's number, e.g. "02"
    parent: str | None         # the stage it is trained from (None: from scratch)
    model_class: type          # the class its checkpoint loads as
    trainer: Callable          # trainer(model, tokenizer, profile, recipe, output_dir) -> a Trainer
    minutes: float             # rough CPU time to build, shown to the learner
    model_kwargs: dict = field(default_factory=dict)  # extra from_pretrained arguments (e.g. num_labels)

    @property
    def notebook_name(self) -> str:
        return notebook_name(self.notebook)


STAGES: dict[str, Stage] = {s.name: s for s in [
    Stage("pretrain", "01", None, AutoModelForCausalLM, training.pretrain_trainer, minutes=1.2),
    Stage("sft", "02", "pretrain", AutoModelForCausalLM, training.sft_trainer, minutes=0.5),
    Stage("sft_cold", "02", "pretrain", AutoModelForCausalLM, training.sft_trainer, minutes=0.4),
    Stage("reward", "03", "sft", AutoModelForSequenceClassification, training.reward_trainer, minutes=0.5,
          model_kwargs={"num_labels": 1}),
]}


def get_stage(name: str) -> Stage:
    if name not in STAGES:
        raise ValueError(f"unknown stage {name!r}; known stages: {sorted(STAGES)}")
    return STAGES[name]


def stage_dir(name: str, profile: Profile) -> Path:
    """Where stage ``name`` lives for ``profile``: ``artifacts/<notebook>/<slug>/<name>``."""
    return artifacts_dir(get_stage(name).notebook_name) / profile.slug / name


def is_hub_stage(name: str, profile: Profile) -> bool:
    """True where the stage is the profile's base model itself (``pretrain`` on a hub model)."""
    return name == "pretrain" and profile.model_id is not None


def stage_inputs(name: str, profile: Profile, recipe=None) -> dict:
    """Everything that makes stage ``name`` for ``profile``, as ``stage.json`` records it.

    The profile (and so the base model), the seed, the recipe (default: its notebook's), the
    model's shape for a stage trained from scratch (``modeling.course_model_shape``) and,
    recursively, the parent stage's own inputs: a stage built from another parent, seed, recipe
    or shape is another stage, whatever its folder is called.
    """
    stage = get_stage(name)
    if is_hub_stage(name, profile):
        return {"stage": name, "profile": profile.slug, "hub": profile.model_id}
    recipe = recipe_for(name, profile) if recipe is None else recipe
    info = {"stage": name, "profile": profile.slug, "seed": profile.seed,
            "recipe": {"class": type(recipe).__name__, **asdict(recipe)},
            "parent": stage_inputs(stage.parent, profile) if stage.parent else None}
    if stage.parent is None:
        info["model"] = course_model_shape()
    return json.loads(json.dumps(info, sort_keys=True))       # as it reads back from JSON (tuples as lists)


def stage_exists(name: str, profile: Profile) -> bool:
    """True if stage ``name`` is saved for ``profile`` and was made from the inputs it would be built from now.

    A folder whose ``stage.json`` records another seed, recipe or parent (or none) is stale:
    :func:`load_stage` rebuilds it rather than reuse it for other inputs.
    """
    path = stage_dir(name, profile)
    if not (path.is_dir() and any(path.glob("*.safetensors"))):
        return False
    try:
        recorded = json.loads((path / "stage.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return recorded == stage_inputs(name, profile)


def load_checkpoint(path: str | Path, model_class=AutoModelForCausalLM, **kwargs):
    """Load ``(model, tokenizer)`` from a local safetensors checkpoint folder."""
    path = check_safetensors_dir(path)
    with _loading(path, model_class):
        model = model_class.from_pretrained(path, use_safetensors=True, trust_remote_code=False, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    return model, tokenizer


def _is_head_swap(path: Path | None, model_class) -> bool:
    """True where a causal language model is loaded under another class (a reward, value or process reward head on
    its backbone): the new head's weights are missing from the checkpoint by design. ``path``: a local checkpoint
    (its ``config.json`` says what it was saved as); None for the base model, which is always a causal LM."""
    if model_class is AutoModelForCausalLM or model_class.__name__.endswith("ForCausalLM"):
        return False
    if path is None:
        return True
    config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    return any(a.endswith("ForCausalLM") for a in config.get("architectures") or [])


def _loading(path: Path | None, model_class):
    """The block to load in: transformers' LOAD REPORT of a head swap (:func:`_is_head_swap`) is the course's
    intent and is silenced; any other load reports as usual."""
    return transformers_errors_only() if _is_head_swap(path, model_class) else nullcontext()


def load_hub_model(model_id: str, profile: Profile, model_class=AutoModelForCausalLM, **kwargs):
    """Your own base model: a hub id or a local folder (safetensors only, no remote code) and its tokenizer, in the
    profile's dtype (float32 on a CPU, bfloat16 on a GPU), adapted to the course's chat format
    (:func:`course_utils.adapt.adapt`: pad token, chat template, tags as tokens); prints what the adapter changed."""
    if Path(model_id).expanduser().is_dir():
        check_safetensors_dir(Path(model_id).expanduser())
    with _loading(None, model_class):
        model = model_class.from_pretrained(model_id, dtype=profile.dtype, use_safetensors=True,
                                            trust_remote_code=False, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=False)
    adaptation = adapt(model, tokenizer)
    print(f"{model_id} adapted to the course: {adaptation}")
    return model.to(profile.device), tokenizer


def save_stage(name: str, model, tokenizer, profile: Profile, recipe=None) -> Path:
    """Save a trained stage (safetensors) and a ``stage.json`` with its inputs (:func:`stage_inputs`).

    ``recipe`` is the one it was trained with (default: its notebook's); the parent's inputs are
    read from the parent's own ``stage.json``, i.e. what the model was really trained from.
    """
    path = save_checkpoint(model, tokenizer, stage_dir(name, profile))
    info = stage_inputs(name, profile, recipe)
    parent = get_stage(name).parent
    if parent and not is_hub_stage(parent, profile):
        parent_json = stage_dir(parent, profile) / "stage.json"
        info["parent"] = json.loads(parent_json.read_text(encoding="utf-8")) if parent_json.exists() else None
    (path / "stage.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load_stage(name: str, profile: Profile | None = None, build_if_missing: bool = True,
               model_class=None, **kwargs):
    """``(model, tokenizer)`` of stage ``name`` for ``profile``, building it first if missing.

    Args:
        name: a stage of :data:`STAGES`.
        profile: defaults to ``get_profile("auto")``.
        build_if_missing: if False, a missing stage raises ``FileNotFoundError``.
        model_class: load under another class than the stage's own, e.g.
            ``AutoModelForSequenceClassification`` to put a backbone under a new head.
        kwargs: passed to ``from_pretrained`` (e.g. ``num_labels=1``).
    """
    stage = get_stage(name)
    profile = profile or get_profile("auto")
    model_class = model_class or stage.model_class
    kwargs = {**(stage.model_kwargs if model_class is stage.model_class else {}), **kwargs}
    if is_hub_stage(name, profile):
        return load_hub_model(profile.model_id, profile, model_class=model_class, **kwargs)
    if not stage_exists(name, profile):
        if not build_if_missing:
            raise FileNotFoundError(f"stage {name!r} not found at {stage_dir(name, profile)}; "
                                    f"run {stage.notebook_name}")
        print(f"Stage {name!r} not found at {stage_dir(name, profile)} (or made from other inputs): "
              f"building it now "
              f"(the recipe of {stage.notebook_name}: about {stage.minutes:g} min of its own on 2 idle CPU cores, more "
              f"at one thread, on a busy machine, or with a stage beneath it to build first).")
        t0 = time.time()
        build_stage(name, profile)
        print(f"Stage {name!r} built in {time.time() - t0:.0f} s.")
    model, tokenizer = load_checkpoint(stage_dir(name, profile), model_class=model_class, **kwargs)
    return model.to(profile.device), tokenizer


def load_policy_and_reference(profile: Profile, start: str = "sft_cold"):
    """``(policy, reference, tokenizer)``: a trainable copy of stage ``start`` and a frozen one.

    Both are loaded from disk (independent modules, unlike a shallow copy) and cast to
    float32, a no-op on the CPU: a stage saved in bfloat16 on the GPU would otherwise
    be trained in pure bfloat16, where Adam's small steps round to nothing, and the
    reference would compute its log-probs at another precision than the policy. The
    reference is in eval mode with gradients off. PPO (05) and DPO (06) start here.
    """
    policy, tokenizer = load_stage(start, profile)
    reference, _ = load_stage(start, profile)
    return policy.float(), reference.float().eval().requires_grad_(False), tokenizer


def build_stage(name: str, profile: Profile, recipe=None) -> Path:
    """Train stage ``name`` from its parent with ``recipe`` (default: its notebook's) and save it.

    A stage without a parent is the tiny model trained from scratch (tokenizer and
    weights); every other stage loads its parent under the stage's model class.
    """
    stage = get_stage(name)
    if is_hub_stage(name, profile):
        raise ValueError(f"stage {name!r} is the hub model {profile.model_id} on this profile; nothing to build")
    recipe = recipe_for(name, profile) if recipe is None else recipe
    seed_everything(profile.seed)
    if stage.parent is None:
        tokenizer = train_tokenizer()
        model = build_model(tokenizer, seed=profile.seed).to(profile.device)
    else:
        model, tokenizer = load_stage(stage.parent, profile, model_class=stage.model_class, **stage.model_kwargs)
    output_dir = artifacts_dir(stage.notebook_name) / profile.slug / f"{name}-trainer"
    stage.trainer(model, tokenizer, profile, recipe, output_dir).train()
    return save_stage(name, model, tokenizer, profile, recipe)
