"""Tests of course_utils.course's environment report (notebook 00, Step 1)."""
import dataclasses

from course_utils import course, environment
from course_utils.run_config import get_profile

RECORD = {"python": "3.11.7", "packages": {"torch": "2.13.0+cpu", "trl": "1.15.0"}, "cpu": "Some CPU",
          "cpu_capability": "AVX2", "cpu_count": 4, "torch_threads": 2, "cuda": None, "platform": "Linux-x",
          "commit": "abc123"}


def test_the_report_names_machine_versions_profile_and_folders():
    profile = get_profile("cpu-tiny", seed=7)
    lines = environment.environment_report(profile, RECORD).splitlines()
    assert len(lines) == 5
    assert lines[0].startswith("machine: Some CPU (AVX2, 2 torch threads of 4 cores)") and "Linux-x" in lines[0]
    assert lines[1] == "python 3.11.7; torch 2.13.0+cpu, trl 1.15.0"
    assert lines[2] == "commit: abc123"
    assert "seed: 7" in lines[3] and "the course tiny Qwen3" in lines[3] and "device: cpu" in lines[3]
    assert lines[4].endswith("stage folders: <notebook>/cpu-tiny/<stage>")


def test_the_report_shows_a_gpu_and_a_hub_model_with_their_slug():
    profile = dataclasses.replace(get_profile("cpu-tiny"), name="gpu", model_id="Qwen/Qwen3-0.6B", device="cuda")
    text = environment.environment_report(profile, {**RECORD, "cuda": "NVIDIA H200"})
    assert text.startswith("machine: NVIDIA H200") and "Some CPU" not in text
    assert "model: Qwen/Qwen3-0.6B" in text and "<notebook>/gpu-Qwen--Qwen3-0.6B/<stage>" in text


def test_the_default_record_is_this_process():
    text = environment.environment_report(get_profile("cpu-tiny"))
    import torch
    assert f"torch {torch.__version__}" in text and torch.backends.cpu.get_cpu_capability() in text
