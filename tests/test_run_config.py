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


def _fake_gpu(monkeypatch, capability):
    """torch answers as on a GPU of ``capability`` (nothing runs on it: get_profile only asks)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
    monkeypatch.delenv("COURSE_MODEL", raising=False)


@pytest.mark.parametrize("capability, dtype, flag", [((7, 5), torch.float32, "fp16"), ((7, 0), torch.float32, "fp16"),
                                                      ((8, 0), torch.bfloat16, "bf16"), ((9, 0), torch.bfloat16, "bf16")])
def test_gpu_precision_follows_the_device_capability(monkeypatch, capability, dtype, flag):
    # before Ampere (a T4 is 7.5) unsloth loads the model in float16 and its trainer raises on bf16=True
    _fake_gpu(monkeypatch, capability)
    prof = get_profile("gpu")
    assert prof.dtype == dtype and prof.mixed_precision == flag
    kw = prof.trainer_kwargs()
    assert (kw["fp16"], kw["bf16"]) == (flag == "fp16", flag == "bf16") and kw["gradient_checkpointing"]
    assert "use_cpu" not in kw
    assert get_profile("cpu-tiny").mixed_precision is None


def test_gpu_precision_builds_trl_configs(monkeypatch, tmp_path):
    from trl import GRPOConfig, SFTConfig
    for capability, flag in (((7, 5), "fp16"), ((8, 0), "bf16")):
        with monkeypatch.context() as m:
            _fake_gpu(m, capability)
            prof = get_profile("gpu")
        for cls in (SFTConfig, GRPOConfig):    # use_cpu: the device set-up runs here; the precision is the GPU's
            args = cls(output_dir=str(tmp_path), max_steps=1, **prof.trainer_kwargs(use_cpu=True))
            assert (args.fp16, args.bf16, args.mixed_precision) == (flag == "fp16", flag == "bf16", flag)


NVIDIA_SMI = ("| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |\n"
              "|   0  Tesla T4   Off |\n")


def _fake_old_driver(monkeypatch, built="13.0", smi=NVIDIA_SMI):
    import subprocess

    from course_utils import run_config
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", built)
    monkeypatch.setattr(run_config.shutil, "which", lambda name: None if smi is None else "/usr/bin/nvidia-smi")

    def run(cmd, **kwargs):
        out = "Tesla T4\n" if any("--query-gpu" in c for c in cmd) else smi
        return subprocess.CompletedProcess(cmd, 0, stdout=out, stderr="")
    monkeypatch.setattr(run_config.subprocess, "run", run)


def test_a_gpu_request_with_an_old_driver_fails_naming_the_driver(monkeypatch, capsys):
    _fake_old_driver(monkeypatch)
    with pytest.raises(RuntimeError) as error:
        get_profile("gpu")
    message = str(error.value)
    for part in ("needs CUDA", "CUDA 13.0", "driver >= 580", "535.104.05", "Tesla T4", "CUDA 12.2"):
        assert part in message, (part, message)
    prof = get_profile("auto")                     # auto may fall back, and says why
    assert prof.name == "cpu-tiny" and "driver >= 580" in capsys.readouterr().out


def test_the_no_gpu_reason_names_a_cpu_build_or_a_missing_driver(monkeypatch):
    from course_utils.run_config import no_cuda_reason
    _fake_old_driver(monkeypatch, built=None)
    assert "CPU-only build" in no_cuda_reason()
    _fake_old_driver(monkeypatch, built="13.0", smi=None)
    assert "driver >= 580" in no_cuda_reason() and "no NVIDIA driver" in no_cuda_reason()
    _fake_old_driver(monkeypatch, built="12.8")        # a CUDA 12 build runs on driver 535
    assert "update the driver" not in no_cuda_reason() and "yet torch sees no device" in no_cuda_reason()
