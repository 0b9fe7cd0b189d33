"""API drift of notebook 11's GPU path, checked without a GPU (``make drift``).

These tests need the ``gpu`` extra (unsloth, vLLM) and are skipped without it, so
``make test`` reports them as skipped. ``make drift`` builds that environment on a CPU
machine and runs them: the configs the notebook builds on a GPU are built here with the
pinned versions and the ``gpu`` profile (CUDA and the device's capability answered by a
stand-in: the profile only asks; the trainers' device set-up alone runs on the CPU,
``use_cpu=True``), on Ampere and on a pre-Ampere card; TRL's vLLM generation path is
imported and its ``SamplingParams`` built from the notebook's config; unsloth's patched
``GRPOConfig`` is built in a subprocess (unsloth's own CPU test mode); and unsloth's GPU
API is checked from its source (the arguments of ``FastLanguageModel.from_pretrained``
and ``get_peft_model``), so a renamed or removed argument fails here before it fails a
learner.
"""
import ast
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from course_utils import capstone, recipes
from course_utils.run_config import get_profile, resolve_seed

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None or importlib.util.find_spec("unsloth") is None,
                                reason="needs the gpu extra (unsloth, vllm): run `make drift`")

EOS = "<|im_end|>"
ROOT = Path(__file__).resolve().parents[1]
CAPABILITIES = {"ampere": (8, 0), "turing": (7, 5)}     # bf16 from 8.0 on; a T4 is 7.5: fp16


def gpu_recipe():
    return dataclasses.replace(recipes.DEFAULTS["capstone"], **recipes.CapstoneRecipe.GPU)


def gpu_profile(monkeypatch, capability=(8, 0)):
    """``get_profile("gpu")`` as on a GPU of ``capability``: torch's answers stand in for a device."""
    with monkeypatch.context() as m:
        m.setattr(torch.cuda, "is_available", lambda: True)
        m.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
        m.delenv("COURSE_MODEL", raising=False)
        return get_profile("gpu")


def gpu_extra_pins() -> dict[str, str]:
    """The ``gpu`` extra's ``name==version`` pins, from pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^gpu = \[(.*?)^\]", text, re.S | re.M).group(1)
    return dict(re.findall(r'"([A-Za-z0-9_.-]+)==([^"]+)"', block))


def test_the_installed_gpu_extra_is_the_pinned_one_and_inside_trls_vllm_range():
    for name, version in gpu_extra_pins().items():
        assert importlib.metadata.version(name) == version, name
    from trl.import_utils import is_vllm_available
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert is_vllm_available()
    assert not [w for w in caught if "supports vLLM versions" in str(w.message)], [str(w.message) for w in caught]


def test_vllm_sampling_params_build_as_the_notebook_builds_them():
    from vllm import SamplingParams        # before any unsloth import (unsloth hides vllm on a CPU)
    params = SamplingParams(**capstone.vllm_sampling_kwargs(gpu_recipe(), 3407, EOS))
    assert (params.min_p, params.top_p, params.seed) == (0.1, 1.0, 3407)
    assert params.stop == [EOS] and params.include_stop_str_in_output
    greedy = SamplingParams(**capstone.greedy_sampling_kwargs(768, EOS))
    assert greedy.temperature == 0.0 and greedy.max_tokens == 768


@pytest.mark.parametrize("card", CAPABILITIES)
@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_grpo_config_with_vllm_builds_with_the_gpu_profile(tmp_path, monkeypatch, mode, card):
    profile = gpu_profile(monkeypatch, CAPABILITIES[card])
    args = capstone.grpo_config(gpu_recipe(), profile, tmp_path, max_completion_length=768, use_vllm=True,
                                vllm_mode=mode, use_cpu=True)
    assert args.use_vllm and args.vllm_mode == mode and args.optim.value == "adamw_8bit"
    assert args.min_p == 0.1 and args.remove_unused_columns is False and args.gradient_checkpointing
    assert args.vllm_importance_sampling_correction is False
    assert (args.bf16, args.fp16) == ((True, False) if card == "ampere" else (False, True))


def test_trls_vllm_generation_path_takes_the_notebooks_sampling(tmp_path, monkeypatch):
    # TRL 1.15's colocate generation (trl/generation/vllm_generation.py) builds SamplingParams from these config fields
    import trl.generation.vllm_generation as vllm_generation
    from vllm import SamplingParams
    assert vllm_generation.SamplingParams is SamplingParams and hasattr(vllm_generation, "LLM")
    args = capstone.grpo_config(gpu_recipe(), gpu_profile(monkeypatch), tmp_path, max_completion_length=768,
                                use_vllm=True, use_cpu=True)
    params = SamplingParams(n=1, repetition_penalty=args.repetition_penalty, temperature=args.temperature,
                            top_p=args.top_p, top_k=args.top_k, min_p=args.min_p, max_tokens=args.max_completion_length,
                            logprobs=0, **(args.generation_kwargs or {}))
    assert (params.top_k, params.min_p, params.max_tokens, params.seed) == (0, 0.1, 768, None)


@pytest.mark.parametrize("card", CAPABILITIES)
def test_priming_sft_config_builds_with_the_gpu_profile(tmp_path, monkeypatch, card):
    from trl import SFTConfig
    r = gpu_recipe()
    args = SFTConfig(output_dir=str(tmp_path), max_steps=r.prime_steps, per_device_train_batch_size=r.prime_batch_size,
                     learning_rate=r.prime_learning_rate, lr_scheduler_type="linear", warmup_steps=0.1,
                     weight_decay=r.weight_decay, optim=r.optim, max_length=1024,
                     **gpu_profile(monkeypatch, CAPABILITIES[card]).trainer_kwargs(use_cpu=True))
    assert args.optim.value == "adamw_8bit" and args.mixed_precision == ("bf16" if card == "ampere" else "fp16")


def test_lora_config_and_chat_template():
    from peft import LoraConfig
    r = gpu_recipe().lora_r
    config = LoraConfig(r=r, lora_alpha=2 * r, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                "up_proj", "down_proj"], task_type="CAUSAL_LM")
    assert config.lora_alpha == 64
    from jinja2 import Template
    text = Template(capstone.reasoning_chat_template(capstone.system_prompt())).render(
        messages=[{"role": "user", "content": "1+1?"}], eos_token=EOS, add_generation_prompt=True)
    assert text.endswith("1+1?<start_working_out>")


def test_the_bitsandbytes_plugin_is_where_unsloth_looks_for_it():
    # vLLM >= 0.28 keeps bitsandbytes out of tree; unsloth-zoo imports these two modules for load_in_4bit
    plugins = {e.name: e.value for e in importlib.metadata.entry_points(group="vllm.general_plugins")}
    assert plugins.get("bitsandbytes") == "vllm_bnb_plugin:register", plugins
    for module in ("vllm_bnb_plugin.bitsandbytes", "vllm_bnb_plugin.bitsandbytes_loader"):
        assert importlib.util.find_spec(module) is not None, module


UNSLOTH_PROBE = r"""
import unsloth                          # on a CPU this selects unsloth's CPU backend, which patches nothing
print("ok", unsloth.__version__)
"""

# unsloth's patched GRPOConfig and SFTConfig, built in unsloth's own CPU test mode (UNSLOTH_ALLOW_CPU=1: its GPU code
# path with no device), where it leaves TRL alone until asked: the probe asks for the GRPO and SFT patches itself.
UNSLOTH_CONFIG_PROBE = r"""
import dataclasses, json
from unittest import mock

import unsloth
print("IMPORTED unsloth", unsloth.__version__, flush=True)
from unsloth.models.rl import _patch_trl_rl_trainers
for trainer in ("grpo_trainer", "sft_trainer"):
    _patch_trl_rl_trainers(trainer)
import torch
import trl
from course_utils import capstone, recipes
from course_utils.run_config import get_profile, resolve_seed

recipe = dataclasses.replace(recipes.DEFAULTS["capstone"], **recipes.CapstoneRecipe.GPU)
found = {"patched": capstone.unsloth_patched(trl.GRPOConfig), "sft_patched": capstone.unsloth_patched(trl.SFTConfig)}
for card, capability in {"ampere": (8, 0), "turing": (7, 5)}.items():
    with mock.patch.object(torch.cuda, "is_available", return_value=True), \
         mock.patch.object(torch.cuda, "get_device_capability", return_value=capability):
        profile = get_profile("gpu")
    args = capstone.grpo_config(recipe, profile, "out", max_completion_length=768, use_vllm=True, use_cpu=True)
    found[card] = {k: getattr(args, k) for k in (
        "epsilon", "epsilon_high", "vllm_importance_sampling_correction", "mask_truncated_completions",
        "gradient_accumulation_steps", "loss_type", "beta", "bf16", "fp16", "top_k", "use_vllm", "vllm_mode",
        "seed", "learning_rate", "per_device_train_batch_size", "num_generations", "max_completion_length")}
    prime = trl.SFTConfig(output_dir="out", max_steps=recipe.prime_steps, learning_rate=recipe.prime_learning_rate,
                          optim=recipe.optim, max_length=1024, **profile.trainer_kwargs(use_cpu=True))
    found[card]["sft"] = {"bf16": prime.bf16, "fp16": prime.fp16, "optim": str(prime.optim.value)}
found["drift"] = capstone.api_drift(profile, "out")["GRPOConfig(max_prompt_length=256)"]
print("RESULT " + json.dumps(found))
"""


def test_unsloths_patched_grpo_config_keeps_the_recipe(tmp_path):
    env = {**os.environ, "UNSLOTH_ALLOW_CPU": "1", "UNSLOTH_DISABLE_STATISTICS": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", UNSLOTH_CONFIG_PROBE], capture_output=True, text=True, timeout=900,
                          cwd=tmp_path, env=env)      # cwd: unsloth writes its compiled trainers there
    result = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if "IMPORTED unsloth" not in done.stdout:
        pytest.skip("unsloth's GPU code path does not import in its CPU test mode (UNSLOTH_ALLOW_CPU=1) here, so its "
                    "patched config cannot be built without a GPU: " + done.stderr[-1500:])
    assert result, done.stdout[-2000:] + done.stderr[-4000:]
    found = json.loads(result[0][len("RESULT "):])
    assert found["patched"] and found["sft_patched"]
    for card, half in (("ampere", (True, False)), ("turing", (False, True))):
        args = found[card]
        # unsloth's own defaults would be 0.28, True, 2 and 3407: the recipe's values must win
        assert (args["epsilon"], args["epsilon_high"]) == (capstone.CLIP_EPSILON, capstone.CLIP_EPSILON), args
        assert args["vllm_importance_sampling_correction"] is False and args["mask_truncated_completions"] is False
        assert args["gradient_accumulation_steps"] == 1 and args["loss_type"] == "dapo" and args["beta"] == 0.0
        assert (args["bf16"], args["fp16"]) == half and (args["sft"]["bf16"], args["sft"]["fp16"]) == half
        assert args["seed"] == resolve_seed() and args["top_k"] in (0, -1)     # unsloth: 3407; vLLM's off: 0 or -1
        assert args["use_vllm"] and args["vllm_mode"] == "colocate" and args["sft"]["optim"] == "adamw_8bit"
        assert (args["per_device_train_batch_size"], args["num_generations"], args["learning_rate"]) == (
            gpu_recipe().prompts_per_step * gpu_recipe().num_generations, gpu_recipe().num_generations,
            gpu_recipe().learning_rate)
    assert found["drift"].startswith("not tried: GRPOConfig is unsloth's patched config"), found["drift"]


def _method_args(path: Path, cls: str, method: str) -> set[str]:
    """Argument names of ``cls.method`` in the source file ``path`` (the first class of that name)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    a = item.args
                    return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    raise AssertionError(f"{cls}.{method} not found in {path}")


def test_unsloth_gpu_api_takes_the_notebook_arguments():
    # Read from source: imported on a CPU, unsloth's FastLanguageModel is its CPU stand-in, which takes **kwargs and
    # would accept any name. The GPU classes are the ones the notebook calls.
    root = Path(importlib.util.find_spec("unsloth").submodule_search_locations[0])
    load = _method_args(root / "models" / "loader.py", "FastLanguageModel", "from_pretrained")
    peft = _method_args(root / "models" / "llama.py", "FastLlamaModel", "get_peft_model")
    assert {"model_name", "max_seq_length", "load_in_4bit", "fast_inference", "max_lora_rank",
            "gpu_memory_utilization", "random_state"} <= load, load
    assert {"r", "lora_alpha", "target_modules", "use_gradient_checkpointing", "random_state"} <= peft, peft
    zoo = Path(importlib.util.find_spec("unsloth_zoo").submodule_search_locations[0])
    source = "".join(p.read_text(errors="ignore") for r in (root, zoo) for p in r.rglob("*.py"))
    for name in ("def save_lora", "def load_lora", "fast_generate", "UNSLOTH_VLLM_STANDBY",
                 "UNSLOTH_VLLM_STANDBY_UTIL_OVERRIDE", "def grpo_update_SamplingParams"):
        assert name in source, name


def test_unsloth_imports_without_a_gpu():
    # a subprocess: after `import unsloth` on a CPU, `import vllm` fails on purpose
    done = subprocess.run([sys.executable, "-c", UNSLOTH_PROBE], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).parent)
    assert done.returncode == 0 and "ok" in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
