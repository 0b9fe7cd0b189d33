"""scripts/: the GPU recipes parse into the pinned TRL / transformers / accelerate classes, and each script
trains 2 steps on a CPU from a tiny model, so neither the recipes nor the scripts can rot unnoticed."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
RECIPES = SCRIPTS / "recipes"
STAGES = ("sft", "dpo", "grpo")


def _load_script(name):
    """Import scripts/<name>.py as a module (scripts/ is not a package; its files import _common)."""
    spec = importlib.util.spec_from_file_location(f"course_script_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module       # dataclasses look their module up while the class is being built
    sys.path.insert(0, str(SCRIPTS))      # only while importing: keep `sft`, `dpo`, ... off other tests' path
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module


def _parse(name, *extra, config=None):
    """Parse a recipe with the script's own parser, forced onto the CPU (works with or without a GPU)."""
    config = config or RECIPES / f"{name}_qwen3.yaml"
    return _load_script(name).make_parser().parse_args_and_config(
        ["--config", str(config), "--use_cpu", "true", "--bf16", "false", *extra])


@pytest.mark.parametrize("name", STAGES)
def test_gpu_recipe_parses_into_the_pinned_configs(name):
    """TrlParser rejects any key the pinned config classes lack: this is the API-drift check."""
    script_args, training_args, model_args = _parse(name)
    recipe = yaml.safe_load((RECIPES / f"{name}_qwen3.yaml").read_text(encoding="utf-8"))
    assert type(training_args).__name__ == f"{name.upper()}Config"
    assert model_args.model_name_or_path == "Qwen/Qwen3-0.6B" and model_args.dtype == "bfloat16"
    assert model_args.use_peft and (model_args.lora_r, model_args.lora_alpha) == (16, 32)
    assert model_args.lora_target_modules == "all-linear"        # a string: PEFT's shorthand, not a module name
    assert recipe["bf16"] and recipe["gradient_checkpointing"] and training_args.report_to == []
    assert training_args.warmup_steps == 0.1 and training_args.learning_rate == recipe["learning_rate"]
    assert script_args.dataset_name is None                     # the course's own data
    if name == "grpo":
        assert training_args.use_vllm and training_args.vllm_mode == "colocate"
        assert training_args.vllm_gpu_memory_utilization == 0.3 and training_args.num_generations == 8
        assert training_args.remove_unused_columns is False
        assert script_args.reward_funcs == ["accuracy_reward", "format_reward"]


@pytest.mark.parametrize("stale_key", ["warmup_ratio: 0.1", "max_prompt_length: 512"])
def test_a_key_the_pinned_versions_lack_is_an_error(tmp_path, stale_key):
    """Keys of older TRL / transformers recipes that the pinned versions dropped fail loudly, not silently."""
    config = tmp_path / "stale.yaml"
    config.write_text((RECIPES / "grpo_qwen3.yaml").read_text(encoding="utf-8") + stale_key + "\n")
    with pytest.raises(ValueError, match=stale_key.split(":")[0]):
        _parse("grpo", config=config)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what happens without CUDA")
def test_without_cuda_a_gpu_recipe_parses_and_falls_back_to_cpu_settings():
    common = _load_script("_common")
    script_args, training_args, model_args = common.parse(
        _load_script("grpo").make_parser(), ["--config", str(RECIPES / "grpo_qwen3.yaml")])
    assert training_args.use_cpu and training_args.bf16
    changed = common.prepare(training_args, model_args)
    assert set(changed) == {"bf16", "gradient_checkpointing", "use_vllm", "dtype"}
    assert not (training_args.bf16 or training_args.gradient_checkpointing or training_args.use_vllm)
    assert training_args.mixed_precision == "no" and model_args.dtype == "float32"


@pytest.mark.parametrize("capability, fp16", [((7, 5), True), ((8, 0), False)])
def test_on_a_gpu_before_ampere_a_bf16_recipe_trains_in_fp16(monkeypatch, capability, fp16):
    """A T4 (7.5) has no bfloat16 units: the recipes' bf16 becomes fp16 mixed precision over float32 weights there;
    from Ampere (8.0) on the recipe is left as it is."""
    common = _load_script("_common")
    _, training_args, model_args = common.parse(
        _load_script("sft").make_parser(), ["--config", str(RECIPES / "sft_qwen3.yaml")])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    dtype = model_args.dtype
    changed = common.prepare(training_args, model_args)
    assert (training_args.fp16, training_args.bf16) == (fp16, not fp16)
    assert training_args.mixed_precision == ("fp16" if fp16 else "bf16")
    assert model_args.dtype == ("float32" if fp16 and dtype in ("bfloat16", "float16", "auto") else dtype)
    assert bool(changed) == fp16


def test_grpo_rejects_unknown_rewards_and_dropped_columns():
    grpo = _load_script("grpo")
    with pytest.raises(ValueError, match=r"'nope'.*accuracy_reward.*format_reward"):
        grpo.main(*_parse("grpo", "--reward_funcs", "accuracy_reward", "nope"))
    with pytest.raises(ValueError, match="remove_unused_columns=False"):
        grpo.main(*_parse("grpo", "--remove_unused_columns", "true"))
    assert {"accuracy_reward", "format_reward", "tag_count_reward"} <= set(grpo.available_rewards())


@pytest.mark.parametrize("name, stage, zero_stage", [("ddp", "MULTI_GPU", None), ("zero2", "DEEPSPEED", 2),
                                                     ("zero3", "DEEPSPEED", 3)])
def test_accelerate_configs(name, stage, zero_stage):
    from accelerate.commands.config.config_args import ClusterConfig
    path = SCRIPTS / "accelerate" / f"{name}.yaml"
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert raw["distributed_type"] == stage and raw["num_processes"] == 8 and raw["mixed_precision"] == "bf16"
    assert raw.get("deepspeed_config", {}).get("zero_stage") == zero_stage
    ClusterConfig.from_yaml_file(path)      # what `accelerate launch` reads; it rejects unknown keys


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tokenizer):
    """A one-layer Qwen3 on the course's tokenizer, saved once for the three scripts."""
    from course_utils.modeling import build_model, save_checkpoint
    model = build_model(tokenizer, seed=0, hidden_size=32, layers=1, heads=2, kv_heads=1, intermediate_size=64)
    return save_checkpoint(model, tokenizer, tmp_path_factory.mktemp("tiny") / "model")


# Tiny sizes for a 2-step CPU run of the GPU recipes; prepare() switches off bf16, checkpointing and vLLM.
SMOKE_ARGS = ["--max_steps", "2", "--train_size", "8", "--per_device_train_batch_size", "2",
              "--gradient_accumulation_steps", "1", "--save_strategy", "no", "--logging_steps", "1",
              "--disable_tqdm", "true"]
STAGE_ARGS = {
    "sft": (["--max_length", "64"], "adapter_model.safetensors"),
    # full fine-tuning here, so the frozen reference copy and a full checkpoint are exercised too
    "dpo": (["--max_length", "64", "--use_peft", "false"], "model.safetensors"),
    "grpo": (["--num_generations", "2", "--max_completion_length", "8"], "adapter_model.safetensors"),
}


def _train_two_steps(launcher, name, tiny_model, tmp_path):
    """Run scripts/<name>.py for 2 steps under ``launcher`` (a command prefix); returns its stdout.

    Offline, one thread per process, CPU only even on a GPU machine, and temporary files (torchrun's logs,
    torch's compile cache) under tmp_path, so a run writes nothing outside it."""
    extra, weights = STAGE_ARGS[name]
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", TMPDIR=str(tmp))
    cmd = [*launcher, str(SCRIPTS / f"{name}.py"), "--config", str(RECIPES / f"{name}_qwen3.yaml"),
           "--model_name_or_path", str(tiny_model), "--output_dir", str(out), *SMOKE_ARGS, *extra]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "CPU fallback applied" in run.stdout
    assert (out / weights).is_file(), sorted(p.name for p in out.iterdir())
    return run.stdout


def _epoch(name, stdout, processes):
    """The epoch in the Trainer's end-of-training summary, checked against the rows all processes together went
    through: 2 steps x 2 rows per device x processes, of 8 rows (GRPO: of 8 prompts x 2 completions each)."""
    summary = re.search(r"^\{'train_runtime'.*'epoch': '([0-9.]+)'\}$", stdout, re.MULTILINE)
    assert summary, stdout[-3000:]
    assert float(summary.group(1)) == 2 * 2 * processes / (8 * (2 if name == "grpo" else 1))


@pytest.mark.parametrize("name", STAGES)
def test_script_trains_two_steps_on_cpu(name, tiny_model, tmp_path):
    _epoch(name, _train_two_steps([sys.executable], name, tiny_model, tmp_path), processes=1)


# Not `accelerate launch --cpu --num_processes 2`: accelerate 1.15 hands --cpu to its simple launcher, which starts
# ONE process and leaves starting the others to mpirun (--mpirun_hostfile). The DDP config's launcher, torchrun,
# starts both; the scripts' use_cpu then makes accelerate choose MULTI_CPU with gloo where a GPU run gets NCCL.
# --main_process_port 0: a free port. --tee 3 --log_dir: each process's stdout in a file of its own, since
# lines that two processes print at once can cut into each other on a shared stdout.
LAUNCH_TWO_CPU_PROCESSES = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                            str(SCRIPTS / "accelerate" / "ddp.yaml"), "--num_processes", "2",
                            "--mixed_precision", "no", "--main_process_port", "0", "--tee", "3"]


@pytest.mark.parametrize("name", ["sft", "grpo"])
def test_script_trains_two_steps_in_two_processes(name, tiny_model, tmp_path):
    """scripts/accelerate/ddp.yaml through `accelerate launch`, 2 processes on the CPU: both ranks train."""
    logs = tmp_path / "logs"
    _train_two_steps([*LAUNCH_TWO_CPU_PROCESSES, "--log_dir", str(logs)], name, tiny_model, tmp_path)
    stdout = {int(path.parent.name): path.read_text() for path in logs.rglob("stdout.log")}   # <run>/attempt_0/<rank>/
    assert sorted(stdout) == [0, 1]
    for rank, text in stdout.items():             # printed by every rank after training (scripts/_common.py)
        assert f"process {rank} of 2 (MULTI_CPU, backend gloo): 2 optimizer steps\n" in text, text[-3000:]
    assert "global batch 4 = 2 per device x 1 accumulation steps x 2 processes\n" in stdout[0]
    # the Trainer's own count, not the script's: each rank went through its own share of the rows
    _epoch(name, stdout[0], processes=2)


def test_the_grpo_script_recipe_is_07s_gpu_recipe():
    """The GPU GRPO values live in one place, GRPORecipe (GPU values applied); the script's YAML must equal them."""
    from course_utils.recipes import GRPORecipe
    gpu = {**{f: getattr(GRPORecipe(), f) for f in GRPORecipe.__dataclass_fields__}, **GRPORecipe.GPU}
    recipe = yaml.safe_load((RECIPES / "grpo_qwen3.yaml").read_text(encoding="utf-8"))
    pairs = {"learning_rate": "learning_rate", "beta": "beta", "temperature": "temperature",
             "num_generations": "num_generations", "max_completion_length": "max_completion_length",
             "max_steps": "steps", "lora_r": "lora_r", "lora_alpha": "lora_alpha", "loss_type": "loss_type",
             "scale_rewards": "scale_rewards"}
    assert {k: recipe[k] for k in pairs} == {k: gpu[v] for k, v in pairs.items()}
    completions = recipe["per_device_train_batch_size"] * recipe["gradient_accumulation_steps"]
    assert completions == gpu["prompts_per_step"] * gpu["num_generations"]


def test_the_gpu_check_parses_and_its_tiny_path_runs(tmp_path):
    """scripts/gpu_check.sh (notebook 11 on a GPU machine without internet) cannot run here; its shell parses, and
    scripts/gpu_check.py --tiny takes the same steps on a tiny Qwen3 with TRL + PEFT on the CPU."""
    import json
    for script in ("gpu_check.sh", "fetch_gpu_wheels.sh"):
        assert subprocess.run(["bash", "-n", str(SCRIPTS / script)]).returncode == 0, script
    out = tmp_path / "check.json"
    run = subprocess.run([sys.executable, str(SCRIPTS / "gpu_check.py"), "--tiny", "--prime-steps", "1",
                          "--grpo-steps", "1", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1"}, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    steps = json.loads(out.read_text())["steps"]
    assert {name: step["status"] for name, step in steps.items()} == {
        "environment": "ok", "build the model": "ok", "load (transformers + PEFT LoRA)": "ok", "priming SFT": "ok",
        "held-out measurement (vLLM)": "skipped", "GRPO": "ok", "estimate": "ok"}, steps
    assert steps["environment"]["path"] == "TRL + PEFT" and steps["environment"]["optim"] == "adamw_torch"
    assert len(steps["priming SFT"]["step_seconds"]) == 1 and len(steps["GRPO"]["step_seconds"]) == 1
    assert steps["GRPO"]["completions_per_step"] == 8 and steps["estimate"]["estimate_peak_gib"] > 0
