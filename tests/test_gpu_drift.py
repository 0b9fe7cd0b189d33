"""API drift of notebook 11's GPU path, checked without a GPU (``make drift``).

These tests need the ``gpu`` extra (unsloth, vLLM) and are skipped without it, so
``make test`` reports them as skipped. ``make drift`` builds that environment on a CPU
machine and runs them: every config object the notebook builds on a GPU is built here
with the pinned versions, and unsloth's GPU API is checked from its source (the
arguments of ``FastLanguageModel.from_pretrained`` and ``get_peft_model``), so a renamed or
removed argument fails here before it fails a learner.
"""
import ast
import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils import capstone, recipes
from course_utils.run_config import get_profile

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None or importlib.util.find_spec("unsloth") is None,
                                reason="needs the gpu extra (unsloth, vllm): run `make drift`")

EOS = "<|im_end|>"


def gpu_recipe():
    return dataclasses.replace(recipes.DEFAULTS["capstone"], **recipes.CapstoneRecipe.GPU)


def test_vllm_sampling_params_build_as_the_notebook_builds_them():
    from vllm import SamplingParams        # before any unsloth import (unsloth hides vllm on a CPU)
    params = SamplingParams(**capstone.vllm_sampling_kwargs(gpu_recipe(), 3407, EOS))
    assert (params.min_p, params.top_p, params.seed) == (0.1, 1.0, 3407)
    assert params.stop == [EOS] and params.include_stop_str_in_output
    greedy = SamplingParams(temperature=0.0, max_tokens=768, stop=[EOS])
    assert greedy.temperature == 0.0 and greedy.max_tokens == 768


@pytest.mark.parametrize("mode", ["colocate", "server"])
def test_grpo_config_with_vllm_builds_with_the_gpu_recipe(tmp_path, mode):
    profile = get_profile("cpu-tiny")      # no CUDA here: the profile's CPU switches, the GPU recipe's values
    args = capstone.grpo_config(gpu_recipe(), profile, tmp_path, max_completion_length=768, use_vllm=True,
                                vllm_mode=mode)
    assert args.use_vllm and args.vllm_mode == mode and args.optim.value == "adamw_8bit"
    assert args.min_p == 0.1 and args.remove_unused_columns is False


def test_priming_sft_config_builds_with_the_gpu_recipe(tmp_path):
    from trl import SFTConfig
    r = gpu_recipe()
    args = SFTConfig(output_dir=str(tmp_path), max_steps=r.prime_steps, per_device_train_batch_size=r.prime_batch_size,
                     learning_rate=r.prime_learning_rate, lr_scheduler_type="linear", warmup_steps=0.1,
                     weight_decay=r.weight_decay, optim=r.optim, max_length=1024,
                     **get_profile("cpu-tiny").trainer_kwargs())
    assert args.optim.value == "adamw_8bit"


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


UNSLOTH_PROBE = r"""
import unsloth                          # on a CPU this selects unsloth's CPU backend, which patches nothing
print("ok", unsloth.__version__)
"""


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
                 "UNSLOTH_VLLM_STANDBY_UTIL_OVERRIDE"):
        assert name in source, name


def test_unsloth_imports_without_a_gpu():
    # a subprocess: after `import unsloth` on a CPU, `import vllm` fails on purpose
    done = subprocess.run([sys.executable, "-c", UNSLOTH_PROBE], capture_output=True, text=True, timeout=600,
                          cwd=Path(__file__).parent)
    assert done.returncode == 0 and "ok" in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
