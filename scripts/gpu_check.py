"""Notebook 11's unsloth path on one GPU, offline and in one shot: a random-initialised Qwen3-0.6B built from its
config, through the notebook's steps as far as the installed packages allow, with step time and peak memory.

The GPU machine has no internet: nothing is downloaded. The model is Qwen3-0.6B's architecture with random weights
(``memory.qwen3_config``), saved as safetensors with the course's own tokenizer (trained from data/ in seconds) so
that unsloth loads it from a folder as it would a hub model; the data are the course's arithmetic problems in the
seed's tags. A random model writes no EOS, so every completion runs to the length limit: the worst case for memory
and time. Nothing measured here is a result about learning.

The steps, each recorded (``ok``, ``skipped`` with the reason, or the error) and timed, and the JSON rewritten after
each, so a run cut short keeps what it measured:

1. ``import unsloth`` first (before transformers, TRL and PEFT, as the notebook does); the versions, the device, its
   compute capability and the ``gpu`` profile's precision (bf16 from Ampere on, fp16 before);
2. ``FastLanguageModel.from_pretrained`` (``fast_inference=True`` where vLLM is installed, with vLLM's share of the
   memory) and ``get_peft_model`` with the notebook's LoRA;
3. the priming SFT (``SFTTrainer``, the profile's trainer arguments: the precision check unsloth's trainer makes);
4. with vLLM, the held-out measurement through ``fast_generate`` and a ``lora_request`` (section 5 of 11);
5. GRPO (``capstone.grpo_config``, ``GRPOTrainer`` with the seed's rewards), a few steps.

Without unsloth (or with ``--plain``) steps 2-5 run on TRL + PEFT, as the notebook's CPU path does, so the script
still measures. Without bitsandbytes the optimizer is ``adamw_torch`` instead of the recipe's ``adamw_8bit``; without
vLLM generation is transformers' ``generate``: each is said in the record.

    bash scripts/gpu_check.sh                  # on the GPU machine: installs the carried wheels, runs this
    python scripts/gpu_check.py --tiny --out /tmp/check.json    # on a CPU: a tiny Qwen3, TRL + PEFT, same code
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))                       # course_utils without installing it
GIB = 2 ** 30
MODEL_ID = "Qwen/Qwen3-0.6B"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PACKAGES = ("torch", "transformers", "peft", "accelerate", "trl", "datasets", "unsloth", "unsloth_zoo", "vllm",
            "vllm-bnb-plugin", "bitsandbytes", "triton", "xformers")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny Qwen3 on the CPU with TRL + PEFT (tests the script)")
    parser.add_argument("--plain", action="store_true", help="TRL + PEFT on the GPU, without unsloth")
    parser.add_argument("--site", default=None, help="a folder of carried packages, searched after the installed ones")
    parser.add_argument("--out", default=str(ROOT / "results" / "gpu" / "gpu_check.json"), help="the JSON written")
    parser.add_argument("--prime-steps", type=int, default=5)
    parser.add_argument("--grpo-steps", type=int, default=3)
    parser.add_argument("--eval-problems", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=1024, help="11's Params.max_seq_length")
    parser.add_argument("--max-completion", type=int, default=None,
                        help="GRPO's completion budget (default: the GPU recipe's; --tiny: 8)")
    return parser.parse_args(argv)


def version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


class Record:
    """The JSON record: one entry per step, rewritten to ``out`` after each."""

    def __init__(self, out: Path):
        self.out, self.data, self.t0 = out, {"steps": {}}, time.perf_counter()

    def step(self, name: str, run):
        """Run ``run()`` (a dict of findings, or raises :class:`Skip`) and record its outcome and seconds."""
        start = time.perf_counter()
        try:
            result = {"status": "ok", **(run() or {})}
        except Skip as why:
            result = {"status": "skipped", "why": str(why)}
        except Exception as error:       # a finding, not a crash: record it, the later steps say what still runs
            result = {"status": "error", "error": f"{type(error).__name__}: {error}"[:2000],
                      "traceback": traceback.format_exc()[-4000:]}
        result["seconds"] = time.perf_counter() - start
        result.update(memory_now())
        self.data["steps"][name] = result
        shown = {k: v for k, v in result.items() if k != "traceback" and not isinstance(v, (dict, list))}
        print(f"[{name}] " + json.dumps(shown, default=str), flush=True)
        self.write()
        return result

    def write(self):
        self.data["wall_seconds"] = time.perf_counter() - self.t0
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.data, indent=2, default=str) + "\n", encoding="utf-8")


class Skip(Exception):
    """A step that cannot run here, and why."""


def memory_now() -> dict:
    import torch
    if not torch.cuda.is_available():
        return {}
    free, total = torch.cuda.mem_get_info()
    return {"peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
            "peak_reserved_gib": torch.cuda.max_memory_reserved() / GIB, "device_used_gib": (total - free) / GIB}


def reset_peak():
    import gc

    import torch
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


class Check:
    """What the steps share: the profile, recipe, tokenizer, model and the paths."""

    def __init__(self, args, unsloth_error: str | None):
        from course_utils import capstone, recipes, rewards
        from course_utils.run_config import get_profile
        self.args = args
        self.unsloth = None if (args.tiny or args.plain or unsloth_error) else sys.modules.get("unsloth")
        self.profile = get_profile("cpu-tiny" if args.tiny else "gpu")
        gpu_profile = self.profile if not args.tiny else _gpu_profile_for_recipes()
        self.recipe = recipes.recipe_for("capstone", gpu_profile)
        self.has_vllm = self.unsloth is not None and importlib.util.find_spec("vllm") is not None
        self.has_bnb = importlib.util.find_spec("bitsandbytes") is not None and not args.tiny
        self.optim = self.recipe.optim if self.has_bnb else "adamw_torch"
        self.tags = rewards.SEED_TAGS
        self.system = capstone.system_prompt(self.tags)
        self.work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
        self.model = self.tokenizer = None
        self.max_completion = args.max_completion or (8 if args.tiny else self.recipe.max_completion_length)
        self.max_seq_length = 256 if args.tiny else args.max_seq_length     # tiny: its positions; prompts are ~180


def _gpu_profile_for_recipes():
    from course_utils.memory import gpu_profile
    return gpu_profile(MODEL_ID)


# --------------------------------------------------------------------------------------------------- the steps
def environment(check: Check, unsloth_error: str | None) -> dict:
    import torch

    from course_utils.run_config import nvidia_smi
    out = {"versions": {name: version(name) for name in PACKAGES}, "python": sys.version.split()[0],
           "torch_cuda_build": torch.version.cuda, "nvidia_smi": nvidia_smi(), "profile": check.profile.name,
           "dtype": str(check.profile.dtype), "mixed_precision": check.profile.mixed_precision,
           "path": "unsloth" if check.unsloth else "TRL + PEFT", "unsloth_import_error": unsloth_error,
           "vllm": check.has_vllm, "optim": check.optim}
    if torch.cuda.is_available():
        out.update(device=torch.cuda.get_device_name(0), capability=list(torch.cuda.get_device_capability(0)),
                   total_gib=torch.cuda.get_device_properties(0).total_memory / GIB)
    return out


def build_model(check: Check) -> dict:
    """A random Qwen3 saved as a hub model would be: safetensors and a tokenizer in a folder."""
    import torch
    from transformers import Qwen3ForCausalLM

    from course_utils import memory, modeling
    tok = modeling.train_tokenizer()
    ids = dict(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    config = modeling.tiny_qwen3_config(len(tok), **ids) if check.args.tiny else memory.qwen3_config(MODEL_ID, **ids)
    torch.manual_seed(check.profile.seed)
    model = Qwen3ForCausalLM(config).to(torch.float32 if check.args.tiny else torch.bfloat16)   # as the hub ships it
    folder = check.work / "model"
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    check.folder = folder
    return {"parameters": sum(p.numel() for p in model.parameters()), "folder": str(folder),
            "vocab_size": config.vocab_size, "tokenizer_size": len(tok)}


def load_model(check: Check) -> dict:
    """11's section 1: unsloth's FastLanguageModel with vLLM inside where installed, and its LoRA; else PEFT."""
    from course_utils import capstone
    r = check.recipe.lora_r
    reset_peak()
    out = {}
    if check.unsloth:
        from unsloth import FastLanguageModel
        model, tokenizer = FastLanguageModel.from_pretrained(
            model_name=str(check.folder), max_seq_length=check.max_seq_length, load_in_4bit=False,
            fast_inference=check.has_vllm, max_lora_rank=r, gpu_memory_utilization=0.6, local_files_only=True)
        if check.has_vllm:
            cache = getattr(getattr(getattr(model.vllm_engine, "llm_engine", None), "vllm_config", None),
                            "cache_config", None)
            out["vllm_gpu_memory_utilization"] = getattr(cache, "gpu_memory_utilization", None)
        out["loaded_dtype"] = str(next(model.parameters()).dtype)
        model = FastLanguageModel.get_peft_model(model, r=r, lora_alpha=2 * r, target_modules=LORA_TARGETS,
                                                 use_gradient_checkpointing="unsloth", random_state=check.profile.seed)
    else:
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(check.folder)
        model = AutoModelForCausalLM.from_pretrained(check.folder, dtype=check.profile.dtype).to(check.profile.device)
        out["loaded_dtype"] = str(check.profile.dtype)
        model = get_peft_model(model, LoraConfig(r=r, lora_alpha=2 * r, target_modules=LORA_TARGETS,
                                                 task_type="CAUSAL_LM"))
    tokenizer.chat_template = capstone.reasoning_chat_template(check.system, check.tags)
    check.model, check.tokenizer = model, tokenizer
    out["trainable_parameters"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
    out["model_class"] = type(model).__name__
    return out


def timed_training(trainer) -> dict:
    """Train with a step timer from a fresh peak: step seconds and the peak memory of the training alone."""
    import torch
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    from gpu_memory_check import StepTimer, summary     # the memory check's timer and step summary
    timer = StepTimer(torch.device(trainer.args.device))
    trainer.add_callback(timer)
    reset_peak()
    trainer.train()
    tokens = [h["num_tokens"] for h in trainer.state.log_history if "num_tokens" in h]
    per_step = [t - (tokens[i - 1] if i else 0) for i, t in enumerate(tokens)] or [0.0] * len(timer.seconds)
    return summary(timer.seconds, per_step) if timer.seconds else {}


def prime(check: Check) -> dict:
    """11's section 4: the format-priming SFT with the profile's trainer arguments (fp16 or bf16 by the device)."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from course_utils import capstone, data
    from course_utils.compat import install_trl_cpu_fallback
    if check.model is None:
        raise Skip("no model: the load failed")
    install_trl_cpu_fallback()
    r = check.recipe
    rows = capstone.priming_rows(data.load_jsonl("arithmetic", "train")[:r.prime_problems], check.system, check.tags)
    args = SFTConfig(output_dir=str(check.work / "prime"), max_steps=check.args.prime_steps,
                     per_device_train_batch_size=r.prime_batch_size, learning_rate=r.prime_learning_rate,
                     lr_scheduler_type="linear", warmup_steps=0.1, weight_decay=r.weight_decay, optim=check.optim,
                     logging_steps=1, max_length=check.max_seq_length, **check.profile.trainer_kwargs())
    trainer = SFTTrainer(model=check.model, args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=check.tokenizer)
    return {"bf16": args.bf16, "fp16": args.fp16, "optim": getattr(args.optim, "value", args.optim),
            **timed_training(trainer)}


def evaluate(check: Check) -> dict:
    """11's section 5 on the GPU path: greedy answers through vLLM with the adapter as a lora_request."""
    from course_utils import capstone, evaluation
    if not check.has_vllm:
        raise Skip("vLLM is not installed here: the notebook measures through unsloth's vLLM engine")
    problems = evaluation.heldout_problems("test", max(200, check.args.eval_problems))[:check.args.eval_problems]
    lora = check.work / "primed_lora"
    check.model.save_lora(str(lora))
    reset_peak()
    ev = capstone.measure(check.model, check.tokenizer, problems, check.system, check.tags,
                          max_new_tokens=check.max_completion, use_vllm=True, lora_path=lora)
    return {"problems": ev.n, "format_rate": ev.format_rate, "mean_tokens": ev.mean_tokens}


def grpo(check: Check) -> dict:
    """11's section 8: GRPO on the seed's rewards, a few steps."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from course_utils import capstone, data
    if check.model is None:
        raise Skip("no model: the load failed")
    r = dataclasses.replace(check.recipe, steps=check.args.grpo_steps)
    problems = data.load_jsonl("arithmetic", "train")[r.prime_problems:r.prime_problems + 4 * r.steps * r.prompts_per_step]
    args = capstone.grpo_config(r, check.profile, check.work / "grpo", max_completion_length=check.max_completion,
                                use_vllm=check.has_vllm, optim=check.optim, logging_steps=1)
    trainer = GRPOTrainer(model=check.model, reward_funcs=capstone.seed_reward_funcs(check.tags), args=args,
                          train_dataset=Dataset.from_list(capstone.rl_rows(problems, check.system)),
                          processing_class=check.tokenizer)
    out = {"use_vllm": args.use_vllm, "epsilon_high": args.epsilon_high, "bf16": args.bf16, "fp16": args.fp16,
           "completions_per_step": args.per_device_train_batch_size, "max_completion_length": check.max_completion,
           **timed_training(trainer)}
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    out["mean_completion_tokens"] = lengths
    return out


def estimate(check: Check) -> dict:
    from course_utils import memory
    est = memory.estimate("11", MODEL_ID)
    return {"estimate_peak_gib": est.peak_gib, "estimate_note": est.note,
            "vllm_standby_share": memory.vllm_standby_share(check.record_total_gib)
            if getattr(check, "record_total_gib", None) else None}


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.site:                      # carried wheels fill gaps: the machine's own packages come first
        sys.path.append(str(Path(args.site).resolve()))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("UNSLOTH_DISABLE_STATISTICS", "1")
    os.environ.setdefault("UNSLOTH_VLLM_STANDBY", "1")            # as notebook 11 sets it
    import torch

    from course_utils.run_config import no_cuda_reason, seed_everything   # torch alone: unsloth still comes first
    if not args.tiny and not torch.cuda.is_available():
        sys.exit(f"no CUDA device: {no_cuda_reason()}. (On a CPU: --tiny tests the script.)")
    unsloth_error = None
    if not (args.tiny or args.plain):
        try:
            import unsloth  # noqa: F401  (first: it patches transformers / TRL / PEFT at import)
        except Exception as error:
            unsloth_error = f"{type(error).__name__}: {error}"[:2000]
    record = Record(Path(args.out))
    check = Check(args, unsloth_error)
    seed_everything(check.profile.seed)
    env = record.step("environment", lambda: environment(check, unsloth_error))
    check.record_total_gib = env.get("total_gib")
    record.step("build the model", lambda: build_model(check))
    record.step("load (FastLanguageModel + LoRA)" if check.unsloth else "load (transformers + PEFT LoRA)",
                lambda: load_model(check))
    record.step("priming SFT", lambda: prime(check))
    record.step("held-out measurement (vLLM)", lambda: evaluate(check))
    record.step("GRPO", lambda: grpo(check))
    record.step("estimate", lambda: estimate(check))
    failed = [name for name, step in record.data["steps"].items() if step["status"] == "error"]
    print(f"wrote {record.out} in {record.data['wall_seconds']:.0f} s; "
          + (f"errors in: {', '.join(failed)}" if failed else "no step failed"))
    return record.data


if __name__ == "__main__":
    main()
