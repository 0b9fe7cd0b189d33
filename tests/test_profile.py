import pytest
import torch

from course_utils.run_config import DEFAULT_SEED, get_profile, resolve_seed


def test_auto_resolves_to_cpu_without_cuda():
    prof = get_profile("auto")
    assert prof.name == ("gpu" if torch.cuda.is_available() else "cpu-tiny")


def test_unknown_profile_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown profile 'tpu'"):
        get_profile("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without CUDA")
def test_gpu_profile_without_cuda_explains():
    with pytest.raises(RuntimeError, match="needs CUDA"):
        get_profile("gpu")


def test_seed_from_env(monkeypatch):
    monkeypatch.delenv("COURSE_SEED", raising=False)
    assert resolve_seed() == DEFAULT_SEED
    monkeypatch.setenv("COURSE_SEED", "7")
    assert get_profile("cpu-tiny").seed == 7
    assert get_profile("cpu-tiny", seed=3).seed == 3
    monkeypatch.setenv("COURSE_SEED", "seven")
    with pytest.raises(ValueError, match="COURSE_SEED"):
        resolve_seed()


def test_cpu_trainer_kwargs_are_cpu_safe():
    kw = get_profile("cpu-tiny").trainer_kwargs(learning_rate=1e-3)
    assert kw["bf16"] is False and kw["gradient_checkpointing"] is False
    assert kw["dataloader_pin_memory"] is False and kw["report_to"] == "none"
    assert kw["learning_rate"] == 1e-3


def test_cpu_trainer_kwargs_build_real_configs(tmp_path):
    from transformers import TrainingArguments
    from trl import GRPOConfig, RewardConfig, SFTConfig
    prof = get_profile("cpu-tiny")
    for cls in (TrainingArguments, SFTConfig, RewardConfig, GRPOConfig):
        args = cls(output_dir=str(tmp_path), **prof.trainer_kwargs(max_steps=1))
        assert not args.bf16 and not args.gradient_checkpointing


def test_a_model_that_is_not_there_is_named_in_the_error(tmp_path, monkeypatch):
    from course_utils.adapt import AdaptationError
    with pytest.raises(AdaptationError, match="cannot load a tokenizer for the model"):
        get_profile("cpu-tiny", model_id=str(tmp_path / "missing"))
    monkeypatch.setenv("COURSE_MODEL", str(tmp_path / "missing"))
    with pytest.raises(AdaptationError, match="missing"):
        get_profile("cpu-tiny")
    monkeypatch.setenv("COURSE_MODEL", "")
    assert get_profile("cpu-tiny").model_id is None
