"""The model matrix: the smoke scale, the family models, and the part of `make matrix` that CI runs.

`make matrix` runs notebooks 02-13 on both families (tens of minutes on 2 cores); `make test` runs the two
cells of it in ``CI_CELLS`` (one per family, chosen for the branches only another family exercises).
"""
from dataclasses import dataclass

import pytest

from course_utils import experiment, modeling, recipes
from course_tools import matrix
from course_utils.run_config import get_profile, resolve_scale

# 08: SFT, GRPOTrainer with a LoRA and rejection sampling on a Llama; 03: a GPT-2 sequence classifier that finds the
# last non-pad token from pad_token_id (the matrix found 03 scoring a pad there, from a left-padding reload)
CI_CELLS = (("llama", "08"), ("gpt2", "03"))


def test_the_smoke_scale_cuts_every_recipe_and_never_asserts(monkeypatch):
    monkeypatch.setenv("COURSE_SCALE", "smoke")
    profile = get_profile("cpu-tiny")
    assert profile.scale == "smoke" and profile.eval_size == 200
    for stage, default in recipes.DEFAULTS.items():
        cut = recipes.recipe_for(stage, profile)
        for field, cap in type(default).SMOKE.items():
            assert getattr(cut, field) <= cap, (stage, field)
        assert any("steps" in f for f in type(default).SMOKE), stage
    # a notebook's own longer run is cut too, and its other overrides stay
    grpo = recipes.recipe_for("grpo", profile, steps=500, loss_type="dr_grpo")
    assert grpo.steps == 2 and grpo.loss_type == "dr_grpo"

    @dataclass
    class Params:
        seed: int | None = None

    assert not experiment.calibrated(Params(), Params, profile)
    assert "the smoke scale" in experiment.not_checked(Params(), Params, profile)
    monkeypatch.setenv("COURSE_SCALE", "full")
    assert experiment.calibrated(Params(), Params, get_profile("cpu-tiny"))


def test_an_unknown_scale_is_an_error(monkeypatch):
    monkeypatch.setenv("COURSE_SCALE", "tiny")
    with pytest.raises(ValueError, match="unknown scale 'tiny'"):
        resolve_scale()


@pytest.mark.parametrize("family", modeling.FAMILIES)
def test_the_family_models_lack_what_the_adapter_adds(family, tmp_path):
    model, tokenizer = modeling.family_model(family)
    assert tokenizer.pad_token is None and tokenizer.chat_template is None
    assert len(tokenizer("<think>", add_special_tokens=False)["input_ids"]) > 1
    assert type(model).__name__ == {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel"}[family]
    folder = modeling.save_family_model(family, tmp_path / family)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert modeling.save_family_model(family, folder) == folder                    # built once
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


def test_the_matrix_table():
    cells = [matrix.Cell("llama", "02_sft", True, 80.4), matrix.Cell("gpt2", "02_sft", False, 12.0, "boom"),
             matrix.Cell("llama", "03_reward_model", True, 20.0)]
    assert matrix.matrix_markdown(cells).splitlines() == [
        "| notebook | llama | gpt2 |", "|---|---|---|", "| 02_sft | ok, 80 s | FAILED, 12 s |",
        "| 03_reward_model | ok, 20 s |  |"]


@pytest.mark.parametrize("family, number", CI_CELLS)
def test_a_notebook_runs_on_another_family(family, number, tmp_path):
    cell = matrix.run_cell(family, number, tmp_path)
    assert cell.ok, cell.why
