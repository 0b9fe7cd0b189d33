from dataclasses import fields

import pytest
import torch

from course_utils import recipes
from course_utils.run_config import Profile, get_profile

GPU = Profile(name="gpu", model_id="Qwen/Qwen3-0.6B", seed=1, device="cuda", dtype=torch.bfloat16)


def test_every_recipe_field_has_a_docstring():
    for recipe in recipes.DEFAULTS.values():
        docs = recipes.field_docs(type(recipe))
        assert {f.name for f in fields(recipe)} == set(docs), type(recipe).__name__
        assert all(len(d) > 5 for d in docs.values())


def test_recipe_for_applies_gpu_values_then_overrides():
    cpu = recipes.recipe_for("sft", get_profile("cpu-tiny"))
    gpu = recipes.recipe_for("sft", GPU)
    assert cpu == recipes.SFTRecipe() and gpu.learning_rate < cpu.learning_rate and gpu.max_length > cpu.max_length
    assert recipes.recipe_for("sft", GPU, learning_rate=1e-4).learning_rate == 1e-4
    cold = recipes.recipe_for("sft_cold", get_profile("cpu-tiny"))
    assert cold.stop_at_accuracy == recipes.COLD_START_TARGET and cold.steps == recipes.COLD_START_MAX_STEPS
    assert cold.n_examples is None and cold.steps * cold.batch_size <= 2 * 7500 and cold.schedule == "constant"  # at most two passes
    with pytest.raises(TypeError, match="no field"):
        recipes.recipe_for("sft", GPU, lr=1)
    with pytest.raises(ValueError, match="no recipe"):
        recipes.recipe_for("no_such_stage", GPU)


def test_describe_gives_each_field_one_table_row():
    # DPORecipe.beta's docstring is wrapped over two source lines: a line break would split its row
    for recipe in recipes.DEFAULTS.values():
        lines = recipes.describe(recipe).splitlines()
        start = lines.index("|---|---|---|") + 1
        rows = lines[start:lines.index("", start)]
        assert len(rows) == len(fields(recipe)), type(recipe).__name__
        assert all(r.startswith("| `") and r.endswith(" |") for r in rows), type(recipe).__name__


def test_describe_marks_changed_fields():
    text = recipes.describe(recipes.recipe_for("sft", get_profile("cpu-tiny"), steps=7))
    assert "| `steps` | `7` ✎ |" in text and "| `batch_size` | `32` |" in text and "optimizer steps" in text


def test_ppo_recipe_gpu_values_and_consistency():
    cpu = recipes.recipe_for("ppo", get_profile("cpu-tiny"))
    gpu = recipes.recipe_for("ppo", GPU)
    assert gpu.learning_rate < cpu.learning_rate and gpu.max_new_tokens > cpu.max_new_tokens
    for recipe in (cpu, gpu):
        assert recipe.rollouts_per_step % recipe.samples_per_prompt == 0
        assert recipe.rollouts_per_step % recipe.minibatch_size == 0 and recipe.kl_estimator in ("k1", "k2", "k3")


def _config_folder(folder, hidden: int):
    """A folder holding only a Llama config (the learning-rate rule counts parameters from the config alone)."""
    from transformers import LlamaConfig
    LlamaConfig(vocab_size=1000, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2).save_pretrained(folder)
    return str(folder)


def test_your_own_model_on_a_cpu_takes_the_gpu_learning_rates_and_the_cpu_sizes(tmp_path):
    from dataclasses import replace
    from course_utils.adapt import SMALL_MODEL_PARAMETERS, parameter_count
    folder = _config_folder(tmp_path / "mine", hidden=512)     # 13.6M parameters: a model of real size
    assert parameter_count(folder) > SMALL_MODEL_PARAMETERS
    own = replace(get_profile("cpu-tiny"), model_id=folder)
    for stage in ("sft", "dpo", "grpo"):
        cpu, mine, gpu = (recipes.recipe_for(stage, p) for p in (get_profile("cpu-tiny"), own, GPU))
        assert mine.learning_rate == gpu.learning_rate != cpu.learning_rate, stage
        changed = {f.name for f in fields(mine) if getattr(mine, f.name) != getattr(cpu, f.name)}
        assert changed and all(name.endswith("learning_rate") for name in changed), (stage, changed)


def test_your_own_model_as_small_as_the_courses_keeps_the_cpu_recipes(tmp_path):
    from dataclasses import replace
    from course_utils.adapt import SMALL_MODEL_PARAMETERS, parameter_count
    folder = _config_folder(tmp_path / "tiny", hidden=96)      # the course model's width
    assert parameter_count(folder) <= SMALL_MODEL_PARAMETERS
    own = replace(get_profile("cpu-tiny"), model_id=folder)
    for stage in ("sft", "dpo", "grpo", "ppo"):
        assert recipes.recipe_for(stage, own) == recipes.recipe_for(stage, get_profile("cpu-tiny")), stage


def test_a_model_without_a_config_is_refused_clearly(tmp_path):
    from dataclasses import replace
    from course_utils.adapt import AdaptationError
    own = replace(get_profile("cpu-tiny"), model_id=str(tmp_path / "nothing-here"))
    with pytest.raises(AdaptationError, match="cannot read a config"):
        recipes.recipe_for("sft", own)
