"""The GPU memory check: 05's PPO, 06's DPO and 07's GRPO for a few steps on a random-initialised Qwen3-0.6B, with the
``gpu`` profile's recipes: step time, tokens/s and peak VRAM per notebook, against ``course_utils.memory``'s estimate.

The GPU machine has no internet, so nothing is downloaded: the model is built from Qwen3-0.6B's config (random
weights, in bfloat16 as a hub checkpoint loads, then cast as the notebook casts it: the policies of 05-07 are float32)
and the tokenizer is the course's own (trained from data/ in a few seconds). The model keeps Qwen3's 151,936-entry
vocabulary, so the logits are full size; the tokenizer decodes only its first ~600 ids, so a sampled completion reads
as a short string (rewards 0: the memory and the time are what is measured, not learning). A random model almost never
samples the EOS token, so every completion runs to the recipe's length limit: the worst case the estimate sizes.
06 trains on synthetic pairs long enough to reach ``max_length`` (its self-generated pairs need a trained model).

    python scripts/gpu_memory_check.py                 # on the GPU: writes results/gpu/memory_check.json
    python scripts/gpu_memory_check.py --tiny --out /tmp/check.json    # on a CPU, tiny sizes: the same code path

``scripts/gpu_memory_check.sh`` installs TRL and datasets from ``wheels/`` first (``scripts/fetch_gpu_wheels.sh``).
Sized for a few minutes on one data-centre GPU (generation dominates: 3 x 256 tokens for PPO, 3 x 512 for GRPO,
in fp32);
the JSON is rewritten after each notebook, so a run cut short keeps what it measured.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))                       # course_utils without installing it

import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from course_utils import data, dpo, grpo, memory, modeling, ppo, rewards, training  # noqa: E402
from course_utils.chat import chat_prompt  # noqa: E402
from course_utils.environment import environment_record  # noqa: E402
from course_utils.run_config import Profile, seed_everything  # noqa: E402
from course_utils.recipes import recipe_for  # noqa: E402

MODEL_ID = "Qwen/Qwen3-0.6B"
GIB = 2 ** 30
# --tiny: the GPU recipes with their lengths and batches cut to what two CPU cores run in seconds
TINY = {"ppo": dict(rollouts_per_step=4, minibatch_size=2, max_new_tokens=8),
        "dpo": dict(batch_size=2, max_length=48),
        "grpo": dict(prompts_per_step=2, num_generations=2, max_completion_length=8)}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true",
                        help="a tiny Qwen3 on the CPU (tests the script, measures no memory)")
    parser.add_argument("--out", default=str(ROOT / "results" / "gpu" / "memory_check.json"), help="the JSON written")
    parser.add_argument("--ppo-steps", type=int, default=3)
    parser.add_argument("--dpo-steps", type=int, default=5)
    parser.add_argument("--grpo-steps", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=["05", "06", "07"], choices=["05", "06", "07"])
    return parser.parse_args(argv)


class StepTimer(TrainerCallback):
    """Wall seconds of every optimizer step (GRPO's generation included: it runs inside the step)."""

    def __init__(self, device):
        self.device, self.seconds, self._t0 = device, [], None

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def on_step_begin(self, args, state, control, **kwargs):
        self._sync()
        self._t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self._sync()
        self.seconds.append(time.perf_counter() - self._t0)


class Check:
    """The models, tokenizer, profile and device shared by the three runs."""

    def __init__(self, tiny: bool):
        self.tiny = tiny
        self.device = torch.device("cpu" if tiny else "cuda")
        self.tokenizer = modeling.train_tokenizer()
        tok = self.tokenizer
        ids = dict(pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
        if tiny:
            self.config = modeling.tiny_qwen3_config(len(tok), **ids)
            self.profile = Profile(name="cpu-tiny", model_id=None, seed=0, device="cpu", dtype=torch.float32,
                                   threads=torch.get_num_threads())
        else:
            self.config = memory.qwen3_config(MODEL_ID, **ids)
            self.profile = replace(memory.gpu_profile(MODEL_ID), threads=torch.get_num_threads())
        self.gpu_profile = memory.gpu_profile(MODEL_ID)   # the recipes: always the gpu profile's
        self.problems = data.load_jsonl("arithmetic", "train")

    def recipe(self, stage: str, steps: int):
        recipe = recipe_for(stage, self.gpu_profile, steps=steps)
        return replace(recipe, **TINY[stage]) if self.tiny else recipe

    def build(self, head: str = "causal_lm", seed: int = 0):
        """A random Qwen3 on the device in bfloat16 (as a hub checkpoint loads; float32 on --tiny)."""
        from transformers import Qwen3ForCausalLM, Qwen3ForSequenceClassification
        torch.manual_seed(seed)
        dtype = torch.float32 if self.tiny else torch.bfloat16
        with torch.device(self.device):
            if head == "causal_lm":
                model = Qwen3ForCausalLM._from_config(self.config, dtype=dtype)
                model.generation_config.pad_token_id = self.tokenizer.pad_token_id
                model.generation_config.eos_token_id = self.tokenizer.eos_token_id
            else:
                config = self.config.__class__.from_dict(self.config.to_dict())
                config.num_labels = 1
                model = Qwen3ForSequenceClassification._from_config(config, dtype=dtype)
        return model

    def prompt_tokens(self, problems) -> int:
        return max(len(self.tokenizer(chat_prompt(self.tokenizer, p["question"]), add_special_tokens=False)
                       ["input_ids"]) for p in problems)

    # ----------------------------------------------------------------------------------------------- measuring
    def reset_memory(self):
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        return self.allocated()

    def allocated(self) -> float:
        return torch.cuda.memory_allocated() / GIB if self.device.type == "cuda" else 0.0

    def peak(self) -> dict:
        if self.device.type != "cuda":
            return {"peak_allocated_gib": None, "peak_reserved_gib": None}
        return {"peak_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
                "peak_reserved_gib": torch.cuda.max_memory_reserved() / GIB}


def summary(seconds: list[float], tokens: list[float], generated: list[float] | None = None) -> dict:
    """Step times and throughput; the first step (CUDA warm-up, allocator growth) is left out of the means when
    there are more."""
    steady = slice(1, None) if len(seconds) > 1 else slice(None)
    mean_s = sum(seconds[steady]) / len(seconds[steady])
    out = {"step_seconds": seconds, "mean_step_seconds": mean_s, "tokens_per_step": tokens,
           "tokens_per_second": sum(tokens[steady]) / sum(seconds[steady])}
    if generated is not None:
        out["generated_tokens_per_step"] = generated
        out["generated_tokens_per_second"] = sum(generated[steady]) / sum(seconds[steady])
    return out


def compare(check: Check, estimate: memory.Estimate, phases: list[str], measured: dict, baseline_gib: float) -> dict:
    """The estimate of the phases this script runs, next to the measured peak."""
    run = [p for p in estimate.phases if p.name in phases]
    peak = estimate.static + max(p.total for p in run)
    out = {"estimate_gib": peak / GIB, "estimate_static_gib": estimate.static / GIB,
           "estimate_phases_gib": {p.name: {"activations": p.activations / GIB, "logits": p.logits / GIB,
                                            "kv_cache": p.kv_cache / GIB, "total": p.total / GIB} for p in run},
           "estimate_settings": estimate.settings, "allocated_before_gib": baseline_gib}
    if measured.get("peak_allocated_gib"):
        out["measured_over_estimate"] = measured["peak_allocated_gib"] / out["estimate_gib"]
    return out


# --------------------------------------------------------------------------------------------------- the runs
def run_ppo(check: Check, steps: int) -> dict:
    """05: the course's PPO loop (ppo.train) with the fp32 policy, critic and reference and 03's bf16 reward model."""
    recipe = check.recipe("ppo", steps)
    problems = check.problems[:steps * recipe.rollouts_per_step]
    policy = check.build(seed=1).float()
    reference = check.build(seed=1).float().eval().requires_grad_(False)
    value_model = check.build("score", seed=1).float()
    reward_model = check.build("score", seed=2).eval().requires_grad_(False)   # held in memory, as 05 does
    baseline = check.reset_memory()
    history = ppo.train(policy, value_model, reference, check.tokenizer, problems, ppo.verifier_scores, recipe,
                        seed=0, progress=False)
    measured = check.peak()
    seconds = [h["seconds"] - (history[i - 1]["seconds"] if i else 0.0) for i, h in enumerate(history)]
    p = check.prompt_tokens(problems)
    generated = [recipe.rollouts_per_step * h["length"] for h in history]
    tokens = [recipe.rollouts_per_step * p + g for g in generated]
    est = memory.estimate("05", MODEL_ID, config=check.config, recipe=recipe, prompt_tokens=p)
    result = {"notebook": "05_ppo", "recipe": asdict(recipe), "prompt_tokens": p, **measured,
              **summary(seconds, tokens, generated),
              **compare(check, est, ["rollout: generation", "rollout: scoring", "update"], measured, baseline)}
    del policy, reference, value_model, reward_model, history
    return result


def dpo_rows(n: int, length: int) -> list[dict]:
    """``n`` preference pairs whose answers are longer than ``length`` tokens (the course tokenizer splits digits)."""
    digits = "0123456789" * (length // 10 + 2)
    return [dpo.pair_row(f"What is {i} plus {i + 1}?", " ".join(digits), " ".join(reversed(digits))) for i in range(n)]


def run_dpo(check: Check, steps: int, out_dir: Path) -> dict:
    """06: TRL's DPOTrainer with the fp32 policy and reference (stages.load_policy_and_reference casts both)."""
    recipe = check.recipe("dpo", steps)
    policy = check.build(seed=1).float()
    reference = check.build(seed=1).float().eval().requires_grad_(False)
    rows = dpo_rows(steps * recipe.batch_size, recipe.max_length)
    trainer = training.dpo_trainer(policy, reference, check.tokenizer, check.profile, recipe, out_dir / "dpo", rows,
                                   logging_steps=1)
    seconds, tokens, measured, baseline = train_measured(check, trainer)
    p = check.prompt_tokens([{"question": "What is 10 plus 11?"}])
    est = memory.estimate("06", MODEL_ID, config=check.config, recipe=recipe, prompt_tokens=p)
    result = {"notebook": "06_dpo", "recipe": asdict(recipe), **measured, **summary(seconds, tokens),
              **compare(check, est, ["update"], measured, baseline)}
    del policy, reference, trainer
    return result


def run_grpo(check: Check, steps: int, out_dir: Path) -> dict:
    """07: TRL's GRPOTrainer (the course's subclass) with a LoRA adapter on the fp32 policy (07's fresh_policy)."""
    recipe = check.recipe("grpo", steps)
    problems = check.problems[:steps * recipe.prompts_per_step]
    policy = check.build(seed=1).float()
    trainer = training.grpo_trainer(policy, check.tokenizer, check.profile, recipe, out_dir / "grpo",
                                    grpo.grpo_rows(problems), [rewards.accuracy_reward, rewards.format_reward],
                                    logging_steps=1)
    seconds, tokens, measured, baseline = train_measured(check, trainer)
    logs = [h for h in trainer.state.log_history if "num_tokens" in h]
    batch = recipe.prompts_per_step * recipe.num_generations
    generated = [batch * h.get("completions/mean_length", 0.0) for h in logs]
    p = check.prompt_tokens(problems)
    est = memory.estimate("07", MODEL_ID, config=check.config, recipe=recipe, prompt_tokens=p)
    result = {"notebook": "07_grpo", "recipe": asdict(recipe), "prompt_tokens": p, **measured,
              **summary(seconds, tokens, generated),
              **compare(check, est, ["rollout: generation", "update"], measured, baseline)}
    del policy, trainer
    return result


def train_measured(check: Check, trainer) -> tuple[list[float], list[float], dict, float]:
    """Train with a step timer from a fresh peak: ``(step seconds, tokens per step, peak memory, GiB before)``."""
    timer = StepTimer(check.device)
    trainer.add_callback(timer)
    baseline = check.reset_memory()
    trainer.train()
    return timer.seconds, _token_diffs(trainer.state.log_history, "num_tokens"), check.peak(), baseline


def _token_diffs(log_history: list[dict], key: str) -> list[float]:
    """Per-step counts from a trainer's cumulative ``key`` (logged every step)."""
    totals = [h[key] for h in log_history if key in h]
    return [t - (totals[i - 1] if i else 0) for i, t in enumerate(totals)]


def main(argv=None) -> dict:
    args = parse_args(argv)
    if not args.tiny and not torch.cuda.is_available():
        sys.exit("no CUDA device: run with --tiny on a CPU (that measures no memory), or on a GPU machine")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    seed_everything(0)
    t0 = time.perf_counter()
    check = Check(args.tiny)
    out = Path(args.out)
    out_dir = Path(tempfile.mkdtemp(prefix="gpu_memory_check_"))   # the trainers' output_dir (they save nothing)
    on_gpu = check.device.type == "cuda"
    record = {"model": MODEL_ID + (" (tiny config)" if args.tiny else " (random init, from its config)"),
              "device": torch.cuda.get_device_name(0) if on_gpu else "cpu",
              "total_gib": torch.cuda.get_device_properties(0).total_memory / GIB if on_gpu else None,
              "parameters": memory.parameter_count(check.config), "environment": environment_record(),
              "notebooks": {}}
    runs = {"05": lambda: run_ppo(check, args.ppo_steps), "06": lambda: run_dpo(check, args.dpo_steps, out_dir),
            "07": lambda: run_grpo(check, args.grpo_steps, out_dir)}
    for key in args.only:
        start = time.perf_counter()
        try:
            result = runs[key]()
        except torch.cuda.OutOfMemoryError as error:     # a finding, not a crash: record it and go on
            result = {"error": f"out of memory: {error}"[:500], **check.peak()}
        result["wall_seconds"] = time.perf_counter() - start
        record["notebooks"][key] = result
        print(json.dumps({key: {k: v for k, v in result.items() if not isinstance(v, (dict, list))}}, default=str))
        check.reset_memory()
        record["wall_seconds"] = time.perf_counter() - t0
        write(record, out)        # after each notebook: a run cut short by a timeout keeps what it measured
    print(f"wrote {out} in {record['wall_seconds']:.0f} s")
    return record


def write(record: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
