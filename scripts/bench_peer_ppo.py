"""Side by side, in one run: TRL 1.12's ``PPOTrainer`` and the course's own PPO on the same tiny model.

TRL removed ``PPOTrainer`` in 1.13 (the course pins 1.15), so the peer runs in a throw-away
environment that is not part of the course: TRL 1.12 unpacked beside the course's packages and
put first on the path. Run from the course checkout, after notebook 03 (or ``load_stage``)
has built ``sft_cold`` and ``reward``::

    .venv/bin/pip install --no-deps --target /tmp/trl112 trl==1.12.0
    PYTHONPATH=/tmp/trl112 HF_HUB_OFFLINE=1 .venv/bin/python scripts/bench_peer_ppo.py

Both train ``sft_cold`` against 03's reward model with one fixed set of PPO settings that TRL's trainer
can express (64 rollouts per step of at most 48
tokens, 4 PPO epochs of 2 minibatches, temperature 1, one learning rate for policy and critic)
for ``--steps`` iterations each, and the script prints seconds per step and rollouts per second of both and their ratio. Timings only: the two do
not share their random streams, so their learning curves are not compared here.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace

import torch


def course_ppo(steps: int, profile, recipe) -> float:
    from course_utils import data, ppo
    from course_utils.stages import load_stage

    policy, reference, value_model, tokenizer = ppo.load_models(profile)
    reward_model, _ = load_stage("reward", profile)
    reward_model.eval().requires_grad_(False)
    problems = data.load_jsonl("arithmetic", "train", n=2000)
    t0 = time.perf_counter()
    ppo.train(policy, value_model, reference, tokenizer, problems, ppo.reward_model_scores(reward_model, tokenizer),
              replace(recipe, steps=steps), seed=profile.seed, progress=False)
    return (time.perf_counter() - t0) / steps


def trl_ppo(steps: int, profile, recipe) -> float:
    import trl
    from datasets import Dataset
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    from course_utils import data, ppo
    from course_utils.chat import chat_prompt
    from course_utils.stages import load_stage

    assert trl.__version__.startswith("1.12"), f"needs TRL 1.12 first on the path, got {trl.__version__}"
    policy, reference, value_model, tokenizer = ppo.load_models(profile)
    tokenizer.padding_side = "left"   # TRL's PPO pads its prompt batches with the tokenizer: generation wants left
    reward_model, _ = load_stage("reward", profile)
    problems = data.load_jsonl("arithmetic", "train", n=2000)
    prompts = [chat_prompt(tokenizer, p["question"]) for p in problems]
    dataset = Dataset.from_dict({"input_ids": [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]})
    with tempfile.TemporaryDirectory() as out:
        args = PPOConfig(
            output_dir=out, per_device_train_batch_size=recipe.rollouts_per_step, gradient_accumulation_steps=1,
            num_mini_batches=recipe.rollouts_per_step // recipe.minibatch_size, num_ppo_epochs=recipe.ppo_epochs,
            local_rollout_forward_batch_size=recipe.rollouts_per_step, response_length=recipe.max_new_tokens,
            temperature=recipe.temperature, learning_rate=recipe.learning_rate, kl_coef=recipe.kl_coef,
            cliprange=recipe.clip_range, cliprange_value=recipe.clip_range_value, vf_coef=recipe.vf_coef,
            gamma=recipe.gamma, lam=recipe.lam, missing_eos_penalty=recipe.missing_eos_penalty, stop_token="eos",
            total_episodes=recipe.rollouts_per_step * steps, num_sample_generations=0, report_to="none",
            save_strategy="no", use_cpu=True, bf16=False, seed=profile.seed, logging_steps=1000,
            dataloader_num_workers=0)
        trainer = PPOTrainer(args=args, processing_class=tokenizer, model=policy, ref_model=reference,
                             reward_model=reward_model, value_model=value_model, train_dataset=dataset)
        t0 = time.perf_counter()
        trainer.train()
        return (time.perf_counter() - t0) / steps


def main() -> None:
    from course_utils.run_config import get_profile
    from course_utils.recipes import recipe_for

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    profile = get_profile("cpu-tiny")
    # the settings TRL's PPOTrainer can express (one learning rate for policy and critic), at the
    # epochs and temperature of the comparison in the README, whatever 05's recipe now says
    recipe = recipe_for("ppo", profile, ppo_epochs=4, temperature=1.0, learning_rate=2e-5, value_learning_rate=None)
    ours = course_ppo(args.steps, profile, recipe)
    peer = trl_ppo(args.steps, profile, recipe)
    n = recipe.rollouts_per_step
    print(f"threads {torch.get_num_threads()}, {args.steps} steps of {n} rollouts each")
    print(f"| PPO | s/step | rollouts/s |\n|---|---|---|\n| TRL 1.12 PPOTrainer | {peer:.2f} | {n / peer:.1f} |\n"
          f"| course ppo.train | {ours:.2f} | {n / ours:.1f} |")
    print(f"ratio (TRL / course): {peer / ours:.2f}x")


if __name__ == "__main__":
    main()
