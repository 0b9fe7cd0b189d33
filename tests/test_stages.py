import pytest

from course_utils import stages
from course_utils.profile import get_profile


def test_unknown_stage_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown stage 'ppo-final'"):
        stages.load_stage("ppo-final")


def test_missing_stage_without_build_raises(tmp_artifacts):
    with pytest.raises(FileNotFoundError, match="01_pretrain"):
        stages.load_stage("pretrain", get_profile("cpu-tiny"), build_if_missing=False)


def test_missing_stage_is_built_then_loaded(tmp_artifacts, monkeypatch, capsys):
    monkeypatch.setattr(stages.training, "PRETRAIN_STEPS", 5)  # the recipe, shortened
    prof = get_profile("cpu-tiny")
    model, tok = stages.load_stage("pretrain", prof)
    assert "building it now" in capsys.readouterr().out
    assert (tmp_artifacts / "01_pretrain" / "model" / "model.safetensors").exists()
    again, _ = stages.load_stage("pretrain", prof)
    assert "building" not in capsys.readouterr().out
    assert type(again).__name__ == "Qwen3ForCausalLM" and len(tok) == again.config.vocab_size
