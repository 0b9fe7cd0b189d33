"""Stage checkpoints: each notebook saves one, later notebooks load it.

Stages: ``pretrain`` (01), ``sft`` (02, from pretrain), ``reward`` (03, a scalar
head on the sft backbone).

``load_stage("pretrain")`` returns ``(model, tokenizer)`` from
``artifacts/<notebook>/model``; when the checkpoint is missing it *builds* it with
the same recipe the notebook uses (and says so), so every notebook also runs on
its own on a fresh clone.

On the ``gpu`` profile the "pretrain" stage is the hub model itself: nobody
pretrains a 0.6B model in a course, so the tiny pretraining run of 01 is the
CPU path's stand-in for it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from transformers import AutoModelForCausalLM, AutoTokenizer

from . import training
from .modeling import build_model, check_safetensors_dir, save_checkpoint, train_tokenizer
from .paths import artifacts_dir
from .profile import Profile, get_profile, seed_everything


@dataclass(frozen=True)
class StageSpec:
    notebook: str            # owner of the artifacts folder
    builder: Callable        # builder(profile) -> None; saves to stage_dir(name)
    minutes: float           # rough CPU time to build, shown to the learner


STAGES: dict[str, StageSpec] = {}


def register_stage(name: str, notebook: str, builder: Callable, minutes: float) -> None:
    STAGES[name] = StageSpec(notebook, builder, minutes)


def _spec(name: str) -> StageSpec:
    if name not in STAGES:
        raise ValueError(f"unknown stage {name!r}; known stages: {sorted(STAGES)}")
    return STAGES[name]


def stage_dir(name: str) -> Path:
    """Where stage ``name`` lives: ``artifacts/<notebook>/model``."""
    return artifacts_dir(_spec(name).notebook) / "model"


def stage_exists(name: str) -> bool:
    path = stage_dir(name)
    return path.is_dir() and any(path.glob("*.safetensors"))


def load_checkpoint(path: str | Path, model_class=AutoModelForCausalLM, **kwargs):
    """Load ``(model, tokenizer)`` from a local safetensors checkpoint folder."""
    path = check_safetensors_dir(path)
    model = model_class.from_pretrained(path, use_safetensors=True, trust_remote_code=False, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    return model, tokenizer


def load_hub_model(model_id: str, profile: Profile, model_class=AutoModelForCausalLM, **kwargs):
    """GPU path: a hub model (safetensors only, no remote code) and its tokenizer."""
    model = model_class.from_pretrained(model_id, dtype=profile.dtype, use_safetensors=True,
                                        trust_remote_code=False, **kwargs).to(profile.device)
    tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=False)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def load_stage(name: str, profile: Profile | None = None, build_if_missing: bool = True,
               model_class=AutoModelForCausalLM, **kwargs):
    """``(model, tokenizer)`` of stage ``name``, building it first if it is missing.

    Args:
        name: a registered stage (``"pretrain"``, and those later notebooks add).
        profile: defaults to ``get_profile("auto")``.
        build_if_missing: if False, a missing stage raises ``FileNotFoundError``.
        model_class: e.g. ``AutoModelForSequenceClassification`` to load a backbone
            under a new head.
    """
    spec = _spec(name)
    profile = profile or get_profile("auto")
    if name == "pretrain" and not profile.is_cpu and profile.model_id:
        return load_hub_model(profile.model_id, profile, model_class=model_class, **kwargs)
    # Later stages on the GPU profile are trained from the hub model by the same builders.
    if not stage_exists(name):
        if not build_if_missing:
            raise FileNotFoundError(f"stage {name!r} not found at {stage_dir(name)}; run {spec.notebook}")
        print(f"Stage {name!r} not found at {stage_dir(name)}: building it now "
              f"(the recipe of {spec.notebook}, about {spec.minutes:g} min on 2 CPU cores).")
        t0 = time.time()
        spec.builder(profile)
        print(f"Stage {name!r} built in {time.time() - t0:.0f} s.")
    model, tokenizer = load_checkpoint(stage_dir(name), model_class=model_class, **kwargs)
    return model.to(profile.device), tokenizer


# --------------------------------------------------------------------------- builders
def build_pretrain_stage(profile: Profile, steps: int | None = None) -> None:
    """Train tokenizer and tiny Qwen3 from scratch (the recipe of 01) and save ``pretrain``."""
    seed_everything(profile.seed)
    tokenizer = train_tokenizer()
    model = build_model(tokenizer, seed=profile.seed).to(profile.device)
    steps = training.PRETRAIN_STEPS if steps is None else steps
    training.pretrain_trainer(model, tokenizer, profile, artifacts_dir("01_pretrain") / "trainer", steps).train()
    save_checkpoint(model, tokenizer, stage_dir("pretrain"))


def build_sft_stage(profile: Profile, steps: int | None = None) -> None:
    """SFT of the ``pretrain`` stage on the arithmetic chats (the recipe of 02); saves ``sft``."""
    seed_everything(profile.seed)
    model, tokenizer = load_stage("pretrain", profile)
    steps = training.SFT_STEPS if steps is None else steps
    training.sft_trainer(model, tokenizer, profile, artifacts_dir("02_sft") / "trainer", steps=steps).train()
    save_checkpoint(model, tokenizer, stage_dir("sft"))


def build_reward_stage(profile: Profile, steps: int | None = None) -> None:
    """Reward model on the ``sft`` backbone (the recipe of 03); saves ``reward``."""
    from transformers import AutoModelForSequenceClassification
    seed_everything(profile.seed)
    model, tokenizer = load_stage("sft", profile, model_class=AutoModelForSequenceClassification, num_labels=1)
    steps = training.REWARD_STEPS if steps is None else steps
    training.reward_trainer(model, tokenizer, profile, artifacts_dir("03_reward_model") / "trainer",
                            steps=steps).train()
    save_checkpoint(model, tokenizer, stage_dir("reward"))


register_stage("pretrain", "01_pretrain", build_pretrain_stage, minutes=1.2)
register_stage("sft", "02_sft", build_sft_stage, minutes=0.5)
register_stage("reward", "03_reward_model", build_reward_stage, minutes=0.5)
