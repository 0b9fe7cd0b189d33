"""The stage table: keyed by profile and base model, one generic builder, rebuilt when missing."""
import json
from dataclasses import replace

import pytest
import torch

from course_utils import recipes, stages
from course_utils.course import NOTEBOOKS
from course_utils.run_config import Profile, get_profile

# Profiles built directly: no GPU is needed to check where a GPU run would look.
GPU_06B = Profile(name="gpu", model_id="Qwen/Qwen3-0.6B", seed=1234, device="cuda", dtype=torch.bfloat16)
GPU_17B = replace(GPU_06B, model_id="Qwen/Qwen3-1.7B")


def _tiny_recipe(name, profile):
    return recipes.recipe_for(name, profile, steps=2)


@pytest.fixture
def tiny_recipes(monkeypatch):
    """Every stage's default recipe, shortened to 2 steps (the recipe, not the code, changes)."""
    monkeypatch.setattr(stages, "recipe_for", _tiny_recipe)


def test_unknown_stage_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown stage 'ppo-final'"):
        stages.load_stage("ppo-final", get_profile("cpu-tiny"))


def test_stage_table_names_existing_notebooks_and_parents():
    numbers = {nb.number for nb in NOTEBOOKS}
    for stage in stages.STAGES.values():
        assert stage.notebook in numbers and stage.notebook_name.startswith(stage.notebook + "_")
        assert stage.parent is None or stage.parent in stages.STAGES
        assert stage.name in recipes.DEFAULTS


def test_missing_stage_without_build_raises(tmp_artifacts):
    with pytest.raises(FileNotFoundError, match="01_pretrain"):
        stages.load_stage("pretrain", get_profile("cpu-tiny"), build_if_missing=False)


def test_stage_folders_differ_by_profile_and_model(tmp_artifacts):
    cpu = get_profile("cpu-tiny")
    dirs = {stages.stage_dir("sft", p) for p in (cpu, GPU_06B, GPU_17B)}
    assert len(dirs) == 3
    assert stages.stage_dir("sft", cpu) == tmp_artifacts / "02_sft" / "cpu-tiny" / "sft"
    assert stages.stage_dir("sft", GPU_06B).parent.name == "gpu-Qwen--Qwen3-0.6B"
    local_a, local_b = replace(GPU_06B, model_id="/models/a/model"), replace(GPU_06B, model_id="/models/b/model")
    assert local_a.slug != local_b.slug and local_a.slug.startswith("gpu-model-")


def test_gpu_profile_never_gets_a_cpu_checkpoint(tmp_artifacts, tiny_recipes, monkeypatch):
    cpu = get_profile("cpu-tiny")
    stages.build_stage("pretrain", cpu)
    stages.build_stage("sft", cpu)
    assert stages.stage_exists("sft", cpu)
    for gpu in (GPU_06B, GPU_17B):
        assert not stages.stage_exists("sft", gpu)
        with pytest.raises(FileNotFoundError, match="gpu-Qwen--Qwen3"):
            stages.load_stage("sft", gpu, build_if_missing=False)
    # the pretrain stage of a hub profile is the hub model itself, never the tiny checkpoint
    calls = []
    monkeypatch.setattr(stages, "load_hub_model", lambda model_id, profile, **kw: calls.append(model_id) or "hub")
    assert stages.load_stage("pretrain", GPU_06B) == "hub" and calls == ["Qwen/Qwen3-0.6B"]
    with pytest.raises(ValueError, match="hub model"):
        stages.build_stage("pretrain", GPU_06B)


def test_missing_stages_are_built_from_their_parents_then_loaded(tmp_artifacts, tiny_recipes, capsys):
    prof = get_profile("cpu-tiny")
    model, tok = stages.load_stage("reward", prof)  # builds pretrain, then sft, then reward
    out = capsys.readouterr().out
    assert all(f"Stage {name!r} not found" in out for name in ("pretrain", "sft", "reward"))
    assert type(model).__name__ == "Qwen3ForSequenceClassification" and model.config.num_labels == 1
    for name in ("pretrain", "sft", "reward"):
        path = stages.stage_dir(name, prof)
        assert (path / "model.safetensors").exists()
        info = json.loads((path / "stage.json").read_text())
        assert info["profile"] == "cpu-tiny" and info["recipe"]["steps"] == 2
    again, _ = stages.load_stage("reward", prof)
    assert "building" not in capsys.readouterr().out
    assert torch.equal(again.score.weight, model.score.weight)


def test_sft_cold_stops_at_its_target_accuracy(tmp_artifacts, tiny_recipes, monkeypatch):
    """The cold start streams the chats and stops at the first check that reaches the target."""
    seen = {}
    real = stages.training.sft_trainer

    def spy(model, tokenizer, profile, recipe, output_dir):
        trainer = real(model, tokenizer, profile, recipe, output_dir)
        seen["trainer"] = trainer
        return trainer
    monkeypatch.setitem(stages.STAGES, "sft_cold", replace(stages.STAGES["sft_cold"], trainer=spy))
    # scripted accuracies at the checks of steps 0, 2, 4, 6: the target 0.3 is first reached at step 4
    scripted = iter([0.1, 0.2, 0.35, 0.5])
    monkeypatch.setattr(stages.training, "evaluate_arithmetic", lambda *a, **k: {"accuracy": next(scripted)})
    prof = get_profile("cpu-tiny")
    stages.build_stage("sft_cold", prof, recipes.recipe_for("sft_cold", prof, steps=6, check_every=2,
                                                            stop_at_accuracy=0.3))
    callback = next(c for c in seen["trainer"].callback_handler.callbacks
                    if isinstance(c, stages.training.AccuracyCallback))
    assert callback.stopped_at == 4 and seen["trainer"].state.global_step == 4
    assert callback.curve == [(0, 0.1), (2, 0.2), (4, 0.35)]
    assert len(seen["trainer"].train_dataset) == 7500  # streams all chats; the target decides how many are seen


def test_a_stage_is_never_reused_for_other_inputs(tmp_artifacts, tiny_recipes, monkeypatch):
    """Another seed, another recipe or a rebuilt parent makes a saved stage stale; load_stage rebuilds it."""
    prof = get_profile("cpu-tiny", seed=1234)
    stages.build_stage("pretrain", prof)
    stages.build_stage("sft", prof)
    assert stages.stage_exists("sft", prof)
    info = json.loads((stages.stage_dir("sft", prof) / "stage.json").read_text())
    assert info["seed"] == 1234 and info["parent"]["stage"] == "pretrain" and info["parent"]["seed"] == 1234
    assert not stages.stage_exists("sft", replace(prof, seed=7))                     # same folder, other seed
    monkeypatch.setattr(stages, "recipe_for", lambda name, profile: recipes.recipe_for(name, profile, steps=3))
    assert not stages.stage_exists("sft", prof)                                        # other recipe
    monkeypatch.setattr(stages, "recipe_for", _tiny_recipe)
    stages.save_stage("pretrain", *stages.load_stage("pretrain", prof), prof,
                      recipes.recipe_for("pretrain", prof, steps=5))                   # the parent remade otherwise
    assert not stages.stage_exists("pretrain", prof)
    assert stages.stage_exists("sft", prof)               # still the child of the default parent, as recorded
    stages.save_stage("sft", *stages.load_stage("sft", prof, build_if_missing=False), prof)
    assert not stages.stage_exists("sft", prof)           # saved on top of the other parent: recorded, not reused
    (stages.stage_dir("pretrain", prof) / "stage.json").unlink()                       # no record: not trusted
    assert not stages.stage_exists("pretrain", prof)


def test_a_stage_of_another_model_shape_is_rebuilt(tmp_artifacts, tiny_recipes, monkeypatch):
    """A checkpoint saved under another default of the course model's shape (say head_dim 32 against today's) is
    stale, and so is every stage trained from it."""
    prof = get_profile("cpu-tiny", seed=1234)
    stages.build_stage("pretrain", prof)
    stages.build_stage("sft", prof)
    from course_utils import modeling
    info = json.loads((stages.stage_dir("pretrain", prof) / "stage.json").read_text())
    assert info["model"] == modeling.course_model_shape()
    assert stages.stage_exists("pretrain", prof) and stages.stage_exists("sft", prof)
    monkeypatch.setattr(stages, "course_model_shape", lambda: {**modeling.course_model_shape(), "head_dim": 32})
    assert not stages.stage_exists("pretrain", prof) and not stages.stage_exists("sft", prof)
